"""Chain diagnostics of an LLC estimate, as readable warnings per instance. The thresholds of the
diagnostics that make λ̂ invalid (diverging and still-climbing chains, chains out of the basin) are the
caller's `ValidityLimits` (`headway.analysis.llc.validity`, a study's rules); those of the advisory
warnings, which only inform and never decide a claim's testability, are the module constants below."""

from __future__ import annotations

import math

import numpy as np

from headway.analysis.llc.settings import SGLDSettings
from headway.analysis.llc.validity import ValidityLimits

# Fewest draws per chain over which a climb is looked for: with fewer, its quarters hold one or two draws each.
MIN_DRAWS_FOR_TREND = 8
# Advisory: chains disagree when the between-chain std of the LLC exceeds DISAGREE_FRACTION × |mean LLC| and
# DISAGREE_NOISE_FACTOR × the spread each chain's own draw-to-draw noise explains (its standard
# error from BATCH_MEANS contiguous batch means, which allows for autocorrelation).
DISAGREE_FRACTION = 0.25
DISAGREE_NOISE_FACTOR = 2.0
BATCH_MEANS = 5
# Advisory: mean MALA acceptance below which the sampler is not calibrated in devinterp's sense (it calls step
# sizes with acceptance around 0.9-0.95 well calibrated). The energy is the minibatch one, as in
# devinterp, so with nβ ≫ 1 the batch-to-batch noise of nβ·L_B lowers the acceptance at any step size:
# the warning then says the sampler is far from exact, not by how much λ̂ is off; `calibration`
# measures that (on the sorting models no affordable setting reached 0.5; docs/study-sorting.md). Validity
# has its own, lower floor (`ValidityLimits.min_acceptance`).
MIN_ACCEPTANCE = 0.9


def diagnose(trace: np.ndarray, init: np.ndarray, per_chain: np.ndarray, mean: np.ndarray, died: np.ndarray,
             acceptance: np.ndarray, basin: np.ndarray, settings: SGLDSettings, limits: ValidityLimits) -> list[str]:
    """Readable warnings, instance by instance, in the order: non-finite, diverging, climbing,
    disagreeing chains, chains out of the basin (`basin` [E]: `validity.basin_fraction`), low MALA
    acceptance, negative LLC; diverging, climbing and out of the basin by `limits`."""
    messages: list[str] = []
    for e in range(trace.shape[0]):
        rise = trace[e] - init[e]
        finite = np.isfinite(per_chain[e])
        messages += _non_finite(e, died[e], settings)
        if finite.any():
            messages += _diverging(e, rise[finite], np.flatnonzero(finite), limits.diverge_factor)
            messages += _climbing(e, rise[finite], limits)
            messages += _disagreeing(e, rise[finite], per_chain[e, finite], settings.nbeta)
        if basin[e] >= limits.basin_fraction:
            messages.append(f"instance {e}: chains left the basin: the mean draw loss went {basin[e]:.0%} of the way "
                            "from L(w*) to the loss of a uniform guess; raise nbeta (a colder posterior) or "
                            "localization, or lower lr")
        if acceptance[e] < MIN_ACCEPTANCE:
            messages.append(f"instance {e}: mean MALA acceptance {acceptance[e]:.3g} < {MIN_ACCEPTANCE:g}: SGLD is not a "
                            "calibrated sampler of the tempered posterior here (too coarse a step or, as nβ "
                            "multiplies it, too much minibatch noise), so λ̂ may be biased; lower lr or raise "
                            "batch_size, and check that λ̂ holds (headway.analysis.llc.calibration)")
        if mean[e] < 0:
            messages.append(f"instance {e}: mean LLC {mean[e]:.4g} < 0: the samples found lower loss than w*; "
                            "w* may not be a local minimum (train longer), or lower lr or raise localization")
    return messages


def _non_finite(e: int, died: np.ndarray, settings: SGLDSettings) -> list[str]:
    out = []
    for chain in np.flatnonzero(died >= 0):
        step = int(died[chain])
        when = (f"draw {(step - settings.burnin) // settings.steps_between_draws} (step {step})"
                if step >= settings.burnin else f"burn-in step {step}")
        out.append(f"instance {e}: chain {chain} loss became non-finite at {when}; the chain was frozen and its "
                   "LLC is NaN; lower lr or raise localization")
    return out


