"""The search's verdicts: per condition, "copy-suppression is one of the main modes here", tested as the rules
fix it (`headway.studies.copy_search.rules`), all conditions judged together."""

from __future__ import annotations

import math

import pandas as pd

from headway.analysis.statistics import binomial_power, binomial_tail, critical_count, detectable_accuracy
from headway.studies.copy_search.rules import SearchRules
from headway.studies.copy_search.study import SUPPRESSOR
from headway.studies.copy_search.tables import SearchTables
from headway.studies.verdict import Finding, Verdict, judge

CLAIM_ID = "copy-suppression-main-mode"  # one claim, judged once per condition


def condition_findings(models: pd.DataFrame, rules: SearchRules) -> list[Finding]:
    """The finding of every condition, in the models' condition order."""
    findings = []
    for name, group in models.groupby("condition", sort=False):
        learned = group[group.val_accuracy >= rules.learned]
        n, k = len(learned), int((learned["mode"] == SUPPRESSOR).sum())
        claim = f"Copy-suppression is one of the main modes under condition {name}"
        test = (f"exact one-sided binomial test of the copy-suppression models among the learned runs against a "
                f"rate ≤ {rules.null_rate:g}; stated effect: a rate of {rules.effect_rate:g}")
        evidence = f"{k} of {n} learned runs ({len(group)} trained)."
        findings.append(Finding(claim, test, evidence, binomial_tail(k, n, rules.null_rate),
                                lambda level, n=n: binomial_power(n, rules.null_rate, rules.effect_rate, level),
                                id=CLAIM_ID)
                        if n else Finding.not_testable(claim, test, "no run of the condition learned", evidence))
    return findings


def verdicts(tables: SearchTables, rules: SearchRules) -> list[Verdict]:
    """The verdict of every condition, Holm-corrected over the tested ones, those with a p-value (`judge`)."""
    return judge(condition_findings(tables.models, rules), rules)


def condition_tests(models: pd.DataFrame, rules: SearchRules) -> pd.DataFrame:
    """One row per condition: its counts, p-value, power and critical count at the strictest Holm level α/m, the
    smallest rate it detects with the power required, and its status."""
    judged = judge(condition_findings(models, rules), rules)
    level = rules.alpha / max(1, sum(v.p_value is not None for v in judged))
    rows = []
    for (name, group), verdict in zip(models.groupby("condition", sort=False), judged, strict=True):
        learned = group[group.val_accuracy >= rules.learned]
        n = len(learned)
        rows.append({"condition": name, "learned": n, "runs": len(group),
                     "copy_suppression": int((learned["mode"] == SUPPRESSOR).sum()),
                     "p_value": verdict.p_value if verdict.p_value is not None else math.nan,
                     "power": verdict.power if verdict.power is not None else 0.0,
                     "critical": critical_count(n, rules.null_rate, level) if n else 1,
                     "detectable_rate": detectable_accuracy(n, rules.null_rate, level, rules.power) if n else math.nan,
                     "status": verdict.status})
    return pd.DataFrame(rows)
