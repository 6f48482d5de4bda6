"""Search the sorting task's data features and recipes for copy-suppression pairs
(`scripts/search_copy_suppression.py`; docs/study-sorting.md, "Searching for copy-suppression").

A *condition* is a named set of flat run settings over the sorting study's `cpu` recipe (task:
length, values, repeats, gaps, mean_gap; recipe: weight_decay, heads, steps, …). Every condition is
trained with the same seeds through the shared run store (`train_runs`: finished runs are reused, an
interrupted ensemble resumes), and each final model is classified by the study's own rule
(`headway.analysis.sorting.modes.classify_modes` on the folded circuits, the study's thresholds), on the
lists the study analyses (`ANALYSIS_SEED`). No LLC, ablation or DLA: only the mode is searched for.

The test, fixed before any search model was trained (`SearchRules`): per condition, the claim "copy-suppression
is a main mode here" is an exact one-sided binomial test of k copy-suppression models among the n learned runs
(per-token validation accuracy ≥ the study's `SortingRules.learned`) against a copy-suppression rate of
`null_rate` (at most rare), with the power to detect a rate of `effect_rate` (half the models: "one of the two main
modes"). The conditions are judged together like every study's claims (`headway.studies.verdict.judge`: Holm over
the testable conditions at family-wise α; a condition without copy-suppression is "not reproduced" only with the
power required, else "not testable").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.statistics import binomial_power, binomial_tail, critical_count, detectable_accuracy
from headway.errors import ConfigError
from headway.runs import layout
from headway.runs.config import RunConfig
from headway.studies.rules import Rules, rule
from headway.studies.sorting.plan import study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.tables import mode_fractions
from headway.studies.verdict import Finding, judge

RULES = SortingRules()  # the study's rules: what counts as learned
SUPPRESSOR = "copy_suppression"


@dataclass(frozen=True)
class SearchRules(Rules):
    """The search's test, fixed before any search model was trained (module docstring)."""

    null_rate: float = rule(0.05, "copy-suppression rate under the null: at most rare in a condition", low=0.0, high=1.0)
    effect_rate: float = rule(0.5, "rate the power is computed at: copy-suppression in half the models, one of the "
                                   "two main modes", low=0.0, high=1.0)

# The conditions searched, fixed before training (docs/study-sorting.md gives the reasons). Each is a set
# of flat run settings over the cpu recipe; the recipe's weight decay is 0.005 and its model has 2 heads.
CONDITIONS: dict[str, dict[str, Any]] = {
    "distinct": {},  # the default lists (distinct, uniform; δ̄ ≈ 4.7): the reference
    "repeats": {"repeats": True},  # uniform draws that may repeat (about 1 list in 2 has a repeat)
    "repeats-dense": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0},  # half of all gaps are 0
    "repeats-dense-nowd": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "weight_decay": 0.0},
    "repeats-dense-4h": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "heads": 4},
    "distinct-4h": {"heads": 4},
    "repeats-long": {"repeats": True, "length": 20},  # 20 draws from 51 numbers: many repeats and near neighbours
    "repeats-dense-3x": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "steps": 3600},
}
# What results/sorting-copy-search-cpu ran on a shared 2-core CPU; the others (heads, list length, training
# length) are defined to be run with more compute (`--conditions`).
DEFAULT_CONDITIONS = ("distinct", "repeats", "repeats-dense", "repeats-dense-nowd")


def base_settings() -> dict[str, Any]:
    """The flat run settings every condition starts from: the sorting study's `cpu` recipe."""
    return dict(study_plan("cpu").settings)


def search_runs(conditions: dict[str, dict[str, Any]], seeds: tuple[int, ...],
                base: dict[str, Any] | None = None) -> list[tuple[str, RunConfig]]:
    """(condition name, run) for every condition × seed, in that order; every setting checked up front."""
    if not conditions or not seeds:
        raise ConfigError("the search needs at least one condition and one seed")
    base = base_settings() if base is None else base
    runs = [(name, RunConfig.from_flat({**base, **settings, "seed": seed}))
            for name, settings in conditions.items() for seed in seeds]
    ids = [run.run_id for _, run in runs]
    if len(set(ids)) != len(ids):
        raise ConfigError("two conditions give the same runs; give each condition different settings")
    return runs


