"""The verdict on each claim of the list-sorting paper, computed from the study's tables alone."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd

from headway.analysis.development import Development
from headway.analysis.statistics import wilson_interval
from headway.studies.sorting.tables import ADEQUATE_POWER, LEARNED, LLC_FALL, SIGNIFICANT, SortingTables
from headway.studies.verdict import Verdict, share_status
from headway.tasks.sorting.modes import MODES

GAP_CLAIM = "The gap distribution of the training data decides the final mode"


def verdicts(tables: SortingTables) -> list[Verdict]:
    """Every claim the tables can speak to, in report order."""
    final = tables.final
    sensitivity = threshold_sensitivity(tables)
    by_modes = [replace(v, evidence=f"{v.evidence} {sensitivity_text(sensitivity, v.claim, v.status)}")
                if len(sensitivity) else v for v in mode_verdicts(final, tables.weight_decays)]
    checks = (learns_to_sort(final), *by_modes, gap_decides_mode(tables.gap_test, tables.fractions),
              llc_rises_then_falls(tables))
    return [verdict for verdict in checks if verdict is not None]


def mode_verdicts(final: pd.DataFrame, weight_decays: tuple[float, ...]) -> list[Verdict]:
    """The verdicts that rest on each model's mode alone, in report order."""
    return [splitting_with_and_without_decay(final, weight_decays), simple_modes(final),
            copy_suppression_found(final)]


def threshold_sensitivity(tables: SortingTables) -> pd.DataFrame:
    """Per mode-based verdict and swept threshold value: its status with every model's mode read at
    that value (columns claim, threshold, value, status)."""
    rows = []
    sweep = tables.sweep if len(tables.sweep) else pd.DataFrame(columns=["run_id", "threshold", "value", "mode"])
    for (name, value), frame in sweep.groupby(["threshold", "value"], sort=False):
        final = tables.final.drop(columns="mode").merge(frame[["run_id", "mode"]], on="run_id")
        rows += [{"claim": v.claim, "threshold": name, "value": value, "status": v.status}
                 for v in mode_verdicts(final, tables.weight_decays)]
    return pd.DataFrame(rows, columns=["claim", "threshold", "value", "status"])


def sensitivity_text(sensitivity: pd.DataFrame, claim: str, status: str) -> str:
    """Over which swept values of each threshold the verdict on `claim` keeps `status`, and where it flips."""
    parts = []
    for name, frame in sensitivity[sensitivity.claim == claim].groupby("threshold", sort=False):
        values = {s: ", ".join(f"{v:g}" for v in group.value) for s, group in frame.groupby("status", sort=False)}
        if set(values) == {status}:
            parts.append(f"{name} — same status at every value swept ({frame.value.min():g}–{frame.value.max():g})")
        else:
            flips = [f"{other} at {shown}" for other, shown in values.items() if other != status]
            parts.append(f"{name} — " + ", ".join([f"same status at {values.get(status, 'none')}", *flips]))
    return f"Threshold sweep: {'; '.join(parts)}."


def decay_label(wd: float) -> str:
    """How a weight decay is named in evidence: 'wd 0.005' or 'no wd'."""
    return f"wd {wd:g}" if wd else "no wd"


def share_text(count: int, total: int) -> str:
    """'k/n (lo–hi)': a count with the Wilson 95% interval of its fraction."""
    low, high = wilson_interval(count, total)
    return f"{count}/{total} ({low:.2f}–{high:.2f})"


def training_text(final: pd.DataFrame) -> str:
    """How many runs learned, with the accuracies behind it (the Training section says the same)."""
    learned = final[final.val_accuracy >= LEARNED]
    return (f"{len(learned)} of {len(final)} runs reach ≥ {LEARNED:.0%} per-token validation accuracy "
            f"(lowest {final.val_accuracy.min():.3f}; whole lists right: median {final.val_list_accuracy.median():.3f}; "
            f"greedy decoding: median per-token {final.ar_token_accuracy.median():.3f}).")


def learns_to_sort(final: pd.DataFrame) -> Verdict:
    learned = final[final.val_accuracy >= LEARNED]
    return Verdict("A one-layer attention-only transformer learns to sort",
                   "reproduced" if len(learned) == len(final) else "partly reproduced", training_text(final))


def splitting_with_and_without_decay(final: pd.DataFrame, weight_decays: tuple[float, ...]) -> Verdict:
    counts = {wd: final[(final.weight_decay == wd) & (final["mode"] == "splitting")].shape[0] for wd in weight_decays}
    both = all(counts.values()) and len(counts) > 1
    return Verdict("Vocabulary-splitting appears with and without weight decay",
                   "reproduced" if both else "not reproduced",
                   "; ".join(f"{decay_label(wd)}: {n} splitting model(s)" for wd, n in counts.items()))


def simple_modes(final: pd.DataFrame) -> Verdict:
    simple = final["mode"].isin(["splitting", "copy_suppression"])
    return Verdict("Heads settle into vocabulary-splitting or copy-suppression rather than overlapping ranges",
                   "reproduced" if simple.mean() > 0.5 else "not reproduced",
                   f"{simple.mean():.0%} of models split or copy-suppress, {share_text(int(simple.sum()), len(final))} "
                   "with its Wilson 95% interval; " + ", ".join(f"{m}: {(final['mode'] == m).sum()}" for m in MODES))


def copy_suppression_found(final: pd.DataFrame) -> Verdict:
    pairs = final[final["mode"] == "copy_suppression"]
    return Verdict("Copy-suppression (one head copies, another suppresses) is one of the two main modes",
                   "reproduced" if len(pairs) else "not reproduced",
                   f"{len(pairs)} of {len(final)} models ({share_text(len(pairs), len(final))} with its Wilson 95% "
                   "interval); largest suppressed fraction of any head: "
                   f"{final.filter(like='suppress_fraction').max().max():.2f}")


