"""Writes the search's outputs: `models.csv` (one row per model: what every other table is made from),
`mode_fractions.csv`, `tests.csv`, `conditions.csv`, `summary.json` and `report.md`."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd

from headway.errors import ConfigError
from headway.runs import layout
from headway.studies.base import StudyData
from headway.studies.copy_search.plan import CONDITIONS
from headway.studies.copy_search.rules import SearchRules
from headway.studies.copy_search.study import SUPPRESSOR
from headway.studies.copy_search.tables import condition_summary, fractions, screen_ranking
from headway.studies.copy_search.verdicts import condition_tests, search_findings
from headway.studies.variants import described
from headway.studies.verdict import Verdict, judge

MODELS = "models.csv"


def write_outputs(data: StudyData, tables, verdicts: list[Verdict], out: Path) -> Path:
    """Every output of the search into `out`; return the report's path."""
    plan = data.plan
    layout.write_json(out / "summary.json", {
        "study": "copy_search", "scale": plan.scale, "conditions": list(plan.conditions), "seeds": list(plan.seeds),
        "classify_step": plan.classify_step, "compare_gaps": plan.compare_gaps, "examples": plan.examples, "rules": data.rules.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts], "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware, "ensembles": data.ensembles}, checked=False)  # an output, never read back
    timing = (f"Training {data.seconds.get('training_s', 0):.0f} s, classification "
              f"{data.seconds.get('analysis_s', 0):.0f} s on {data.hardware.get('device', 'this machine')}")
    return write_tables(out, tables.models, data.rules, timing, plan.compare_gaps)


def write_tables(out: Path, models: pd.DataFrame, rules: SearchRules, timing: str, compare_gaps: bool = False
                 ) -> Path:
    """models.csv, mode_fractions.csv, tests.csv, conditions.csv, ranking.csv and report.md from the models table
    (with `compare_gaps`, the gap claim judged over the conditions too); returns the report's path."""
    layout.write_text(out / MODELS, models.to_csv(index=False))
    shares = fractions(models, rules)
    layout.write_text(out / "mode_fractions.csv", shares.to_csv(index=False))
    tests = condition_tests(models, rules, compare_gaps)
    layout.write_text(out / "tests.csv", tests.to_csv(index=False))
    gap = judge(search_findings(models, rules, compare_gaps), rules)[-1] if compare_gaps else None
    summary = condition_summary(models)
    layout.write_text(out / "conditions.csv", summary.to_csv(index=False))
    ranking = screen_ranking(models, rules)
    layout.write_text(out / "ranking.csv", ranking.to_csv(index=False))
    layout.write_text(out / "report.md", report_text(shares, tests, summary, ranking, rules, timing, gap))
    return out / "report.md"


def rejudge(out: Path, rules: SearchRules | None = None) -> Path:
    """The tables and report of a classified search again from its models.csv alone (no checkpoints needed), under
    `rules` (default: the search's), comparing the conditions' data where its summary.json says the search did:
    what a committed search folder is re-judged with when the test changes."""
    path = out / MODELS
    if not path.is_file():
        raise ConfigError(f"{path} does not exist: run `headway study copy_search --out {out}` first")
    summary = out / "summary.json"
    compare = bool(json.loads(summary.read_text()).get("compare_gaps")) if summary.is_file() else False
    return write_tables(out, pd.read_csv(path), rules or SearchRules(), "re-judged from models.csv", compare)


def report_text(shares: pd.DataFrame, tests: pd.DataFrame, summary: pd.DataFrame, ranking: pd.DataFrame,
                rules: SearchRules, timing: str, gap: Verdict | None = None) -> str:
    """The markdown report: settings, mode fractions with Wilson intervals, the screen's ranking, the test, the
    verdict, and the gap claim's verdict where the conditions' data were compared."""
    steps = ", ".join(f"{r.condition} {int(r.step)}" for r in summary.itertuples())
    lines = ["# Copy-suppression search", "", f"{timing}  ", f"Models classified at step: {steps}", "",
             "## Conditions", "", "| condition | settings over the recipe | realised δ̄ | share of 0 gaps | "
             "lowest val acc | median whole-list acc | median acc on repeats (gap 0) / other targets | "
             "largest suppressed fraction | lowest diagonal score | models with a suppressor | largest suppression | "
             "median removed at gaps ≤ 2 / ≥ 3 | CS at some copy threshold 2–4.5 |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for row in summary.itertuples():
        lines.append(f"| {row.condition} | {described(row.condition, CONDITIONS)} | {row.mean_gap:.2f} | "
                     f"{row.repeat_share:.2f} | {row.min_val_accuracy:.3f} | {row.median_list_accuracy:.3f} | "
                     f"{row.accuracy_gap0:.3f} / {row.accuracy_gap_other:.3f} | {row.max_suppress_fraction:.2f} | "
                     f"{row.min_diagonal_score:.2f} | {row.n_suppressor_models} | {row.max_suppression:.2f} | "
                     f"{row.removed_near:.2f} / {row.removed_far:.2f} | {row.cs_at_some_copy_threshold} |")
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
    lines += ["", "## Screen ranking (the selection rule, docs/study-sorting.md)", "",
              "| rank | condition | learned / runs | CS models | models with a suppressing pair | largest suppression |",
              "|---|---|---|---|---|---|"]
    for r in ranking.itertuples():
        rank = "not eligible" if pd.isna(r.rank) else str(r.rank)
        lines.append(f"| {rank} | {r.condition} | {r.learned}/{r.runs} | {r.copy_suppression} | {r.suppressing_pair} "
                     f"| {r.max_suppression:.2f} |")
    lines += ["", "## Test", "",
              "Written with the search, before its models trained; the correction across conditions was Šidák's "
              "then, and became Holm's after the committed search had run. "
              f"Per condition: exact one-sided binomial test of the copy-suppression count among learned runs "
              f"(val accuracy ≥ {rules.learned:.0%}) against a rate of {rules.null_rate:g}; the conditions judged "
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
    if gap is not None:
        lines += ["", "## The gap claim over these conditions", "", f"{gap.claim}: **{gap.status}**. {gap.evidence}"]
    return "\n".join(lines) + "\n"
