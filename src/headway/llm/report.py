"""Writes the prompted-LLM evaluation report: settings, a verdict per formulation, accuracy over hops, the
results table, unparseable replies and one example prompt per formulation, in one offline HTML file."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import takewhile
from pathlib import Path
from typing import Any

import pandas as pd

from headway.analysis.statistics import binomial_power, binomial_tail, detectable_accuracy
from headway.errors import ConfigError
from headway.llm.evaluate import METRICS
from headway.llm.rules import RULES
from headway.plots.llm import accuracy_vs_hops, formulation_order, metric_order
from headway.report.html import Report, code_span
from headway.studies.verdict import Finding, judge
from headway.tasks.retrieval.prompts.formulations import FORMULATIONS
from headway.tasks.retrieval.prompts.questions import ANSWER_CUE, REPLY_RULE, Question

FIGURE = Path("figures") / "accuracy_vs_hops.png"
# Readable names of the known `meta` keys, in the order the summary lists them; other keys follow as given.
META_NAMES = {
    "model": "model", "backend": "backend", "scoring": "scoring modes", "seed": "seed",
    "questions_per_cell": "questions per cell", "max_hops": "max hops", "seconds": "time taken",
    "cache_hits": "cache hits", "cache_misses": "cache misses",
}
ALL_METRICS = tuple(metric for metrics in METRICS.values() for metric in metrics)


def write_report(out: Path, results: pd.DataFrame, groups: pd.DataFrame, per_question: pd.DataFrame,
                 questions: Sequence[Question], meta: dict) -> Path:
    """Write `out/report.html` (its figure under `out/figures`) from the evaluation's tables (`groups`: the
    per-formulation and overall scores of `group_scores`); return its path."""
    out = Path(out)
    shown = {**meta, "model": model_label(str(meta["model"]))} if "model" in meta else meta
    subtitle = " · ".join(f"{name} {code_span(str(shown[key]))}" for key, name in (("model", "model"),
                                                                                    ("backend", "backend")) if key in meta)
    report = Report("Prompted language models on the retrieval formulations", subtitle)
    _summary(report, results, questions, shown)
    _verdicts(report, results)
    _groups(report, groups)
    _figure(report, results, out / FIGURE, shown)
    _results(report, results)
    _examples(report, questions, per_question)
    return report.write(out / "report.html")


def model_label(model_id: str) -> str:
    """A model's name for the report: the file or folder name of a local path (no absolute path is shown; the
    full id stays in summary.json), else the id as given."""
    path = Path(model_id)
    return path.name if path.is_absolute() or model_id.startswith("~") else model_id


def verdict(results: pd.DataFrame, formulation: str, metric: str) -> str:
    """One plain sentence on a formulation under `metric`: accuracy at the fewest and most hops, chance,
    the hop counts a one-sided exact binomial test calls above chance, and for the others the smallest
    true accuracy the design would have detected, so the report's claims follow the numbers."""
    tested = chance_tests(results)
    cell = tested[(tested.formulation == formulation) & (tested.metric == metric)].sort_values("hops")
    if cell.empty:
        raise ConfigError(f"no results for formulation {formulation!r} with metric {metric!r}")
    first, last = cell.iloc[0], cell.iloc[-1]
    trend = f"{metric} {first.accuracy:.2f} at {_hops(first.hops)}"
    chance = f"chance {first.chance:.2f}"
    if len(cell) > 1:
        trend += f" → {last.accuracy:.2f} at {_hops(last.hops)}"
        if f"{last.chance:.2f}" != f"{first.chance:.2f}":
            chance += f" → {last.chance:.2f}"
    return f"{FORMULATIONS[formulation].label}: {trend} ({chance}); {_above_chance(cell, len(results))}"


