"""The verdict on each claim of the list-sorting paper, computed from the study's tables and its rules alone.

Each claim is a test set before the tables are judged (a `Finding`: its null, test, p-value and the power to detect its
stated effect, every number a field of `SortingRules`), and `judge` decides them together, Holm-corrected
(`headway.studies.verdict`). Each declares the columns it reads (`checked_claim`), so a missing value in
any of them makes it not testable, and is registered once, with its id, in `CLAIMS`. docs/study-sorting.md,
"Claims and verdicts", gives the reasons.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headway.analysis.development import Development
from headway.analysis.statistics import (binomial_power, binomial_tail, normal_power, stratified_shortfall,
                                         wilson_interval)
from headway.studies.llc_bias import weighed_bias_text
from headway.studies.sorting.rise_fall import RunTest, claim_power, run_level, run_test
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.tables import SortingTables, gap_power_at
from headway.studies.verdict import (Claim, Finding, StudyClaim, Verdict, check, checked_claim, intersection_union,
                                     judge, present, reads, registered_findings, registry, verify)
from headway.analysis.sorting.modes import MODES

LEARNS_CLAIM = "A one-layer attention-only transformer learns to sort"
SPLITTING_CLAIM = "Vocabulary-splitting appears with and without weight decay"
SIMPLE_CLAIM = "Heads settle into vocabulary-splitting or copy-suppression rather than overlapping ranges"
COPY_SUPPRESSION_CLAIM = "Copy-suppression (one head copies, another suppresses) is one of the two main modes"
GAP_CLAIM = "The gap distribution of the training data decides the final mode"
LLC_CLAIM = "The LLC rises during initial learning and falls while the heads specialise"
SIMPLER_CLAIM = ("Vocabulary-splitting and copy-suppression are simpler (a lower final LLC) than heads covering "
                 "overlapping ranges")
SIMPLE_MODES = ("splitting", "copy_suppression")
SIMPLER_SEED = 20_261_128  # seeds the simpler-modes test's permutations, so a report is reproducible


def verdicts(tables: SortingTables, rules: SortingRules) -> list[Verdict]:
    """Every registered claim judged together, in report order (`CLAIMS`)."""
    return judge(registered_findings(CLAIMS, tables, rules), rules)


def decay_label(wd: float) -> str:
    """How a weight decay is named in evidence: 'wd 0.005' or 'no wd'."""
    return f"wd {wd:g}" if wd else "no wd"


def share_text(count: int, total: int) -> str:
    """'k/n (lo–hi)': a count with the Wilson 95% interval of its fraction."""
    low, high = wilson_interval(count, total)
    return f"{count}/{total} ({low:.2f}–{high:.2f})"


def training_text(final: pd.DataFrame, learned: float) -> str:
    """How many runs learned, with the accuracies behind it (the Training section says the same)."""
    count = int((final.val_accuracy >= learned).sum())
    return (f"{count} of {len(final)} runs reach ≥ {learned:.0%} per-token validation accuracy "
            f"(lowest {final.val_accuracy.min():.3f}; whole lists right: median {final.val_list_accuracy.median():.3f}; "
            f"greedy decoding: median per-token {final.ar_token_accuracy.median():.3f}).")


def learned_text(final: pd.DataFrame, learned: float) -> str:
    """How many runs learned, with the best accuracy: why a claim about learned runs has none to count."""
    return (f"{int((final.val_accuracy >= learned).sum())} of {len(final)} runs reach ≥ {learned:.0%} per-token "
            f"validation accuracy (highest {final.val_accuracy.max():.3f}).")


def binomial_finding(claim: Claim, count: int, total: int, null: float, effect: float, evidence: str) -> Finding:
    """A claim tested by the exact one-sided binomial test of `count` of `total` against the rate `null`,
    with its power to detect the rate `effect`; evidence opens with the count and its Wilson interval."""
    return claim.finding(f"{share_text(count, total)} with its Wilson 95% interval; {evidence}",
                         binomial_tail(count, total, null), lambda level: binomial_power(total, null, effect, level))


# What 'learns to sort' reads of the final table: every run's accuracies (the per-token one tested, the others
# its evidence). The mode claims read every run's per-token accuracy, to tell the learned runs, and their modes;
# the suppressed fractions are evidence, where a head without one recorded shows as such.
ACCURACIES = ("val_accuracy", "val_list_accuracy", "ar_token_accuracy")
SUPPRESSED = {"suppress_fraction_*": "the head's suppressed fraction was not recorded (evidence only)"}


def learned_runs(final: pd.DataFrame, rules: SortingRules) -> pd.DataFrame:
    """The runs reaching `rules.learned` per-token validation accuracy: the only ones whose mode counts."""
    return final[final.val_accuracy >= rules.learned]


def _learns_test(rules: SortingRules) -> str:
    return (f"exact one-sided binomial test of the runs reaching ≥ {rules.learned:.0%} per-token validation "
            f"accuracy against H0: at most {rules.learning_null:g} of runs learn; stated effect: "
            f"{rules.learning_effect:g} of runs learn")


@checked_claim(LEARNS_CLAIM, _learns_test, final=reads(*ACCURACIES))
def learns_to_sort(final: pd.DataFrame, rules: SortingRules, *, claim: Claim) -> Finding:
    """H0: at most `learning_null` of the runs learn; stated effect `learning_effect`."""
    if final.empty:
        return claim.not_testable("no run was trained", "The table of runs is empty.")
    count = int((final.val_accuracy >= rules.learned).sum())
    return binomial_finding(claim, count, len(final), rules.learning_null, rules.learning_effect,
                            training_text(final, rules.learned))


def _splitting_test(rules: SortingRules) -> str:
    return (f"at each weight decay, exact one-sided binomial test of the splitting models among its learned runs "
            f"against H0: a splitting rate ≤ {rules.splitting_noise_rate:g} (a stated upper bound on how often the "
            "mode rule calls a model splitting by noise: it calls none of 300 untrained models so), the weight "
            f"decays combined by intersection–union (p = the largest); stated effect: {rules.splitting_effect:g} of "
            "the learned runs split at every weight decay")


@checked_claim(SPLITTING_CLAIM, _splitting_test, final=reads("val_accuracy", "weight_decay", "mode"))
def splitting_with_and_without_decay(final: pd.DataFrame, weight_decays: tuple[float, ...], rules: SortingRules,
                                     *, claim: Claim) -> Finding:
    """At each weight decay, H0: splitting among its learned runs at most at the noise rate; the claim needs
    every weight decay (intersection–union: p is the largest, power the product)."""
    null, effect = rules.splitting_noise_rate, rules.splitting_effect
    for wd in weight_decays:
        present("a weight decay of the plan", wd)
    if not any(wd == 0 for wd in weight_decays) or not any(wd > 0 for wd in weight_decays):
        missing = "without" if all(wd > 0 for wd in weight_decays) else "with"
        return claim.not_testable(f"the plan trains no run {missing} weight decay",
                                  f"Weight decays of the plan: {', '.join(f'{wd:g}' for wd in weight_decays)}.")
    learned = learned_runs(final, rules)
    counts = {wd: (int((learned[learned.weight_decay == wd]["mode"] == "splitting").sum()),
                   int((learned.weight_decay == wd).sum())) for wd in weight_decays}
    evidence = "; ".join(f"{decay_label(wd)}: {share_text(k, n)} learned runs split, p = "
                         f"{binomial_tail(k, n, null):.3g}" for wd, (k, n) in counts.items())
    empty = [decay_label(wd) for wd, (_, n) in counts.items() if n == 0]
    if empty:
        return claim.not_testable(f"no run learned at {', '.join(empty)}", evidence)
    return claim.finding(f"{evidence} (Wilson 95% intervals).",
                         intersection_union([binomial_tail(k, n, null) for k, n in counts.values()]),
                         lambda level: math.prod(binomial_power(n, null, effect, level) for _, n in counts.values()))


def _simple_test(rules: SortingRules) -> str:
    return (f"exact one-sided binomial test of the learned runs in a simple mode (splitting or copy-suppression) "
            f"against H0: a share ≤ {rules.simple_null:g}; stated effect: {rules.simple_effect:g} of learned runs")


@checked_claim(SIMPLE_CLAIM, _simple_test, final=reads("val_accuracy", "mode"))
def simple_modes(final: pd.DataFrame, rules: SortingRules, *, claim: Claim) -> Finding:
    """H0: at most `simple_null` of the learned runs split or copy-suppress; stated effect `simple_effect`."""
    learned = learned_runs(final, rules)
    if learned.empty:
        return claim.not_testable("no run learned", learned_text(final, rules.learned))
    modes = ", ".join(f"{m}: {(learned['mode'] == m).sum()}" for m in MODES)
    return binomial_finding(claim, int(learned["mode"].isin(SIMPLE_MODES).sum()), len(learned), rules.simple_null,
                            rules.simple_effect, f"learned runs by mode: {modes}.")


def _copy_suppression_test(rules: SortingRules) -> str:
    return (f"exact one-sided binomial test of the learned runs in copy-suppression against H0: a minor mode, a "
            f"share ≤ {rules.copy_suppression_null:g}; stated effect: a main mode, "
            f"{rules.copy_suppression_effect:g} of learned runs")


@checked_claim(COPY_SUPPRESSION_CLAIM, _copy_suppression_test,
               final=reads("val_accuracy", "mode", *SUPPRESSED, nullable=SUPPRESSED))
def copy_suppression_found(final: pd.DataFrame, rules: SortingRules, *, claim: Claim) -> Finding:
    """H0: copy-suppression is a minor mode (share ≤ `copy_suppression_null` of the learned runs)."""
    learned = learned_runs(final, rules)
    if learned.empty:
        return claim.not_testable("no run learned", learned_text(final, rules.learned))
    suppressed = learned.filter(like="suppress_fraction").to_numpy(dtype=float)
    largest = f"{np.nanmax(suppressed):.2f}" if np.isfinite(suppressed).any() else "not recorded"
    return binomial_finding(claim, int((learned["mode"] == "copy_suppression").sum()), len(learned),
                            rules.copy_suppression_null, rules.copy_suppression_effect,
                            f"largest suppressed fraction of any head: {largest}.")


def _strata(rules: SortingRules) -> list[str]:
    """The columns whose values the simpler-modes test compares runs within (`rules.simpler_within_data`)."""
    return ["weight_decay", "data"] if rules.simpler_within_data else ["weight_decay"]


def _simpler_test(rules: SortingRules) -> str:
    within = "weight decay and data" if rules.simpler_within_data else "weight decay"
    return (f"among the learned runs whose final λ̂ is valid ({rules.llc_reading()}), within each {within} "
            f"with ≥ {SIMPLER_STRATUM} such runs in each group, the share by which the simple modes' (splitting and "
            f"copy-suppression) mean λ̂ falls below the overlapping runs', combined over the {within} compared "
            "(weights n_simple·n_overlapping / n); "
            f"a one-sided permutation test that it is above zero, {rules.simpler_permutations} shuffles of the mode "
            f"labels within each {within} (each moves λ̂ and goes with the mode, so runs are compared "
            f"only with runs of their own {within}); each group needs ≥ {rules.simpler_min_runs} runs in those "
            f"compared. Stated effect: the simple modes' mean {rules.simpler_effect:.0%} below "
            "the overlapping runs', the power from a normal approximation with the runs' spread")


# What the simpler-modes claim reads of each learned run: its mode, weight decay and final LLC with why it is no
# estimate or only a lower bound (λ̂ itself only where it is neither).
FINAL_LLC = reads("val_accuracy", "mode", "weight_decay", "data", "llc", "llc_invalid", "llc_limited")
SIMPLER_STRATUM = 2  # usable runs each group needs within a condition for it to be compared (a spread to read)


@checked_claim(SIMPLER_CLAIM, _simpler_test, final=FINAL_LLC)
def simpler_modes_lower_llc(final: pd.DataFrame, rules: SortingRules, *, claim: Claim) -> Finding:
    """H0: within weight decays (and data, `rules.simpler_within_data`), the simple modes' mean final λ̂ is not
    below the overlapping runs'; invalid estimates are left out, and with `rules.llc_resolved_only` those the
    resolution check cannot vouch for (a lower bound of the LLC cannot order two models by it; without the rule the
    comparison is of λ̂ at the plan's stated nβ and γ); a condition is compared where each group has
    `SIMPLER_STRATUM` usable runs, and each group needs `simpler_min_runs` in those
    (`statistics.stratified_shortfall`)."""
    learned = learned_runs(final, rules)
    if learned.empty:
        return claim.not_testable("no run learned", learned_text(final, rules.learned))
    usable = learned[learned.llc_invalid == ""]
    if rules.llc_resolved_only:
        usable = usable[usable.llc_limited == ""]
    for value in usable.llc:
        present("a valid final λ̂", value)
    counted = (f"learned runs: {len(learned)}; final λ̂ invalid: {int((learned.llc_invalid != '').sum())}, "
               f"not vouched for by the resolution check: "
               f"{int(((learned.llc_invalid == '') & (learned.llc_limited != '')).sum())}"
               f"{' (left out)' if rules.llc_resolved_only else ' (read at the stated scale)'}")
    strata, described = [], []
    for key, group in usable.groupby(_strata(rules)):
        simple = group[group["mode"].isin(SIMPLE_MODES)].llc.to_numpy(dtype=float)
        overlapping = group[group["mode"] == "overlapping"].llc.to_numpy(dtype=float)
        compared = min(len(simple), len(overlapping)) >= SIMPLER_STRATUM
        label = decay_label(float(key[0])) + (f", {key[1]}" if rules.simpler_within_data else "")
        described.append(f"{label}: {len(simple)} simple"
                         + (f" (mean λ̂ {simple.mean():.4g})" if len(simple) else "")
                         + f", {len(overlapping)} overlapping"
                         + (f" (mean λ̂ {overlapping.mean():.4g})" if len(overlapping) else "")
                         + ("" if compared else f", not compared (fewer than {SIMPLER_STRATUM} in a group)"))
        if compared:
            strata.append((overlapping, simple))
    counted += f"; usable: {'; '.join(described) or 'none'}"
    if min(sum(len(s) for _, s in strata), sum(len(o) for o, _ in strata)) < rules.simpler_min_runs:
        return claim.not_testable(f"fewer than {rules.simpler_min_runs} usable final λ̂ in a group within the "
                                  "conditions compared", f"{counted}.")
    shortfall, noise, p_value = stratified_shortfall(strata, rules.simpler_permutations,
                                                     np.random.default_rng(SIMPLER_SEED))
    evidence = f"{counted}; the simple modes' mean λ̂ {shortfall:.1%} ± {noise:.1%} below the overlapping runs'."
    return claim.finding(evidence, p_value, lambda level: normal_power(rules.simpler_effect, noise, level))


def _gap_test(rules: SortingRules) -> str:
    return (f"at each weight decay, Pearson's χ² of the mode × data table of the learned runs over all data values, "
            f"p from {rules.gap_permutations} permutations of the data labels, the weight decays combined by Šidák "
            "(p = 1 − (1 − smallest p)^k over k weight decays); stated effect: one mode's fraction moving linearly "
            f"in δ̄ from {rules.gap_effect_low:g} to {rules.gap_effect_high:g} at every weight decay, the power read "
            f"off {rules.gap_power_studies} simulated studies of this design ({rules.gap_power_permutations} "
            "permutations each)")


@checked_claim(GAP_CLAIM, _gap_test, final=reads("val_accuracy", "weight_decay", "data", "mean_gap", "mode"),
               fractions=reads("weight_decay", "data", "mode", "fraction", "count", "n"))
def gap_decides_mode(gap_test: dict | None, final: pd.DataFrame, fractions: pd.DataFrame, rules: SortingRules,
                     *, claim: Claim) -> Finding:
    """The pre-specified gap test (`tables.gap_test`, computed from the learned runs of `final`: their weight
    decay, data value, mean gap and mode, each checked here), its power at any level read off the simulated
    studies of the same design (`tables.gap_power_at`)."""
    check(learned_runs(final, rules), "weight_decay", "data", "mean_gap", "mode")
    check(fractions, "weight_decay", "data", "mode", "fraction", "count", "n")  # every row is described
    if gap_test is None:
        cells = fractions.groupby(["weight_decay", "data"]).n.first() if len(fractions) else {}
        counted = "; ".join(f"{decay_label(wd)}, {data}: {n}" for (wd, data), n in cells.items()) or "none"
        return claim.not_testable("no weight decay has learned runs at two data values",
                                  f"Learned runs per weight decay and data value: {counted}.")
    for s in gap_test["per_decay"]:
        for key in ("weight_decay", "chi2", "runs", "data_values", "p_value"):
            present(f"the gap test's {key} at one weight decay", s.get(key))
    per = "; ".join(f"{decay_label(s['weight_decay'])}: χ² = {s['chi2']:.1f} over {s['runs']} learned runs at "
                    f"{s['data_values']} data values, p = {s['p_value']:.3g}" for s in gap_test["per_decay"])
    p_value = present("the gap test's combined p-value", gap_test.get("p_value"))
    evidence = f"{per}; combined p = {p_value:.3g}. {_largest_change(fractions)}"
    if not len(gap_test["simulated_p"]):
        return claim.not_testable("every data value has the same mean gap, so no effect of δ̄ can be simulated",
                                  evidence)
    for simulated in gap_test["simulated_p"]:
        present("the gap test's p-value in one simulated study", simulated)
    return claim.finding(evidence, p_value, lambda level: gap_power_at(gap_test, level))


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


def _llc_test(rules: SortingRules) -> str:
    return ("per traced run, one-sided z-tests that the whole-model LLC rises from its first valid checkpoint to "
            "its highest and falls from there to its last (over each difference's standard errors and the "
            f"estimator's bias: {rules.llc_bias_source_text()}), p = the larger of the two times the number of interior "
            f"valid checkpoints the peak was chosen from, and a run rises and falls when p ≤ {run_level(rules):.3g} "
            f"(z = {rules.llc_change_z:g}); across the usable runs, an exact one-sided binomial test of that count against "
            "the same rate. H0: no run's LLC rises and falls beyond noise and the estimator's bias (the study has no "
            f"control run). Stated effect: {rules.llc_effect_share:g} of the traced runs rise and fall, each by "
            f"{rules.llc_fall:.0%} of its peak; valid checkpoints: {rules.llc_reading()}")


# What the LLC claim reads of each traced run beyond its Development's numbers: its metrics' grid coordinates
# and its LLC trace (a checkpoint without a standard error is invalid and left out, so that one may be missing).
TRACED_METRICS = reads("weight_decay", "seed")
TRACE = reads("step", "weights", "data", "llc_se",
              nullable={"llc_se": "no standard error recorded: the checkpoint is invalid and left out"})


@checked_claim(LLC_CLAIM, _llc_test)
def llc_rises_then_falls(development: list[Development], rules: SortingRules, *, claim: Claim) -> Finding:
    """Each usable traced run tested for a rise and fall (`rise_fall.run_test`), with the estimator's bias
    each run's Development was weighed with; the runs that pass counted against the per-run level by an exact
    binomial test."""
    if not development:
        return claim.not_testable("no run was traced", "No run's LLC was estimated over training.")
    level = run_level(rules)
    for traced in development:
        verify(traced.loss, f"the metrics of traced run {traced.run_id}", TRACED_METRICS)
        verify(traced.llc, f"the LLC trace of run {traced.run_id}", TRACE)
    tested = {traced.run_id: run_test(traced, rules) for traced in development}
    for traced in development:
        if not tested[traced.run_id].unusable:
            for name in ("start", "peak", "final"):
                present(f"the {name} λ̂ of traced run {traced.run_id}", getattr(traced, name))
    courses = _courses(development, tested)
    shown = _bias_text(development, rules)
    usable = [t for t in tested.values() if not t.unusable]
    if not usable:
        return claim.not_testable("no traced run has a valid LLC curve to test", f"{courses}; {shown}.")
    if rules.llc_bias_source == "model" and any(math.isnan(traced.bias) for traced in development):
        return claim.not_testable("the traced models' own LLC stability, the bias this test weighs "
                                  "(llc_bias_source = model), was not measured on every testable run (an analysis "
                                  "made before the study measured it); analyse the runs again to measure it",
                                  f"{courses}; {shown}.")
    count = sum(t.counted for t in usable)
    evidence = (f"{share_text(count, len(usable))} usable traced runs rise and fall (Wilson 95% interval; "
                f"{len(tested) - len(usable)} of {len(tested)} traced runs unusable). {courses}; {shown}.")
    return claim.finding(evidence, binomial_tail(count, len(usable), level),
                         lambda alpha: claim_power([t.power for t in usable], rules, alpha))


def _bias_text(development: list[Development], rules: SortingRules) -> str:
    """The estimator's bias as the traced runs' tests weighed it, read off the runs themselves (`bias` of each
    Development: NaN when it was not measured), in words."""
    return weighed_bias_text(((f"run {traced.run_id}", traced.bias) for traced in development), rules)


def _courses(development: list[Development], tested: dict[str, RunTest]) -> str:
    """Every traced run's course and test in words, its seeds grouped by condition (data, weight decay)."""
    conditions: dict[str, list[str]] = {}
    for traced in development:
        row = traced.loss.iloc[-1]
        conditions.setdefault(f"{traced.llc.data.iloc[0]}, {decay_label(row.weight_decay)}", []).append(
            f"seed {int(row.seed)}: {_llc_course(traced, tested[traced.run_id])}")
    return ". ".join(f"{label}: {'; '.join(seeds)}" for label, seeds in conditions.items())


def _llc_course(traced: Development, tested: RunTest) -> str:
    """One traced run's valid LLC curve and its test in words: start, peak, end, p and what was left out."""
    left_out = f" [left out: {traced.exclusions()}]" if traced.excluded else ""
    if tested.unusable:
        return f"unusable: {tested.unusable}{left_out}"
    if traced.peak_step == traced.start_step:
        shape = "no rise: the peak is the first valid checkpoint"
    elif traced.final == traced.peak:
        shape = "no fall: the peak is the last valid checkpoint"
    else:
        shape = f"p_rise {traced.p_rise:.2g}, p_fall {traced.p_fall:.2g}, × {tested.candidates} candidate peaks"
    verdict = "rises and falls" if tested.counted else "does not pass"
    return (f"λ̂ {traced.start:.0f} at step {traced.start_step}, peak {traced.peak:.0f} at step {traced.peak_step}, "
            f"final {traced.final:.0f} ({traced.final / traced.peak - 1:+.0%}): {shape}, p = {tested.p:.2g}, "
            f"{verdict}{left_out}")


# The study's claims, in report order. The gap and LLC claims are held at the study's rules in the threshold
# sweep: the gap test's power is simulated (gap_power_studies × gap_power_permutations), too costly per value.
CLAIMS = registry(StudyClaim("learns-to-sort", learns_to_sort), StudyClaim("splitting", splitting_with_and_without_decay),
                  StudyClaim("simple-modes", simple_modes), StudyClaim("copy-suppression", copy_suppression_found),
                  StudyClaim("gap-decides-mode", gap_decides_mode, held=True),
                  StudyClaim("llc-rise-fall", llc_rises_then_falls, held=True),
                  StudyClaim("simpler-modes-llc", simpler_modes_lower_llc))
