"""Development over training, for any task: which checkpoints an LLC trace visits, and each traced
run's stages and LLC peak from its metrics and its LLC trace (`headway.analysis.llc.trace` makes
the trace)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from headway.analysis.llc.validity import ValidityLimits, invalid_reasons, limited_reasons
from headway.analysis.stages import label_stages, stage_boundaries
from headway.analysis.statistics import normal_tail, z_score


def trace_steps(saved: list[int], count: int) -> list[int]:
    """`count` saved steps spread evenly in log(step): the first and last always included."""
    if len(saved) <= count:
        return list(saved)
    grid = np.log10(np.asarray(saved, dtype=float) + 1)
    wanted = np.linspace(grid[0], grid[-1], count)
    picked = sorted({int(np.argmin(np.abs(grid - w))) for w in wanted})
    return [saved[i] for i in picked]


@dataclass
class Development:
    """One traced run over training: its metrics and LLC rows, the stage boundaries and stages the
    stage rule finds, and where the LLC of its weight group (`weights`, the whole model by default) peaks among
    the valid checkpoints (`valid_llc`)."""

    run_id: str
    loss: pd.DataFrame  # the run's metrics rows, by step
    llc: pd.DataFrame  # the run's LLC trace rows, every weight group
    boundaries: pd.DataFrame  # stage_boundaries of the validation loss and the whole-model LLC
    stages: pd.DataFrame  # label_stages of the LLC boundaries
    peak_step: int  # -1 when no checkpoint is valid
    peak: float  # largest LLC of the group at the valid checkpoints (NaN: none)
    final: float  # the group's LLC at the last valid checkpoint
    rises_then_falls: bool  # the valid curve rises `fall` to an interior peak, then ends `fall` below it
    warnings: list[str]  # distinct SGLD diagnostics of the trace
    excluded: dict[int, str] = field(default_factory=dict)  # traced steps left out of the peak search → why
    start_step: int = -1  # the first valid checkpoint
    start: float = float("nan")  # its whole-model LLC
    p_rise: float = float("nan")  # one-sided p that the peak is above the start only by noise (z-test, see development)
    p_fall: float = float("nan")  # ... that the final value is below the peak only by noise
    bias: float = float("nan")  # the estimator's relative bias weighed into both (NaN: not measured, weighed as 0)
    weights: str = "all"  # the weight group whose LLC curve the peak, rise and fall are read from

    def summary(self, title: str) -> dict:
        """The JSON view of summary.json."""
        return {"run_id": self.run_id, "title": title, "boundaries": self.boundaries.to_dict("records"),
                "stages": self.stages.to_dict("records"), "llc_start_step": self.start_step, "llc_start": self.start,
                "llc_peak_step": self.peak_step, "llc_peak": self.peak, "llc_final": self.final,
                "llc_rises_then_falls": self.rises_then_falls, "llc_p_rise": self.p_rise, "llc_p_fall": self.p_fall,
                "llc_excluded": self.exclusions()}

    def exclusions(self) -> str:
        """The excluded checkpoints in words, grouped by reason, e.g. "steps 0–70 (12): λ̂ ≤ 0 …"."""
        reasons: dict[str, list[int]] = {}
        for step, reason in sorted(self.excluded.items()):
            reasons.setdefault(reason, []).append(step)
        return "; ".join(f"step {steps[0]}" + (f"–{steps[-1]} ({len(steps)} checkpoints)" if len(steps) > 1 else "")
                         + f": {reason}" for reason, steps in reasons.items())


def applied_bias(bias: float) -> float:
    """The estimator's relative bias as the LLC tests weigh it: the measured value, 0 when not measured (NaN)."""
    return 0.0 if math.isnan(bias) else bias