def gap_decides_mode(test: dict | None, fractions: pd.DataFrame) -> Verdict | None:
    """The pre-specified gap test (`tables.gap_test`): reproduced when its combined p < SIGNIFICANT;
    a null result refutes the claim only when the design had ADEQUATE_POWER for the stated effect,
    else the claim was not testable at this scale."""
    if test is None:
        return None
    low, high = test["power_effect"]
    rule = (f"Refuted unless p < {SIGNIFICANT:g} in one test fixed in advance: at each weight decay, Pearson's χ² "
            "of the mode × data table of the learned runs over all data values, p from "
            f"{test['permutations']} permutations of the data labels, the weight decays combined by Šidák "
            f"(p = 1 − (1 − smallest p)^{len(test['per_decay'])}); a null result counts as a refutation only if "
            f"the design detects one mode's fraction moving from {low:g} to {high:g} across the δ̄ range with "
            f"power ≥ {ADEQUATE_POWER:.0%}. ")
    per = "; ".join(f"{decay_label(s['weight_decay'])}: χ² = {s['chi2']:.1f} over {s['runs']} learned runs at "
                    f"{s['data_values']} data values, p = {s['p_value']:.3g}" for s in test["per_decay"])
    found = f"{rule}{per}; combined p = {test['p_value']:.3g}. {_largest_change(fractions)}"
    if test["p_value"] < SIGNIFICANT:
        return Verdict(GAP_CLAIM, "reproduced", found)
    power = test["power"]
    status = "not reproduced" if power >= ADEQUATE_POWER else "not testable"
    return Verdict(GAP_CLAIM, status, f"{found} Power of this design (the same learned runs per cell) to detect "
                   f"one mode's fraction moving linearly in δ̄ from {low:g} to {high:g} at every weight decay: "
                   f"{power:.2f} ({test['power_studies']} simulated studies).")


def _largest_change(fractions: pd.DataFrame) -> str:
    """The mode and weight decay whose fraction changes most across data values, with Wilson intervals:
    a description of the table, not a test (the selection would make its p-value meaningless)."""
    best = None
    for (wd, mode), group in fractions.groupby(["weight_decay", "mode"]):
        low, high = group.loc[group.fraction.idxmin()], group.loc[group.fraction.idxmax()]
        if group.data.nunique() > 1 and (best is None or high.fraction - low.fraction > best[0]):
            best = (high.fraction - low.fraction, wd, mode, low, high)
    if best is None:
        return ""
    change, wd, mode, low, high = best
    return (f"Largest change of a mode's fraction (descriptive, Wilson 95% intervals): {mode}, {decay_label(wd)}: "
            f"{share_text(int(low['count']), int(low.n))} at {low.data} vs "
            f"{share_text(int(high['count']), int(high.n))} at {high.data}.")


def llc_rises_then_falls(tables: SortingTables) -> Verdict | None:
    """Stated before looking: refuted for a traced run unless, among its valid checkpoints (λ̂ > 0, no
    chain diverged or went non-finite), the whole-model LLC rises to an interior peak at least LLC_FALL
    above the first valid checkpoint and ends at least LLC_FALL below it, each change beyond 2 standard
    errors (`headway.analysis.development.development`). Reproduced when every traced run (all seeds of
    every traced condition) holds, partly when some do; the evidence groups the seeds by condition and
    names the checkpoints left out and why."""
    if not tables.development:
        return None
    rule = (f"Refuted unless, among valid checkpoints (λ̂ > 0, no chain diverged or went non-finite), the "
            f"whole-model LLC rises ≥ {LLC_FALL:.0%} to an interior peak and then ends ≥ {LLC_FALL:.0%} below "
            "it (each change also beyond 2 standard errors).")
    conditions: dict[str, list] = {}
    for traced in tables.development:
        row = traced.loss.iloc[-1]
        label = f"{traced.llc.data.iloc[0]}, {'wd ' + format(row.weight_decay, 'g') if row.weight_decay else 'no wd'}"
        conditions.setdefault(label, []).append(traced)
    parts = []
    for label, runs in conditions.items():
        seeds = "; ".join(f"seed {int(t.loss.iloc[-1].seed)}: {_llc_course(t)}" for t in runs)
        parts.append(f"{label}: {sum(t.rises_then_falls for t in runs)} of {len(runs)} seeds ({seeds})")
    return Verdict("The LLC rises during initial learning and falls while the heads specialise",
                   share_status([t.rises_then_falls for t in tables.development]), rule + " " + ". ".join(parts) + ".")


def _llc_course(traced: Development) -> str:
    """One traced run's valid LLC curve in words: start, peak, end, the verdict on it and what was left out."""
    left_out = f" [left out: {traced.exclusions()}]" if traced.excluded else ""
    if traced.peak_step < 0:
        return "no valid checkpoint" + left_out
    if traced.peak_step == traced.start_step:
        shape = "no rise: the peak is the first valid checkpoint"
    elif traced.final == traced.peak:
        shape = "no fall: the peak is the last valid checkpoint"
    elif traced.rises_then_falls:
        shape = "rises, then falls"
    else:
        shape = "no clear rise and fall"
    return (f"λ̂ {traced.start:.0f} at step {traced.start_step}, peak {traced.peak:.0f} at step {traced.peak_step}, "
            f"final {traced.final:.0f} ({traced.final / traced.peak - 1:+.0%}): {shape}{left_out}")