def model_modes(model, task, examples: int) -> pd.DataFrame:
    """Mode table (`classify_modes`, one row per instance) of an ensemble whose instances all do `task`,
    its readout scale measured on `examples` lists of the study's analysis seed, with `cs_at_copy`, and
    the realised δ̄ (`mean_gap`) and share of zero gaps (`repeat_share`) of those lists."""
    import torch

    from headway.studies.sorting.analyse import ANALYSIS_SEED, circuit_state
    from headway.analysis.sorting.modes import threshold_sweep
    from headway.tasks.sorting.task import generate

    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    device = next(model.parameters()).device
    tokens = torch.from_numpy(batch.tokens).to(device).expand(model.n_instances, *batch.tokens.shape)
    thresholds = RULES.mode_thresholds()
    ov, qk, scores, modes = circuit_state(model, task, tokens, thresholds)
    modes["min_diagonal_score"] = scores.flatten(1).min(dim=1).values.cpu().numpy()  # most suppressed number, any head
    sweep = threshold_sweep(ov, qk, {"copy": RULES.sweeps()["copy"]}, thresholds)
    # the smallest swept copy threshold at which the rule calls the model copy-suppression (NaN: at none);
    # descriptive only: the test reads the mode at the default thresholds
    modes["cs_at_copy"] = modes.instance.map(sweep[sweep["mode"] == SUPPRESSOR].groupby("instance").value.min())
    # teacher-forced accuracy on targets equal to the number before them (gap 0: a repeat to write again)
    # and on the others: whether the model handles repeats at all
    from headway.analysis.sorting.effects import ablate_heads

    bins = ablate_heads(model, batch, task, kinds=(), all_heads=False)
    for column, chosen in (("accuracy_gap0", bins.gap_bin == "0"),
                           ("accuracy_gap_other", ~bins.gap_bin.isin(["0", "all"]))):
        part = bins[chosen].assign(hits=lambda f: f.accuracy * f["count"])
        sums = part.groupby("instance")[["hits", "count"]].sum()
        modes[column] = modes.instance.map(sums.hits / sums["count"])
    modes["mean_gap"] = float(batch.gaps.mean())
    modes["repeat_share"] = float((batch.gaps == 0).mean())
    return modes


def classify_runs(out: Path, named: list[tuple[str, RunConfig]], examples: int, device: str = "cpu",
                  step: int | None = None) -> pd.DataFrame:
    """One row per run of `named` trained under `out`: condition, settings, seed, accuracies and the mode
    with every quantity the rule read, at the last checkpoint or at `step` (each ensemble's checkpoint
    at that step, with the accuracies logged there: a search stopped before its last step)."""
    from headway.runs.store import final_metrics, load_metrics, load_model, load_runs
    from headway.studies.base import by_task

    condition = {run.run_id: name for name, run in named}
    frames = []
    for run_dir in layout.ensemble_dirs(out):
        runs = load_runs(run_dir)
        for members in by_task(runs).values():
            members = [i for i in members if runs[i].run_id in condition]
            if not members:
                continue
            model = load_model(run_dir, members, step=step, device=device)
            modes = model_modes(model, runs[members[0]].task, examples)
            modes["run_id"] = [runs[members[i]].run_id for i in modes.instance]
            frames.append(modes.drop(columns="instance"))
    if not frames:
        raise ConfigError(f"no trained run of the search under {out}")
    found = pd.concat(frames, ignore_index=True)
    metrics = load_metrics(out)
    metrics = final_metrics(metrics if step is None else metrics[metrics.step <= step])
    metrics = metrics[["run_id", "step", "val_accuracy", "val_list_accuracy"]]
    rows = []
    for name, run in named:
        flat = run.flat()
        rows.append({"condition": name, "run_id": run.run_id, "seed": run.seed, "length": flat["length"],
                     "values": flat["values"], "repeats": flat["repeats"], "gaps": flat["gaps"],
                     "weight_decay": flat["weight_decay"], "heads": flat["heads"], "steps": flat["steps"]})
    table = pd.DataFrame(rows).merge(metrics, on="run_id", how="left").merge(found, on="run_id", how="left")
    missing = table[table["mode"].isna()].run_id.tolist()
    if missing:
        raise ConfigError(f"runs {missing} of the search have no checkpoint under {out}")
    table["learned"] = table.val_accuracy >= RULES.learned
    return table


