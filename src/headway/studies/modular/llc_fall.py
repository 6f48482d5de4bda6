"""The numbers behind the LLC claim: each traced run's rise and fall as shares of its peak, with their
standard errors (the chains' noise plus the estimator's relative bias), and whether its estimates can carry
a fall (`unreadable`)."""

from __future__ import annotations

import math

import pandas as pd

from headway.analysis.development import Development, applied_bias
from headway.analysis.llc.stability import LAST, PEAK, SETTLED, stability_steps
from headway.analysis.llc.validity import NOT_A_MINIMUM, ValidityLimits


def stability_points(fall_at: str) -> tuple[str, str]:
    """Where the traced models' stability is compared (`headway.analysis.llc.stability`): the claim reads the fall
    from the peak to the checkpoint the rule `llc_fall_at` names (`fall_at`: the last, or the last settled) against
    the control's; the rise (about all of the peak) is not in doubt, and the first valid λ̂, a few units, carries
    chain noise of 10-40% of itself that would swamp a relative difference."""
    return PEAK, SETTLED if fall_at == "settled" else LAST


def fall_steps(trace: pd.DataFrame, fall_at: str, validity: ValidityLimits) -> dict[str, int] | None:
    """Run id → the checkpoint its fall is read at when the rule `llc_fall_at` (`fall_at`) is "settled"
    (`stability_steps` by `validity`; a run without one is absent), None when the fall is read at each run's last
    valid checkpoint."""
    if fall_at != "settled" or not len(trace):
        return None
    return {run: points[SETTLED] for run, points in stability_steps(trace, validity, stability_points(fall_at)).items()}


LLC_COLUMNS = ["run_id", "train_fraction", "weight_decay", "seed", "grokked", "generalised_step", "start_step",
               "start", "peak_step", "peak", "final_step", "final", "rise", "rise_se", "fall", "fall_se",
               "peak_candidates", "p_rise", "p_fall", "rises_then_falls", "invalid", "excluded", "bias"]


def unreadable(traced: Development) -> str:
    """Why `traced` cannot carry a fall ("" when it can): no valid checkpoint (with why each was left out), or one
    after the peak left out for a reason that says the settings fail on this run (chains out of the basin, diverged,
    still climbing, too coarse a step, or, where the study reads resolved estimates only, a lower bound): the fall
    would be read past them. A checkpoint where w* is no local minimum (`NOT_A_MINIMUM`: training mid-spike, as
    grokking runs at weight decay 1 are at times) has no λ̂ but says nothing of the sampler; it is left out of the
    curve and does not block the fall."""
    if traced.peak_step < 0:
        return f"no valid checkpoint ({traced.exclusions()})"
    after = sorted(step for step, why in traced.excluded.items() if step > traced.peak_step and why != NOT_A_MINIMUM)
    if not after:
        return ""
    reasons = sorted({traced.excluded[step] for step in after})
    return (f"{len(after)} checkpoint(s) after its peak at step {traced.peak_step} are invalid (steps "
            f"{', '.join(map(str, after))}: {'; '.join(reasons)})")


def share_se(part_noise: float, part: float, peak_noise: float, peak: float) -> float:
    """The first-order standard error of the share 1 − part / peak, from the noise of `part` and of `peak`: an
    error in the peak moves the share by part / peak of itself, so where the model has fallen far it barely
    counts (a fall's share is read against the peak it fell from, not their difference)."""
    return math.hypot(part_noise, part / peak * peak_noise) / peak


def llc_table(developments: list[Development], runs: pd.DataFrame,
              read_at: dict[str, int] | None = None) -> pd.DataFrame:
    """One row per traced run (LLC_COLUMNS): its grid coordinates and grokking, its first valid, peak and last
    valid λ̂, the rise (peak − start) / peak with the standard error of its difference over the peak (each value's
    SE and the bias its Development was weighed with × value, in quadrature, as `development` weighs them; the
    rise's p is development's test of that difference) and the fall (peak − final) / peak with the share's own
    standard error (`share_se`, the same noises), development's p-values, how many valid checkpoints after the first the peak
    was chosen from (the rise's p is selected over them), why its fall is unreadable ("" when it is not), and
    that bias (NaN: not measured, weighed as 0). `read_at` (run id → step, `fall_steps`) reads each fall at that
    checkpoint instead of the last valid one; a run it lacks, or whose step is not after its peak, has no settled
    checkpoint to read and its fall is unreadable."""
    meta = runs.set_index("run_id")
    rows = []
    for traced in developments:
        whole = traced.llc[traced.llc.weights == "all"].set_index("step")
        valid = [int(step) for step in whole.index if int(step) not in traced.excluded]
        final_step = max(valid) if valid else -1
        invalid = unreadable(traced)
        if read_at is not None and not invalid:
            final_step = read_at.get(traced.run_id, -1)
            if final_step not in valid or final_step <= traced.peak_step:
                invalid = (f"no settled checkpoint after its peak at step {traced.peak_step} (none valid whose "
                           "training loss at w* is known and did not rise since the checkpoint before it)")
        final = traced.final if read_at is None or invalid else float(whole.loc[final_step, "llc_mean"])
        bias = applied_bias(traced.bias)

        def noise(step: int) -> float:
            value, se = float(whole.loc[step, "llc_mean"]), float(whole.loc[step, "llc_se"])
            return math.hypot(se, bias * value)

        row = meta.loc[traced.run_id]
        readable = traced.peak_step >= 0 and (read_at is None or not invalid)
        peak_noise = noise(traced.peak_step) if readable else math.nan
        rows.append({
            "run_id": traced.run_id, "train_fraction": row.train_fraction, "weight_decay": row.weight_decay,
            "seed": int(row.seed), "grokked": bool(row.grokked), "generalised_step": row.generalised_step,
            "start_step": traced.start_step, "start": traced.start, "peak_step": traced.peak_step, "peak": traced.peak,
            "final_step": final_step, "final": final,
            "rise": (traced.peak - traced.start) / traced.peak if readable else math.nan,
            "rise_se": math.hypot(peak_noise, noise(traced.start_step)) / traced.peak if readable else math.nan,
            "fall": (traced.peak - final) / traced.peak if readable else math.nan,
            "fall_se": share_se(noise(final_step), final, peak_noise, traced.peak) if readable else math.nan,
            "peak_candidates": max(0, len(valid) - 1), "p_rise": traced.p_rise, "p_fall": traced.p_fall, "rises_then_falls": traced.rises_then_falls,
            "invalid": invalid, "excluded": traced.exclusions(), "bias": traced.bias})
    return pd.DataFrame(rows, columns=LLC_COLUMNS).astype({"grokked": bool, "rises_then_falls": bool})