def chance_tests(results: pd.DataFrame) -> pd.DataFrame:
    """Per row of `results` (the family: every cell and metric of one run): the one-sided exact binomial
    p-value of its count against chance (`p_chance`), the verdict of `judge` on the claim that the cell is
    above chance (`status`, by the run's `RULES`: Holm's correction over the family at alpha; a null result
    refutes it only with `power` to detect chance + `effect`), whether it is (`above`: reproduced), and the
    smallest true accuracy the test detects with that power at its n at the strictest Holm level, alpha / cells
    (`detectable`): with many cells, one passing at p < alpha is expected by luck."""
    rows = list(zip(results.correct.astype(int), results.n.astype(int), results.chance.astype(float)))
    p_values = [binomial_tail(k, n, c) for k, n, c in rows]
    found = judge([_finding(cell, p, n, c) for cell, p, (_, n, c) in zip(results.itertuples(), p_values, rows)],
                  RULES)
    strictest = RULES.alpha / max(len(rows), 1)
    return results.assign(p_chance=p_values, status=[v.status for v in found],
                          above=[v.status == "reproduced" for v in found],
                          detectable=[detectable_accuracy(n, c, strictest, RULES.power) for _, n, c in rows])


def _finding(cell: Any, p_value: float, n: int, chance: float) -> Finding:
    """The claim that one cell (a row of the results) is above chance, as `judge` takes it: its exact binomial
    p-value, and its power at a level to detect a true accuracy of chance + `RULES.effect`."""
    effect = min(1.0, chance + RULES.effect)
    return Finding(f"{cell.formulation} {cell.metric} at {_hops(cell.hops)} is above chance",
                   f"one-sided exact binomial test of {cell.correct} of {n} against chance {chance:.2f}",
                   f"{cell.correct} of {n} correct", p_value,
                   lambda level: binomial_power(n, chance, effect, level))


def above_rule(cells: int) -> str:
    """How a cell is called above chance, for a run of `cells` cells."""
    return (f"(one-sided exact binomial test against chance, Holm-corrected over the run's {cells} cell{'' if cells == 1 else 's'} at "
            f"family-wise α = {RULES.alpha:g})")


def _above_chance(cell: pd.DataFrame, cells: int) -> str:
    """Where one formulation × metric is above chance: up to which hop count, then any later hop counts;
    for the hop counts that are not, the smallest p-value and what the design could have detected."""
    hops = [int(h) for h in cell.hops]
    above = [int(h) for h in cell.hops[cell.above]]
    null = cell[~cell.above]
    if not above:
        return (f"not above chance at any hop count {above_rule(cells)}: smallest uncorrected "
                f"p = {null.p_chance.min():.2g}; {_power(null)}")
    leading = list(takewhile(lambda h: h in above, hops))
    caveat = f"; elsewhere, {_power(null)}" if len(null) else ""
    if not leading:
        return f"above chance {above_rule(cells)} only at {_hops(*above)}{caveat}"
    if leading == hops:
        return f"above chance {above_rule(cells)} up to {_hops(hops[-1])}, the most tested"
    later = above[len(leading):]
    again = f", and again at {_hops(*later)}" if later else ""
    return f"above chance {above_rule(cells)} up to {_hops(leading[-1])}{again}{caveat}"


def _power(null: pd.DataFrame) -> str:
    """What a null result at these cells cannot rule out: the true accuracy detected with `RULES.power` at their n."""
    levels = sorted({f"{d:.2f}" for d in null.detectable})
    questions = sorted({int(n) for n in null.n})
    where = levels[0] if len(levels) == 1 else ", ".join(
        f"{d:.2f} at {_hops(h)}" for h, d in zip(null.hops, null.detectable))
    return (f"with {'/'.join(map(str, questions))} questions per cell the test detects a true accuracy of {where} "
            f"or more with {RULES.power:.0%} power, so these null results do not rule out a lower one")


def _hops(*counts: int) -> str:
    """'1 hop', '3 hops' or '5, 7 hops'."""
    return f"{', '.join(str(int(c)) for c in counts)} hop{'' if counts == (1,) else 's'}"