def fractions(table: pd.DataFrame) -> pd.DataFrame:
    """Learned runs per condition in each mode with Wilson 95% intervals (the study's `mode_fractions`,
    the condition in place of the data value)."""
    frame = table.rename(columns={"condition": "data"})
    out = mode_fractions(frame, RULES.learned).rename(columns={"data": "condition"})
    order = {name: i for i, name in enumerate(dict.fromkeys(table.condition))}
    return out.sort_values("condition", key=lambda c: c.map(order), kind="stable", ignore_index=True)


def condition_tests(table: pd.DataFrame, rules: SearchRules = SearchRules()) -> pd.DataFrame:
    """The pre-specified test of every condition, judged together (module docstring): one row per condition
    with its counts, p-value, power and critical count at the strictest Holm level α/m, the smallest rate it
    detects with the power required, and its status."""
    names = list(dict.fromkeys(table.condition))
    counts, findings = [], []
    for name in names:
        group = table[table.condition == name]
        learned = group[group.val_accuracy >= RULES.learned]
        n, k = len(learned), int((learned["mode"] == SUPPRESSOR).sum())
        claim = f"Copy-suppression is one of the main modes under condition {name}"
        test = (f"exact one-sided binomial test of the copy-suppression models among the learned runs against a "
                f"rate ≤ {rules.null_rate:g}; stated effect: a rate of {rules.effect_rate:g}")
        evidence = f"{k} of {n} learned runs ({len(group)} trained)."
        findings.append(Finding(claim, test, evidence, binomial_tail(k, n, rules.null_rate),
                                lambda level, n=n: binomial_power(n, rules.null_rate, rules.effect_rate, level))
                        if n else Finding.not_testable(claim, test, "no run of the condition learned", evidence))
        counts.append((name, n, len(group), k))
    verdicts = judge(findings, rules)
    level = rules.alpha / max(1, sum(v.p_value is not None for v in verdicts))
    return pd.DataFrame([{"condition": name, "learned": n, "runs": runs, "copy_suppression": k,
                          "p_value": verdict.p_value if verdict.p_value is not None else math.nan,
                          "power": verdict.power if verdict.power is not None else 0.0,
                          "critical": critical_count(n, rules.null_rate, level) if n else 1,
                          "detectable_rate": detectable_accuracy(n, rules.null_rate, level, rules.power) if n else math.nan,
                          "status": verdict.status}
                         for (name, n, runs, k), verdict in zip(counts, verdicts)])


def condition_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per condition: realised δ̄ and share of zero gaps of the analysed lists, accuracies, the largest
    suppressed fraction of any head, and how many models turn copy-suppression at some swept copy threshold."""
    suppress = table.filter(like="suppress_fraction_h")
    frame = table.assign(max_suppress=suppress.max(axis=1), cs_any=table.cs_at_copy.notna())
    grouped = frame.groupby("condition", sort=False)
    return pd.DataFrame({
        "step": grouped.step.max(), "mean_gap": grouped.mean_gap.first(), "repeat_share": grouped.repeat_share.first(),
        "min_val_accuracy": grouped.val_accuracy.min(), "median_list_accuracy": grouped.val_list_accuracy.median(),
        "accuracy_gap0": grouped.accuracy_gap0.median(), "accuracy_gap_other": grouped.accuracy_gap_other.median(),
        "max_suppress_fraction": grouped.max_suppress.max(), "min_diagonal_score": grouped.min_diagonal_score.min(),
        "n_suppressor_models": grouped.n_suppressors.apply(
            lambda s: int((s > 0).sum())), "cs_at_some_copy_threshold": grouped.cs_any.sum().astype(int),
    }).reset_index()


def write_report(out: Path, table: pd.DataFrame, command: str, seconds: float | None) -> Path:
    """models.csv, mode_fractions.csv, tests.csv and report.md under `out`; returns the report's path. `seconds`:
    the wall time of the call that trained or classified (None when re-judged from models.csv)."""
    out.mkdir(parents=True, exist_ok=True)
    layout.write_text(out / "models.csv", table.to_csv(index=False))
    shares = fractions(table)
    layout.write_text(out / "mode_fractions.csv", shares.to_csv(index=False))
    tests = condition_tests(table)
    layout.write_text(out / "tests.csv", tests.to_csv(index=False))
    summary = condition_summary(table)
    layout.write_text(out / "conditions.csv", summary.to_csv(index=False))
    layout.write_text(out / "report.md", report_text(table, shares, tests, summary, command, seconds))
    return out / "report.md"


def rejudge(out: Path, command: str) -> Path:
    """The tables and report of a classified search again from its models.csv alone (no checkpoints needed): what
    a committed search folder is re-judged with when the test's rules change."""
    path = out / "models.csv"
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: classify the search first (scripts/search_copy_suppression.py)")
    return write_report(out, pd.read_csv(path), command, None)