def _quarters(rise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean rise of the third and of the fourth quarter of each chain's draws."""
    d = rise.shape[1]
    return rise[:, d // 2 : 3 * d // 4].mean(axis=1), rise[:, 3 * d // 4 :].mean(axis=1)


def _diverging(e: int, rise: np.ndarray, chains: np.ndarray, factor: float) -> list[str]:
    d = rise.shape[1]
    if d < 4:
        return []
    own = rise.mean(axis=1)
    median = float(np.median(own))
    _, last = _quarters(rise)
    spread = rise[:, : d // 2].std(axis=1)
    out = []
    for chain, mine, value, noise in zip(chains, own, last, spread):
        references = [r for r in (mine, median) if r > 0]
        if references and value > factor * (min(references) + noise):
            out.append(f"instance {e}: chain {chain} diverges: its last-quarter loss rise {value:.4g} is over "
                       f"{factor:g}× (the typical rise {min(references):.4g} + its early-draw spread "
                       f"{noise:.4g}); lower lr or raise localization")
    return out


def _climbing(e: int, rise: np.ndarray, limits: ValidityLimits) -> list[str]:
    c, d = rise.shape
    if c < 2 or d < MIN_DRAWS_FOR_TREND:
        return []
    third, fourth = _quarters(rise)
    climb = fourth - third
    noise = climb.std(ddof=1) / math.sqrt(c)
    level = abs(float(rise.mean()))
    if climb.mean() > limits.trend_fraction * level and climb.mean() > limits.trend_sigmas * noise:
        return [(f"instance {e}: draw losses are still climbing over the second half (last quarter "
                 f"{climb.mean():.4g} above the third, mean rise {level:.4g}); use more burnin or draws, "
                 "or lower lr or raise localization")]
    return []


def drift(trace: np.ndarray, init_loss: float) -> float:
    """How far λ̂ moved within the chains: λ̂ from the second half of the draws minus λ̂ from the first, as a share of
    λ̂ from all of them (`trace` [chains, draws] of draw losses; nβ cancels). A settled chain reads about 0 whatever
    its length; a slow climb that the quarter-to-quarter check (`_climbing`) lets pass shows here. NaN with fewer
    than two draws, a non-finite draw, or λ̂ ≤ 0."""
    trace = np.asarray(trace, dtype=float)
    if trace.ndim != 2 or trace.shape[1] < 2 or not np.isfinite(trace).all():
        return math.nan
    half = trace.shape[1] // 2
    level = float(trace.mean()) - init_loss
    if not level > 0:
        return math.nan
    return float(trace[:, trace.shape[1] - half:].mean() - trace[:, :half].mean()) / level


def _batch_means_se(rise: np.ndarray) -> np.ndarray:
    """Standard error of each chain's mean draw from BATCH_MEANS contiguous batch means."""
    batches = min(BATCH_MEANS, rise.shape[1])
    usable = rise.shape[1] // batches * batches
    means = rise[:, :usable].reshape(rise.shape[0], batches, -1).mean(axis=2)
    return means.std(axis=1, ddof=1) / math.sqrt(batches)


def _disagreeing(e: int, rise: np.ndarray, llcs: np.ndarray, nbeta: float) -> list[str]:
    if len(llcs) < 2 or rise.shape[1] < 2:
        return []
    spread = float(llcs.std(ddof=1))
    explained = nbeta * math.sqrt(float(np.mean(_batch_means_se(rise) ** 2)))
    mean = float(llcs.mean())
    if spread > DISAGREE_FRACTION * abs(mean) and spread > DISAGREE_NOISE_FACTOR * explained:
        return [(f"instance {e}: chains disagree: LLC std {spread:.4g} over chains vs mean {mean:.4g}, while "
                 f"each chain's own noise explains {explained:.4g}; use more burnin or draws, or more chains")]
    return []