def results_table(results: pd.DataFrame) -> pd.DataFrame:
    """The results for reading: one row per formulation × metric × hops, accuracy, Wilson interval, chance,
    the one-sided p-value against chance and the accuracy detected with `RULES.power`, and unparseable replies
    where generate mode ran."""
    keys, metrics = formulation_order(results.formulation), metric_order(results.metric)
    rows = chance_tests(results.assign(_f=results.formulation.map(keys.index), _m=results.metric.map(metrics.index))
                        .sort_values(["_f", "_m", "hops"]).reset_index(drop=True))
    table = pd.DataFrame({
        "formulation": rows.formulation.map(lambda key: FORMULATIONS[key].label),
        "metric": rows.metric,
        "hops": rows.hops,
        "n": rows.n,
        "correct": rows.correct,
        "accuracy": rows.accuracy.map(_percent),
        "95% interval": [f"{_percent(low)} – {_percent(high)}" for low, high in zip(rows.ci_low, rows.ci_high)],
        "chance": rows.chance.map(_percent),
        "p vs chance": rows.p_chance.map(lambda p: f"{p:.3f}"),
        "above chance (Holm)": rows.above.map({True: "yes", False: "no"}),
        f"detectable ({RULES.power:.0%} power)": rows.detectable.map(_percent),
    })
    if "exact_match" in metrics:
        table["unparseable"] = pd.array(rows.unparseable.where(rows.metric == "exact_match"), dtype="Int64")
    return table


def _percent(share: float) -> str:
    """A share in 0..1 as a percentage with one decimal."""
    return f"{100 * share:.1f}%"


def _summary(report: Report, results: pd.DataFrame, questions: Sequence[Question], meta: dict) -> None:
    """Open with what was asked and how it was scored, then the settings and timings from `meta`."""
    report.section("Summary")
    report.paragraph(
        "A language model answers prompted retrieval questions: chains of links written in words (variable "
        "assignments, code, boxes, conditional rules, family trees), where the answer is found by following "
        "the queried chain for a given number of hops. Log-likelihood mode scores every option as a "
        "continuation of the prompt (`acc`: highest total log-probability, `acc_norm`: highest per character); "
        "generate mode asks for a reply and parses it against the options (`exact_match`; unparseable replies "
        "count as wrong). Every accuracy comes with its Wilson 95% interval.")
    report.key_values(_settings(results, questions, meta), "Evaluation settings")


def _settings(results: pd.DataFrame, questions: Sequence[Question], meta: dict) -> dict[str, Any]:
    """The summary's name → value pairs: the known `meta` keys first, then the others, then counts."""
    pairs = {META_NAMES.get(key, key.replace("_", " ")): _setting(key, meta[key])
             for key in [*(k for k in META_NAMES if k in meta), *(k for k in meta if k not in META_NAMES)]}
    return {**pairs, "questions": len(questions),
            "formulations": ", ".join(FORMULATIONS[key].label for key in formulation_order(results.formulation)),
            "metrics": ", ".join(metric_order(results.metric))}


def _setting(key: str, value: Any) -> Any:
    """One `meta` value for display: lists joined, seconds as a duration."""
    if key == "seconds":
        minutes, seconds = divmod(round(float(value)), 60)
        return f"{minutes} min {seconds} s" if minutes else f"{float(value):.1f} s"
    return ", ".join(map(str, value)) if isinstance(value, (list, tuple)) else value


def _verdicts(report: Report, results: pd.DataFrame) -> None:
    """One verdict per formulation × metric, so the headline reads without the table."""
    report.section("Verdicts")
    report.paragraph(
        "Per formulation and metric: accuracy at the fewest and the most hops asked about, the chance level "
        "(1 / number of options), and the hop counts at which the model is above chance, meaning a one-sided "
        "exact binomial test of the count against chance rejects it under Holm's correction over every cell of "
        f"the run at family-wise α = {RULES.alpha:g} (with many cells, one at p < {RULES.alpha:g} is expected by luck alone). "
        f"Where a cell is not above chance, the verdict says which true accuracy the test would have detected "
        f"with {RULES.power:.0%} power at that number of questions at the strictest Holm level: a null result rules "
        "out only accuracies above it.")
    report.bullets([verdict(results, key, metric) for key in formulation_order(results.formulation)
                    for metric in metric_order(results[results.formulation == key].metric)])


def groups_table(groups: pd.DataFrame) -> pd.DataFrame:
    """The group scores for reading: per formulation, then over every question, per metric."""
    metrics = metric_order(groups.metric)
    order = [*formulation_order(groups.formulation[groups.formulation != "all"]), "all"]
    rows = groups.assign(_f=groups.formulation.map(order.index), _m=groups.metric.map(metrics.index)) \
        .sort_values(["_f", "_m"]).reset_index(drop=True)
    return pd.DataFrame({
        "formulation": rows.formulation.map(lambda key: "all" if key == "all" else FORMULATIONS[key].label),
        "lm-eval group": rows.group,
        "metric": rows.metric,
        "n": rows.n,
        "correct": rows.correct,
        "accuracy": rows.accuracy.map(_percent),
        "95% interval": [f"{_percent(low)} – {_percent(high)}" for low, high in zip(rows.ci_low, rows.ci_high)],
        "mean chance": rows.chance.map(_percent),
    })


