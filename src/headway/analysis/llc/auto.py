"""SGLD settings chosen per model: read off the Hessian spectrum at w* so that the estimate resolves its basin, then
checked by the sampler's own criteria on the model itself, and recorded with why, or refused with the reason.

The quadratic prediction of λ̂ depends on the settings only through γ/nβ (`resolution.Spectrum.shortfall`), so the
spectrum fixes that ratio: the largest at which at most half the accepted shortfall (`ValidityLimits.max_shortfall`)
of the curved basin goes unseen. nβ stays the caller's (the temperature: devinterp's B/ln B by default) and
γ = ratio·nβ. The step puts the stiffest direction at ε·nβ·h_max = STEP_SCALE, the default settings' step for unit
curvature; the burn-in lets the variance of a direction at the resolution edge (h = γ/nβ, relaxing at 4εγ) come
within e^-RELAXATIONS of equilibrium, and as many draws follow. When that is more than `max_steps`, the ratio is
raised to what the budget can relax, and the estimate will say it is resolution-limited rather than pretend.

Then the setting must pass on the model: no invalid reason (`validity.invalid_reasons`: a basin, acceptance or ceiling
failure, chains that diverged or still climb) and a mean MALA acceptance at the floor — a failing try halves ε and
doubles the steps, within the budget — and λ̂ must be resolved (standard error within `STABLE` of it) and stable: at
ε/2 over the same sampling time, at twice γ (a λ̂ that the localisation still shapes, as where a singular model's
higher-order directions carry part of it, is not resolved) and at twice the batch (half the minibatch noise, which the
spectrum does not see: at a large nβ it heats the chains), it moves by less than `STABLE` or three standard errors of
the difference. No qualifying setting: refused, with the last reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from torch import Tensor, nn

from headway.analysis.llc.calibration import STABLE
from headway.analysis.llc.estimate import LLCResult, anchor_loss, estimate_llc
from headway.analysis.llc.module_ensemble import ModuleLossFn
from headway.analysis.llc.resolution import Spectrum, hessian_spectrum
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta
from headway.analysis.llc.validity import ValidityLimits, refusal
from headway.errors import ConfigError

STEP_SCALE = 0.2  # ε·nβ·h_max: the stiffest direction's step (the defaults take 0.08 for unit curvature; the tanh
# member reads +2% at 0.3)
RELAXATIONS = 4.0  # burn-in: the resolution edge's variance within e^-4 (98%) of its equilibrium
TRIES = 3  # settings tried, each with half the step of the one before, before the model is refused
MAX_STEPS = 20_000  # default budget of SGLD steps per chain, burn-in and draws together


@dataclass(frozen=True)
class AutoChoice:
    """The settings chosen for a model (None: refused), why, and every try with its numbers."""

    settings: SGLDSettings | None
    reason: str  # what the spectrum asked for and what passed; or why nothing qualified
    result: LLCResult | None  # the estimate at the chosen settings (refused: at the last one tried), with its resolution
    tries: pd.DataFrame  # one row per try and instance: role, lr, nbeta, localization, burnin, draws, llc_mean,
    # llc_se, acceptance, invalid, limited, passed

    def to_dict(self) -> dict:
        """The choice as a results file records it: the settings (or None), the reason and the tries."""
        return {"settings": None if self.settings is None else self.settings.stored_dict(), "reason": self.reason,
                "tries": self.tries.to_dict(orient="records")}


def edge_ratio(spectrum: Spectrum, target: float) -> float:
    """The largest γ/nβ at which every instance's curved basin is unseen by at most `target` (bisection on a log
    scale; the shortfall falls as the ratio does); the stiffest eigenvalue when no instance has curvature."""
    top = float(np.nanmax(spectrum.stiffest))
    if not np.isfinite(spectrum.shortfall(top)).any():
        return top
    low, high = math.log(top * 1e-12), math.log(top)
    for _ in range(60):
        middle = 0.5 * (low + high)
        worst = np.nanmax(spectrum.shortfall(math.exp(middle)))
        low, high = (middle, high) if worst <= target else (low, middle)
    return math.exp(low)


def proposed(base: SGLDSettings, stiffest: float, ratio: float, max_steps: int) -> tuple[SGLDSettings, float]:
    """Settings at γ/nβ = `ratio` for a basin whose stiffest curvature is `stiffest` (module docstring), with the
    ratio the budget allowed (raised where `max_steps` cannot relax the edge)."""
    nbeta = default_nbeta(base.batch_size) if base.nbeta is None else base.nbeta
    lr = STEP_SCALE / (nbeta * stiffest)
    ratio = max(ratio, RELAXATIONS * stiffest / (STEP_SCALE * max_steps))  # 4 × burn-in ≤ max_steps: the ε/2 check fits
    burnin = math.ceil(RELAXATIONS / (4 * lr * ratio * nbeta))
    return replace(base, lr=lr, nbeta=nbeta, localization=ratio * nbeta, burnin=burnin,
                   draws=max(base.draws, burnin)), ratio


def choose_settings(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                    base: SGLDSettings = SGLDSettings(), mask: Tensor | None = None,
                    validity: ValidityLimits = ValidityLimits(), max_steps: int = MAX_STEPS,
                    chance_loss: float | np.ndarray | None = None, precision: str = "fp32",
                    spectrum: Spectrum | None = None, rows: int | None = None, progress: bool = False,
                    compile_mode: str | None = None) -> AutoChoice:
    """Settings for every instance of `model` at w* (inputs as `estimate_llc`; `base` gives nβ, chains, batch and
    seed), from the Hessian `spectrum` (measured here on `rows` pool rows when not given; None: all) and checked as
    the module docstring says; `progress` shows a bar for each try, `compile_mode` compiles the tries' sampler
    (`estimate_llc`). A preconditioned base is refused: the step is set in weight units, for plain SGLD."""
    if base.preconditioner != "none":
        raise ConfigError(f"preconditioner = {base.preconditioner!r} cannot be chosen for: choose_settings sets plain "
                          "SGLD's step in weight units; give a base with preconditioner='none'")
    spectrum = spectrum or hessian_spectrum(model, loss_fn, tokens, targets, base, mask, rows=rows)
    stiffest = float(np.nanmax(spectrum.stiffest))
    if not np.isfinite(spectrum.shortfall(stiffest)).any():  # no curvature: nothing to resolve, the base is tried
        settings, why = base, f"no curved direction at w* (largest eigenvalue {stiffest:.3g}): the base settings"
    else:
        wanted = edge_ratio(spectrum, validity.max_shortfall / 2)
        settings, ratio = proposed(base, stiffest, wanted, max_steps)
        why = (f"h_max = {stiffest:.3g}; γ/nβ = {ratio:.3g} leaves {np.nanmax(spectrum.shortfall(ratio)):.0%} of "
               "the curved basin unseen" + ("" if ratio == wanted else f" (the {max_steps}-step budget could not "
                                                                      f"relax γ/nβ = {wanted:.3g})"))
    anchor = anchor_loss(model, loss_fn, tokens, targets, base, precision)
    tried: list[pd.DataFrame] = []
    results: list[LLCResult] = []

    def attempt(role: str, trial: SGLDSettings) -> pd.DataFrame:
        result = estimate_llc(model, loss_fn, tokens, targets, trial, mask=mask, init_loss=anchor,
                              precision=precision, chance_loss=chance_loss, validity=validity, progress=progress,
                              desc=f"LLC settings: {role}", compile_mode=compile_mode)
        results.append(replace(result, resolution=spectrum.resolution(trial)))
        frame = results[-1].to_frame()[["instance", "llc_mean", "llc_se", "acceptance", "invalid", "limited"]]
        frame = frame.assign(role=role, **{name: getattr(trial, name) for name in
                                           ("lr", "nbeta", "localization", "burnin", "draws")})
        frame["passed"] = (frame.invalid == "") & (frame.acceptance >= validity.min_acceptance)
        tried.append(frame)
        return frame

    def refused(reason: str) -> AutoChoice:
        return AutoChoice(None, reason, replace(results[-1], refused=refusal(reason)),
                          pd.concat(tried, ignore_index=True))

    for _ in range(TRIES):
        frame = attempt("try", settings)
        if frame.passed.all():
            break
        failing = frame[~frame.passed].iloc[0]
        last = failing.invalid or f"MALA acceptance {failing.acceptance:.2f} below {validity.min_acceptance:g}"
        settings = halved(settings)
        if settings.steps > max_steps:
            return refused(f"{why}; {last}, and half the step would take {settings.steps} steps, over the budget "
                           f"of {max_steps}")
    else:
        return refused(f"{why}; {last} after {TRIES} tries")
    chosen = results[-1]
    if halved(settings).steps > max_steps:
        return refused(f"{why}; the stability check at ε/2 would take {halved(settings).steps} steps, over the "
                       f"budget of {max_steps}")
    loose = frame.llc_se.to_numpy() > STABLE * np.abs(frame.llc_mean.to_numpy())
    if loose.any():  # a λ̂ this noisy would pass any stability check on its standard errors alone
        worst = int(np.argmax(loose))
        return refused(f"{why}; λ̂ of instance {worst} = {frame.llc_mean.iloc[worst]:.4g} ± "
                       f"{frame.llc_se.iloc[worst]:.2g} is not resolved to {STABLE:.0%} (more chains or draws)")
    pool = tokens.shape[1] if hasattr(model, "flat") else tokens.shape[0]  # a headway ensemble's pools are [E, N, …]
    batch = min(2 * settings.batch_size, pool)  # the minibatch check: twice the batch, or the whole pool
    neighbours = [("ε/2", halved(settings)), ("2γ", replace(settings, localization=2 * settings.localization))]
    neighbours += [(f"batch {batch}", replace(settings, batch_size=batch))] if batch > settings.batch_size else []
    for role, neighbour in neighbours:
        check = attempt(role, neighbour)
        change = np.abs(check.llc_mean.to_numpy() - frame.llc_mean.to_numpy())
        noise = 3 * np.hypot(check.llc_se.to_numpy(), frame.llc_se.to_numpy())
        stable = (change <= np.maximum(STABLE * np.abs(frame.llc_mean.to_numpy()), noise)) & check.passed.to_numpy()
        if not stable.all():
            worst = int(np.argmax(~stable))
            return refused(f"{why}; λ̂ of instance {worst} moved from {frame.llc_mean.iloc[worst]:.4g} to "
                           f"{check.llc_mean.iloc[worst]:.4g} at {role}, more than {STABLE:.0%} and three standard "
                           "errors")
    tries = pd.concat(tried, ignore_index=True)
    return AutoChoice(settings, f"{why}; ε = {settings.lr:.3g}, {settings.burnin} + {settings.draws} steps passed "
                                f"and λ̂ held at " + " and ".join(role for role, _ in neighbours), chosen, tries)


def halved(settings: SGLDSettings) -> SGLDSettings:
    """`settings` with half the step over the same sampling time (twice the burn-in and draws)."""
    return replace(settings, lr=settings.lr / 2, burnin=2 * settings.burnin, draws=2 * settings.draws)
