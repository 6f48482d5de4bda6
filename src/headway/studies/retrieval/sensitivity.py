"""Every verdict that rests on a rule, recomputed over the rule's sweep (`RetrievalRules.sweeps()`), so the
report shows where each verdict flips (docs/study-retrieval.md, "Threshold sensitivity"). The rules
themselves are fixed in advance, not on a study's own models; the sweep shows how much a verdict depends
on them. A claim rests on a rule when its test, evidence or p-value changes anywhere in the rule's sweep."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

import pandas as pd

from headway.studies.retrieval.rules import RetrievalRules, carries_answer
from headway.studies.retrieval.verdicts import CIRCUIT_CLAIM, findings
from headway.studies.verdict import Finding, Verdict, judge
from headway.analysis.retrieval.faithfulness import faithfulness

if TYPE_CHECKING:  # tables imports this sweep
    from headway.studies.retrieval.tables import RetrievalTables

COLUMNS = ["claim", "rule", "value", "default", "status", "p_value", "power", "detail"]
# Rules of the circuit's naming: the random-set null is measured at their study values only, so their sweep
# renames the circuit (the analysis' circuit_sensitivity table) and reports the other parts of the check.
NAMING_RULES = ("role_score", "circuit_drop")


def verdict_sensitivity(tables: RetrievalTables, rules: RetrievalRules,
                        tables_at: Callable[[RetrievalRules], RetrievalTables], circuits: pd.DataFrame) -> pd.DataFrame:
    """Rows (claim, rule, value, default, status, p_value, power, detail): every verdict that rests on a swept
    rule at each value of its sweep, the other rules as given. `tables_at(rules)` gives the tables under
    other rules; `circuits` is the analysis' circuit_sensitivity table (the circuit renamed per naming rule)."""
    rows: list[dict] = []
    for name, values in rules.sweeps().items():
        if name in NAMING_RULES:
            rows.extend(_naming_rows(name, values, tables, rules, circuits))
            continue
        found = {}
        for value in values:
            changed = rules.changed(**{name: value})
            tests = findings(tables_at(changed), changed)
            found[value] = (tests, judge(tests, changed))
        for claim in dict.fromkeys(f.claim for tests, _ in found.values() for f in tests):
            seen = {value: _of(claim, tests, judged) for value, (tests, judged) in found.items()}
            if len({_fingerprint(finding) for finding, _ in seen.values()}) < 2:
                continue  # the claim does not rest on this rule
            for value, (_, verdict) in seen.items():
                rows.append({"claim": claim, "rule": name, "value": value, "default": value == getattr(rules, name),
                             "status": verdict.status if verdict else "left out",
                             "p_value": verdict.p_value if verdict else math.nan,
                             "power": verdict.power if verdict and verdict.power is not None else math.nan,
                             "detail": ""})
    return pd.DataFrame(rows, columns=COLUMNS)


def _of(claim: str, tests: list[Finding], judged: list[Verdict]) -> tuple[Finding | None, Verdict | None]:
    """The finding and verdict of one claim (None for both when the claim was left out)."""
    index = next((i for i, f in enumerate(tests) if f.claim == claim), None)
    return (None, None) if index is None else (tests[index], judged[index])


def _fingerprint(finding: Finding | None) -> tuple:
    """What a finding says: its test, evidence, reason for being untestable and p-value."""
    return () if finding is None else (finding.test, finding.evidence, finding.untestable, repr(finding.p_value))


def _naming_rows(name: str, values: tuple, tables: RetrievalTables, rules: RetrievalRules,
                 circuits: pd.DataFrame) -> list[dict]:
    """The circuit claim over one naming rule: at the study's value its verdict; elsewhere the circuit the rule
    names there, which has no random-set null (measured at the study's value only), so the claim is not
    testable and the detail gives how many solved runs pass the other parts of the check."""
    default = getattr(rules, name)
    verdict = next((v for v in judge(findings(tables, rules), rules) if v.claim == CIRCUIT_CLAIM), None)
    solved = tables.mechanism[tables.mechanism.solved]
    rows = []
    for value in values:
        row = {"claim": CIRCUIT_CLAIM, "rule": name, "value": value, "default": value == default}
        if value == default and verdict is not None:
            rows.append({**row, "status": verdict.status, "p_value": verdict.p_value,
                         "power": math.nan if verdict.power is None else verdict.power, "detail": ""})
            continue
        if circuits.empty:
            continue
        at = {"role_score": rules.role_score, "circuit_drop": rules.circuit_drop, name: value}
        renamed = circuits[(circuits.role_threshold == at["role_score"]) & (circuits.min_drop == at["circuit_drop"])]
        merged = renamed[["run_id", "circuit_heads", "circuit_ablated_accuracy", "rest_ablated_accuracy",
                          "max_other_head_drop"]].merge(
            solved[["run_id", "chance", "clean_accuracy", "all_ablated_accuracy"]], on="run_id")
        merged["faithfulness"] = faithfulness(merged.rest_ablated_accuracy.to_numpy(), merged.clean_accuracy.to_numpy(),
                                              merged.all_ablated_accuracy.to_numpy())
        passing = carries_answer(merged.assign(p_sufficient=0.0), rules)  # every part but the random-set null
        rows.append({**row, "status": "not testable", "p_value": math.nan, "power": math.nan,
                     "detail": f"no random-set null at this rule; {int(passing.sum())} of {len(merged)} solved runs "
                               f"pass the other parts (circuit size {_span(merged.circuit_heads)})"})
    return rows


def _span(values: pd.Series) -> str:
    """"a–b" of a column, or "none" when empty."""
    return f"{values.min()}–{values.max()}" if len(values) else "none"


def flips(sensitivity: pd.DataFrame) -> list[str]:
    """One sentence per (claim, rule) whose verdict changes over its sweep: which values give which status."""
    out = []
    for (claim, rule), group in sensitivity.groupby(["claim", "rule"], sort=False):
        if group.status.nunique() > 1:
            parts = [f"{status} at {', '.join(str(v) for v in part.value)}"
                     for status, part in group.groupby("status", sort=False)]
            out.append(f"{claim} — {rule}: " + "; ".join(parts))
    return out