def report_text(table: pd.DataFrame, shares: pd.DataFrame, tests: pd.DataFrame, summary: pd.DataFrame, command: str,
                seconds: float | None, rules: SearchRules = SearchRules()) -> str:
    """The markdown report: settings, mode fractions with Wilson intervals, the test and the verdict."""
    steps = ", ".join(f"{r.condition} {int(r.step)}" for r in summary.itertuples())
    lines = ["# Copy-suppression search", "", f"Command: `{command}`  ", ("re-judged from models.csv  " if seconds is None else f"Wall time of this call: {seconds:.0f} s  "),
             f"Models classified at step: {steps}", "",
             "## Conditions", "", "| condition | settings over the cpu recipe | realised δ̄ | share of 0 gaps | "
             "lowest val acc | median whole-list acc | median acc on repeats (gap 0) / other targets | "
             "largest suppressed fraction | lowest diagonal score | models with a suppressor | "
             "CS at some copy threshold 2–4.5 |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary.itertuples():
        settings = CONDITIONS.get(row.condition, {})
        text = ", ".join(f"{k} {v}" for k, v in settings.items()) or "(the recipe)"
        lines.append(f"| {row.condition} | {text} | {row.mean_gap:.2f} | {row.repeat_share:.2f} | "
                     f"{row.min_val_accuracy:.3f} | {row.median_list_accuracy:.3f} | {row.accuracy_gap0:.3f} / "
                     f"{row.accuracy_gap_other:.3f} | {row.max_suppress_fraction:.2f} | "
                     f"{row.min_diagonal_score:.2f} | {row.n_suppressor_models} | {row.cs_at_some_copy_threshold} |")
    lines += ["", "## Mode fractions (learned runs, Wilson 95% intervals)", "",
              "| condition | n | splitting | copy_suppression | overlapping | other |", "|---|---|---|---|---|---|"]
    for name in tests.condition:
        group = shares[shares.condition == name]
        if not len(group):
            lines.append(f"| {name} | 0 | no learned run | | | |")
            continue
        cells = {r.mode: f"{r.count}/{r.n} ({r.ci_low:.2f}–{r.ci_high:.2f})" for r in group.itertuples()}
        lines.append(f"| {name} | {int(group.n.iloc[0])} | " + " | ".join(
            cells[m] for m in ("splitting", SUPPRESSOR, "overlapping", "other")) + " |")
    lines += ["", "## Test (fixed before training)", "",
              f"Per condition: exact one-sided binomial test of the copy-suppression count among learned runs "
              f"(val accuracy ≥ {RULES.learned:.0%}) against a rate of {rules.null_rate:g}; the conditions judged "
              f"together with Holm's correction at family-wise α = {rules.alpha:g}. Power: probability of a "
              f"significant result at the strictest Holm level if the true copy-suppression rate were "
              f"{rules.effect_rate:g}; a null result with power < {rules.power:.0%} is *not testable*. Critical count "
              "and detectable rate (the smallest rate found with that power) are at the same level.", "",
              f"| condition | learned / runs | CS models | p | critical count | power at rate {rules.effect_rate:g} | "
              "detectable rate | verdict |", "|---|---|---|---|---|---|---|---|"]
    for r in tests.itertuples():
        lines.append(f"| {r.condition} | {r.learned}/{r.runs} | {r.copy_suppression} | {r.p_value:.3g} | {r.critical} | "
                     f"{r.power:.2f} | {r.detectable_rate:.2f} | {r.status} |")
    lines += ["", "## Verdict", ""]
    by_status = {status: ", ".join(tests[tests.status == status].condition) or "none"
                 for status in ("reproduced", "not reproduced", "not testable")}
    lines.append(f"Copy-suppression a main mode — reproduced in: {by_status['reproduced']}; not reproduced (a rate of "
                 f"{rules.effect_rate:g} would have been found with power ≥ {rules.power:.0%}) in: "
                 f"{by_status['not reproduced']}; not testable in: {by_status['not testable']} "
                 f"({int(tests.copy_suppression.sum())} copy-suppression models among {int(tests.learned.sum())} "
                 "learned runs in all).")
    return "\n".join(lines) + "\n"