def valid_llc(whole: pd.DataFrame, limits: ValidityLimits, resolved_only: bool = False) -> pd.Series:
    """Per whole-model trace row, why its λ̂ cannot place a turning point ("" when it can): the sampler checks
    of `headway.analysis.llc.validity.invalid_reasons` at `limits` (λ̂ ≤ 0 or undefined, no standard error
    recorded, a chain non-finite or diverged, draw losses still climbing, λ̂ above d/2, chains out of the basin of
    w*, MALA acceptance below its floor), each named in the reason, then, with `resolved_only`, resolution
    (`limited_reasons`: a lower bound of the LLC cannot say where the LLC itself peaks). Without it a turning point
    is one of λ̂ at the trace's stated nβ and γ, every checkpoint estimated at the same settings."""
    invalid = invalid_reasons(whole, limits)
    return invalid.where(invalid != "", limited_reasons(whole, limits)) if resolved_only else invalid


def development(run_id: str, metrics: pd.DataFrame, trace: pd.DataFrame, fall: float, validity: ValidityLimits,
                significant: float = 2.0, bias: float = math.nan, resolved_only: bool = False,
                weights: str = "all") -> Development:
    """The Development of `run_id` from the gathered metrics and LLC trace tables. The peak, rise and fall
    are read from the checkpoints valid by the `validity` limits only (`valid_llc`, resolved ones only with
    `resolved_only`): the peak must be above the
    first valid checkpoint and the last valid one below it, each by `fall` of the peak and by `significant` times the
    uncertainty of the difference, which adds to the two standard errors (`llc_se`, sampling noise) the
    estimator's relative `bias` (measured on models of known LLC; NaN: not measured, weighed as 0, and
    recorded as the Development's `bias` either way) of each value; no valid checkpoint before the peak means
    no rise. `p_rise` and `p_fall` are the one-sided normal p-values of the two differences over that
    uncertainty (NaN where it is 0: `z_score`). `weights` names the weight group whose curve is read (the whole
    model by default; e.g. "L0H1" for a head's restricted LLC), the Development's `weights`."""
    loss = metrics[metrics.run_id == run_id].sort_values("step")
    llc = trace[trace.run_id == run_id]
    whole = llc[llc.weights == weights].sort_values("step")
    why = valid_llc(whole, validity, resolved_only)
    valid = (why == "").to_numpy()
    values = np.where(valid, whole.llc_mean.to_numpy(dtype=float), np.nan)
    steps = whole.step.to_numpy()
    boundaries = stage_boundaries(loss.step.to_numpy(), loss.val_loss.to_numpy(), steps, values)
    stages = label_stages(boundaries[boundaries.source == "llc"], steps, values)
    excluded = {int(step): reason for step, reason in zip(steps, why) if reason}
    messages = sorted({w for w in llc.warnings if w})
    if not valid.any():
        return Development(run_id, loss, llc, boundaries, stages, -1, float("nan"), float("nan"), False, messages,
                           excluded, bias=bias, weights=weights)
    se = whole.llc_se.to_numpy(dtype=float)
    index = np.flatnonzero(valid)
    first, last, peak = index[0], index[-1], index[np.argmax(values[index])]

    weight = applied_bias(bias)

    def z(high: int, low: int) -> float:
        noise = math.sqrt(se[high] ** 2 + se[low] ** 2 + (weight * values[high]) ** 2 + (weight * values[low]) ** 2)
        return z_score(values[high] - values[low], noise)

    def clear(high: int, low: int) -> bool:
        return bool(values[high] - values[low] >= fall * values[peak] and z(high, low) > significant)

    interior = bool(first < peak < last)
    holds = interior and clear(peak, first) and clear(peak, last)
    p_rise = normal_tail(z(peak, first)) if peak > first else 1.0
    p_fall = normal_tail(z(peak, last)) if peak < last else 1.0
    return Development(run_id, loss, llc, boundaries, stages, int(steps[peak]), float(values[peak]),
                       float(values[last]), holds, messages, excluded, int(steps[first]), float(values[first]),
                       p_rise, p_fall, bias, weights)