def _groups(report: Report, groups: pd.DataFrame) -> None:
    """Per formulation and overall, as lm-evaluation-harness reports its groups."""
    report.section("Per formulation and overall")
    report.table(groups_table(groups),
                 "Accuracy over all hop counts of each formulation and over every question, each question counted "
                 "once: the group scores lm-evaluation-harness reports for the exported tasks (`headway data "
                 "prompts`), with the Wilson 95% interval and the mean chance level of the questions.",
                 max_rows=max(len(groups), 1))


def _figure(report: Report, results: pd.DataFrame, path: Path, meta: dict) -> None:
    """Draw accuracy over hops to `path` and embed it."""
    title = f"{model_label(meta['model'])}: accuracy over hops (error bars: Wilson 95% interval)" if "model" in meta else None
    report.section("Accuracy over hops")
    report.figure(accuracy_vs_hops(results, path, title=title),
                  "Accuracy over hops per formulation and metric, with Wilson 95% intervals. Dashed grey: chance "
                  "(1 / number of options), which falls with hops for F5, whose options are every other person.")


def _results(report: Report, results: pd.DataFrame) -> None:
    """The full results table, then (generate mode) how many replies could not be parsed per formulation."""
    table = results_table(results)
    report.section("Results")
    report.table(table, "Accuracy per formulation × metric × hops, with the Wilson 95% interval, chance, the one-sided "
                 f"exact binomial p-value against chance and the true accuracy that test detects with {RULES.power:.0%} "
                 "power at the cell's n.",
                 max_rows=max(len(table), 1))
    generated = results[results.metric == "exact_match"]
    if generated.empty:
        return
    totals = generated.groupby("formulation")[["unparseable", "n"]].sum()
    parts = [f"{FORMULATIONS[key].label}: {totals.unparseable[key]} of {totals.n[key]} "
             f"({_percent(totals.unparseable[key] / totals.n[key])})" for key in formulation_order(totals.index)]
    report.callout("**Unparseable replies** in generate mode (counted as wrong): " + "; ".join(parts) + ".",
                   "warning" if totals.unparseable.sum() else "ok")


def _examples(report: Report, questions: Sequence[Question], per_question: pd.DataFrame) -> None:
    """One prompt per formulation verbatim, with its options, the correct answer and what the model chose."""
    report.section("Example prompts")
    report.paragraph(
        "The first question of each formulation at its fewest hops, as read in log-likelihood mode, where each "
        f"option is scored as a continuation after `{ANSWER_CUE}`; in generate mode the last line is "
        f"`{REPLY_RULE}` instead.")
    answers = per_question.set_index("id")
    for key in formulation_order(q.formulation for q in questions):
        question = min((q for q in questions if q.formulation == key), key=lambda q: q.hops)
        form = FORMULATIONS[key]
        report.paragraph(f"**{form.label}** ({form.title}), {_hops(question.hops)}, question {code_span(question.id)}:")
        report.code_block(question.prompt)
        report.paragraph(f"Options: {', '.join(code_span(c) for c in question.choices)}. "
                         f"Correct answer: **{question.answer}**.")
        if question.id in answers.index:
            _model_answer(report, answers.loc[question.id], question)


def _model_answer(report: Report, row: pd.Series, question: Question) -> None:
    """What the model chose for the example under each metric, and its generated reply if there is one."""
    parts = []
    for metric in ALL_METRICS:
        pred = row.get(f"pred_{metric}")
        if pred is None or pd.isna(pred):
            continue
        chosen = "nothing parseable" if pred < 0 else code_span(question.choices[int(pred)])
        parts.append(f"{metric} chose {chosen} ({'right' if row[metric] else 'wrong'})")
    if parts:
        report.paragraph("The model's answer: " + "; ".join(parts) + ".")
    if isinstance(row.get("reply"), str):
        report.paragraph("Its reply in generate mode:").code_block(row["reply"])
