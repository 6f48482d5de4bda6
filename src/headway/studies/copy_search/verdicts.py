"""The search's verdicts: per condition, "copy-suppression is one of the main modes here", tested as the rules
fix it (`headway.studies.copy_search.rules`), all conditions judged together."""

from __future__ import annotations

import math

import pandas as pd

from headway.analysis.statistics import binomial_power, binomial_tail, critical_count, detectable_accuracy
from headway.studies.copy_search.rules import SearchRules
from headway.studies.copy_search.study import SUPPRESSOR
from headway.studies.copy_search.tables import SearchTables
from headway.studies.sorting.tables import gap_test_with_power, mode_fractions
from headway.studies.sorting.verdicts import gap_decides_mode
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


def gap_finding(models: pd.DataFrame, rules: SearchRules) -> Finding:
    """The sorting study's gap claim (the data decide the mode) judged over the search's conditions as its data
    values: the same test, power and evidence (`gap_decides_mode`), each condition's realised δ̄ its mean gap."""
    final = models.rename(columns={"condition": "data"})
    return gap_decides_mode(gap_test_with_power(final, rules), final, mode_fractions(final, rules.learned), rules)


def search_findings(models: pd.DataFrame, rules: SearchRules, compare_gaps: bool = False) -> list[Finding]:
    """Every condition's finding, then (with `compare_gaps`: conditions that differ in their data only) the gap
    claim's: the family the search judges together."""
    return condition_findings(models, rules) + ([gap_finding(models, rules)] if compare_gaps else [])


def verdicts(tables: SearchTables, rules: SearchRules) -> list[Verdict]:
    """The verdict of every condition (and the gap claim where compared), Holm-corrected over the tested ones,
    those with a p-value (`judge`)."""
    return judge(search_findings(tables.models, rules, tables.compare_gaps), rules)


def condition_tests(models: pd.DataFrame, rules: SearchRules, compare_gaps: bool = False) -> pd.DataFrame:
    """One row per condition: its counts, p-value, power and critical count at the strictest Holm level α/m (m
    counting the gap claim where compared), the smallest rate it detects with the power required, and its
    status."""
    judged = judge(search_findings(models, rules, compare_gaps), rules)
    level = rules.alpha / max(1, sum(v.p_value is not None for v in judged))
    rows = []
    conditions = models.groupby("condition", sort=False)
    for (name, group), verdict in zip(conditions, judged[: conditions.ngroups], strict=True):
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
