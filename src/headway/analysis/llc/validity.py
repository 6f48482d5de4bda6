"""When an LLC estimate is no estimate: the checks that make a λ̂ invalid, each a named limit with its
reason, read from `LLCResult.to_frame()` rows or LLC trace rows (`headway.analysis.llc.trace`).

λ̂ describes the basin of w*: the chains must settle there, stay there, and move by steps fine enough
for the posterior they sample. An estimate is invalid when λ̂ ≤ 0 or undefined (w* is no local
minimum), when no standard error was recorded, when a chain went non-finite or diverged, when the
chains left the basin (`ValidityLimits.basin_fraction`), when their draw losses were still climbing (the
diagnostic `_climbing` of `headway.analysis.llc.diagnostics`), or when the mean MALA acceptance is
below `ValidityLimits.min_acceptance`.

The two limits are one frozen `ValidityLimits`, defined here once with the values measured on the
known-answer suite; a study carries them as rules (`headway.studies.llc_rules.LLCRules`, each with its
reason and sweep) and passes its own to every function that decides validity, so a limit changed in the
study is the limit applied (and, as the trace stores `invalid`, part of the analysis stamp).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
import pandas as pd


@dataclass(frozen=True)
class ValidityLimits:
    """The limits beyond which the sampler's own measurements make λ̂ no estimate: the three `invalid_reasons`
    applies to a row's numbers (basin, acceptance, ceiling), the three after which a diagnostic of
    `INVALID_WARNINGS` (a diverging or still-climbing chain) fires, and the shortfall beyond which the settings'
    resolution makes λ̂ a lower bound (`limited_reasons`). The defaults are the estimator's own (measured on the
    known-answer suite, `headway.analysis.llc.known_answers`)."""

    # Chains whose mean draw loss went this share of the way from L(w*) to the loss of a uniform guess sample the
    # loss landscape at large, not the basin λ̂ describes (on the known-answer suite, right estimates reach 0.23,
    # on rank-1 teachers that beat the zero map by only 0.5 nats; the modular study's chains at chance reach ~1).
    basin_fraction: float = 0.5
    # Mean MALA acceptance (minibatch energy, as devinterp scores it) below which the step is too coarse: with nβ
    # times the batch-to-batch noise of the loss worth nats, the score of a sampler whose λ̂ is right sits near 0.5
    # (0.52-0.61 on the known-answer suite at the default settings), so devinterp's 0.9 cannot be the line; on the
    # suite it fell below 0.4 only where λ̂ was ≥ 29% off (ε 10× the default). No upper limit: a high acceptance
    # means a fine step, which costs time but not accuracy.
    min_acceptance: float = 0.4
    # A chain diverges (`diagnostics._diverging`, which `INVALID_WARNINGS` reads) when the mean rise
    # (loss − init_loss) of its last quarter of draws exceeds diverge_factor × (a reference rise + the std of its
    # own first-half draws). The reference is the smaller positive one of its own whole-trace mean rise and the
    # median over the instance's chains of theirs. A settled chain's last quarter stays near both; an exploding
    # chain's last quarter dominates its own mean (and the others' when it explodes alone).
    diverge_factor: float = 3.0
    # An instance's chains are still climbing (`diagnostics._climbing`) when, averaged over chains, the fourth
    # quarter's mean loss exceeds the third quarter's by more than trend_fraction × the mean rise AND by more than
    # trend_sigmas standard errors of that difference across chains (chains are independent, so their spread
    # measures the noise whatever the autocorrelation within a chain).
    trend_fraction: float = 0.1
    trend_sigmas: float = 4.0
    # No basin of d moving weights gives λ̂ above d/2 (each direction counts at most ½ at any nβ and γ: ½ for a
    # quadratic one, less for a flatter one): an estimate above ceiling × d/2 comes from chains that left w*'s basin,
    # the check that needs no chance loss. 1.15: the error the estimator is held to on its known-answer suite (a
    # regular model's right estimate reads d/2 within it: 18.6-20.0 for 20, 13.2 for 13).
    ceiling: float = 1.15
    # The share of the curved basin (`headway.analysis.llc.resolution`) an estimate may leave unseen and still be read
    # as λ̂ rather than a lower bound: the same 15%.
    max_shortfall: float = 0.15

    def to_dict(self) -> dict[str, float]:
        """The limits by name, for a cache stamp (`headway.analysis.llc.trace.llc_trace`)."""
        return dataclasses.asdict(self)


# Diagnostics (`headway.analysis.llc.diagnostics` warnings, by a phrase they contain) after which λ̂ is no
# estimate, and the reason given for each.
INVALID_WARNINGS = {"diverges": "a chain diverged", "non-finite": "a chain went non-finite",
                    "still climbing": "draw losses still climbing: the chains had not settled"}


# Why λ̂ ≤ 0 (or undefined) is no estimate: a property of the checkpoint, not of the sampler.
NOT_A_MINIMUM = "λ̂ ≤ 0 or undefined: w* is not a local minimum"


# The limits every trace and estimate stamped before they became settings was judged by (they were fixed values of
# the code): a stored LLC trace without them in its stamp is still valid while the limits hold these values.
BEFORE_SETTINGS = {"basin_fraction": 0.5, "min_acceptance": 0.4, "diverge_factor": 3.0, "trend_fraction": 0.1,
                   "trend_sigmas": 4.0}


def basin_fraction(init_loss: np.ndarray, draw_loss: np.ndarray, chance_loss: np.ndarray) -> np.ndarray:
    """How far the chains went from L(w*) towards the chance-level loss: (mean draw loss − L(w*)) /
    (chance loss − L(w*)); NaN where the chance loss is unknown or w* does not beat it (no basin to leave)."""
    init, draw, chance = (np.asarray(v, dtype=float) for v in (init_loss, draw_loss, chance_loss))
    gap = chance - init
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(gap > 0, (draw - init) / gap, np.nan)


# How `headway.analysis.llc.stability.model_stability` turns the runs' stability into one bias, kept here (light,
# read by the studies' rules without the sampler): the largest difference, or the pooled bound on their mean.
BIAS_STATISTICS = ("largest", "pooled")
REFUSED = "no SGLD setting qualified"  # how an estimate at settings whose choice was refused is marked invalid


def refusal(reason: str) -> str:
    """The invalid reason of every estimate at settings chosen per model when none qualified, for `reason`."""
    return f"{REFUSED}: {reason}"


def invalid_reasons(rows: pd.DataFrame, limits: ValidityLimits) -> pd.Series:
    """Per row, why its λ̂ is invalid ("" when it is valid), the first that applies of: λ̂ ≤ 0 or undefined
    (undefined because every chain broke: that diagnostic's reason), no standard error, a diagnostic of
    `INVALID_WARNINGS`, λ̂ above `limits.ceiling` × d/2 of its `moving_weights`, chains out of the basin
    (`limits.basin_fraction`), MALA acceptance below `limits.min_acceptance`. Rows need llc_mean; a row without
    llc_se has no standard error, and the checks whose columns (warnings, moving_weights, basin_fraction,
    acceptance) are absent are skipped, as for rows written before they existed. A row whose stored `invalid`
    says its settings' choice was refused (`refusal`) keeps that reason: no limit makes such an estimate valid."""
    def reason(row) -> str:
        stored = getattr(row, "invalid", "")
        if isinstance(stored, str) and stored.startswith(REFUSED):
            return stored
        text = row.warnings if isinstance(getattr(row, "warnings", None), str) else ""
        fired = next((why for key, why in INVALID_WARNINGS.items() if key in text), "")
        if not np.isfinite(row.llc_mean):
            return fired or NOT_A_MINIMUM  # every chain broke, or none ran
        if row.llc_mean <= 0:
            return NOT_A_MINIMUM
        se = getattr(row, "llc_se", np.nan)
        if not (isinstance(se, int | float) and np.isfinite(se)):
            return "no standard error recorded"
        if fired:
            return fired
        moving = getattr(row, "moving_weights", np.nan)
        if np.isfinite(moving) and row.llc_mean > limits.ceiling * moving / 2:
            return (f"λ̂ = {row.llc_mean:.4g} is above d/2 = {moving / 2:g} of its {moving:g} moving weights (by more "
                    f"than ×{limits.ceiling:g}), more than any basin allows: the chains left w*'s basin")
        fraction = getattr(row, "basin_fraction", np.nan)
        if np.isfinite(fraction) and fraction >= limits.basin_fraction:
            return (f"chains left the basin: their draws gave back ≥ {limits.basin_fraction:.0%} of what w* gains "
                    "over a uniform guess")
        acceptance = getattr(row, "acceptance", np.nan)
        if np.isfinite(acceptance) and acceptance < limits.min_acceptance:
            return f"MALA acceptance below {limits.min_acceptance:g}: the SGLD step is too coarse"
        return ""

    if rows.empty:
        return pd.Series([], index=rows.index, dtype=str)
    return rows.apply(reason, axis=1).astype(str)


def limited_reasons(rows: pd.DataFrame, limits: ValidityLimits) -> pd.Series:
    """Per row, why the resolution check cannot vouch for its λ̂ ("" when it can): a `shortfall` (the share of the
    curved basin its settings leave unseen, `headway.analysis.llc.resolution`) beyond `limits.max_shortfall` (λ̂ is
    a lower bound), else λ̂ above the check's own quadratic prediction (`quadratic_llc`) by more than that share and
    two standard errors (the loss within the chains' reach is not the quadratic of its Hessian at w*, as for
    cross-entropy near zero loss, so the check predicts nothing about it). The reason names the limit, not the
    row's numbers (they are its columns): a spectrum measured with another thread count differs in its last digits,
    and the reasons a verdict quotes must not. Rows without a shortfall (no resolution measured, or written before
    it existed) are not judged."""
    if "shortfall" not in rows.columns:
        return pd.Series("", index=rows.index, dtype=str)
    beyond = rows.shortfall.to_numpy(dtype=float) > limits.max_shortfall
    reason = np.where(beyond, f"resolution-limited: more than {limits.max_shortfall:.0%} of the curved basin unseen "
                      "at these settings (the Hessian's quadratic prediction against its γ → 0 limit); λ̂ is a lower "
                      "bound", "")
    if "quadratic_llc" in rows.columns:
        value, predicted = rows.llc_mean.to_numpy(dtype=float), rows.quadratic_llc.to_numpy(dtype=float)
        se = rows.llc_se.to_numpy(dtype=float) if "llc_se" in rows.columns else np.zeros(len(rows))
        with np.errstate(invalid="ignore"):
            above = value - 2 * np.nan_to_num(se) > (1 + limits.max_shortfall) * predicted
        reason = np.where((reason == "") & above, f"not quadratic: λ̂ is above the Hessian's quadratic prediction "
                          f"at these settings by more than {limits.max_shortfall:.0%} and two standard errors (the "
                          "loss within the chains' reach is not the quadratic of its Hessian at w*), so the "
                          "resolution check cannot vouch for it", reason)
    return pd.Series(reason, index=rows.index, dtype=str)
