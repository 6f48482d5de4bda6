"""How a study whose claims read the LLC shows the estimator's bias it weighs (`LLCRules.llc_bias_source`): the
bias in words for its report, the traced models' stability table, and `llc_stability.csv` beside its results."""

from __future__ import annotations

import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from headway.analysis.llc.stability import POINTS, ModelStability, points_text
from headway.report.html import Report
from headway.runs import layout
from headway.studies.llc_rules import LLCRules


def bias_said(bias: float, stability: ModelStability | None, rules: LLCRules, test: str,
              points: tuple[str, str] = POINTS) -> str:
    """The bias `test` (the claim's test, in words) weighs into each λ̂, with its source, in words: the models'
    stability when `stability` is given (NaN: not measured, and the claim is not testable), else the suite's
    (NaN: not measured, taken as 0); `points`, the two checkpoints the stability compares."""
    if stability is not None:
        if math.isnan(bias):
            missing = ", ".join(stability.missing) or "every traced run"
            return (f"the models' own stability was not measured for {missing}, so {test} is not testable "
                    "(nothing is weighed in its place)")
        return (f"{bias:.1%} of each λ̂ ({rules.llc_bias_source_text(points)}; the largest change itself: "
                f"{stability.largest_change:.1%}), added to its standard error in {test}")
    if math.isnan(bias):
        return f"not measured: {test} takes it as 0"
    return (f"{bias:.1%} of each λ̂ (measured on models of known LLC, {rules.llc_bias_target()}), added to its "
            f"standard error in {test}")


def errors_text(bias: float, rules: LLCRules) -> str:
    """What a table's standard errors and p-values weigh besides the chains' noise, for its caption: the bias shown
    above it, or, when none was measured, that they are descriptive (the models' stability: the claim is not
    testable) or take it as 0 (the suite's)."""
    if not math.isnan(bias):
        return "with the estimator's bias above weighed in"
    if rules.llc_bias_source == "suite":
        return "with the estimator's bias taken as 0 (not measured)"
    return ("without the estimator's bias, which was not measured: descriptive only, since the claim is then not "
            "testable")


def weighed_bias_text(biases: Iterable[tuple[str, float]], rules: LLCRules) -> str:
    """The estimator's bias each traced run's test weighed, named by its source (`llc_bias_source`), in words;
    `biases`: each run's name and bias (NaN: not measured). Runs that weighed the same bias are named together, and
    not at all when every run did."""
    source = "the models' own stability" if rules.llc_bias_source == "model" else "the known-answer suite's error"

    def said(bias: float) -> str:
        if math.isnan(bias):
            taken = " (taken as 0)" if rules.llc_bias_source == "suite" else ""  # the model's: not testable instead
            return f"the estimator's bias ({source}) was not measured{taken}"
        return f"the estimator's relative bias ({source}) {bias:.1%} is added to every standard error"

    runs: dict[str, list[str]] = {}
    for name, bias in biases:
        runs.setdefault(said(bias), []).append(name)
    if len(runs) <= 1:
        return next(iter(runs), said(math.nan))
    return "; ".join(f"{text} for {', '.join(names)}" for text, names in runs.items())


def stability_table(section: Report, stability: ModelStability | None, points: tuple[str, str] = POINTS) -> None:
    """The traced models' stability at `points`, run by run and variant by variant, in `section` (nothing when not
    measured)."""
    if stability is not None and len(stability.table):
        weighed = ("twice the upper 95% bound of a variant's mean signed difference over the runs"
                   if stability.statistic == "pooled" else "twice the largest difference")
        section.table(stability.table, "The traced models' own stability: λ̂'s relative change under each variant of "
                      "the SGLD setting (half_step: ε/2 over the same sampling time; double_batch: twice the batch) "
                      f"at each run's {points_text(points)}, and their difference; the bias weighed is {weighed}.",
                      float_format="{:.3g}")


def write_stability(out: Path, tables: dict[str, pd.DataFrame]) -> None:
    """`llc_stability.csv` in `out`: every stability estimate of the analysis `tables` (none written when none)."""
    stability = tables.get("llc_stability", pd.DataFrame())
    if len(stability):
        layout.write_text(out / "llc_stability.csv", stability.to_csv(index=False))
