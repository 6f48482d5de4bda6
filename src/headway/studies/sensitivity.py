"""Every study's threshold sensitivity, built one way from its registry of claims: each rule that has a sweep
(`Rules.sweeps()`) is moved over its values, one at a time, the others at their study values; at each value
the study's tables are derived again where that rule reaches them (the study's `tables_at`), every registered
claim is judged again with the study-wide correction, and the table records each claim's status there, keyed
by its id. A claim *rests* on a rule when its test, evidence or p-value changes anywhere in the rule's sweep;
a verdict *flips* when its status does. The rules are set before the tables are judged: the sweep shows how much
each verdict depends on them.

Built at the report stage from the summarised tables, so summarising never depends on the verdicts."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd

from headway.studies.rules import Rules
from headway.studies.verdict import Finding, StudyClaim, Verdict, judge, untestable_why

COLUMNS = ["claim", "rule", "value", "default", "status", "p_value", "power", "rests", "detail"]
LEFT_OUT = "left out"  # the status of a claim whose experiment the tables at a value do not hold


def threshold_sensitivity(claims: Sequence[StudyClaim], tables: Any, rules: Rules,
                          tables_at: Callable[[Rules], Any | None]) -> pd.DataFrame:
    """Rows (claim id, rule, value, default, status, p_value, power, rests, detail): every registered claim at
    every value of every swept rule, by rule, then claim in registry order, then value. `tables_at(changed)`
    gives the study's tables under rules with one rule changed (None: the analysis stored nothing for that
    value, which is then left out); a `held` claim keeps its finding at the study's rules. `detail` says why a
    claim is not testable at a value where its finding says so."""
    study = {claim.id: claim.finding(tables, rules) for claim in claims if claim.held}
    rows: list[dict[str, Any]] = []
    for name, values in rules.sweeps().items():
        judged = {}
        for value in values:
            changed = rules.changed(**{name: value})
            moved = tables_at(changed)
            if moved is not None:
                judged[value] = _judged(claims, moved, changed, study)
        for claim in claims:
            seen = {value: at[claim.id] for value, at in judged.items()}
            rests = len({_fingerprint(finding) for finding, _ in seen.values()}) > 1
            for value, (finding, verdict) in seen.items():
                rows.append({"claim": claim.id, "rule": name, "value": value, "default": value == getattr(rules, name),
                             "status": verdict.status if verdict else LEFT_OUT,
                             "p_value": math.nan if verdict is None or verdict.p_value is None else verdict.p_value,
                             "power": math.nan if verdict is None or verdict.power is None else verdict.power,
                             "rests": rests, "detail": untestable_why(finding) if finding else ""})
    return pd.DataFrame(rows, columns=COLUMNS)


def _judged(claims: Sequence[StudyClaim], tables: Any, rules: Rules,
            held: dict[str, Finding | None]) -> dict[str, tuple[Finding | None, Verdict | None]]:
    """Claim id → its finding and verdict under `rules` (None for both when the claim is left out), the study
    judged together; held claims take their finding from `held`."""
    found = {claim.id: held[claim.id] if claim.held else claim.finding(tables, rules) for claim in claims}
    given = [finding for finding in found.values() if finding is not None]
    verdicts = dict(zip((finding.id for finding in given), judge(given, rules)))
    return {claim_id: (finding, verdicts.get(claim_id)) for claim_id, finding in found.items()}


def _fingerprint(finding: Finding | None) -> tuple:
    """What a finding says: its test, evidence, reason for being untestable and p-value."""
    return () if finding is None else (finding.test, finding.evidence, finding.untestable, repr(finding.p_value))


def displayed(sensitivity: pd.DataFrame, claims: Sequence[StudyClaim]) -> tuple[pd.DataFrame, list[str]]:
    """The sweep as a report shows it, and one sentence per claim it leaves out of a rule's sweep. Left out: a
    claim's rows over the rules its null was measured at the study's values only
    (`StudyClaim.null_at_study_values`), where away from the default it is not testable for want of a null, not
    for its data. Power is blanked where the claim is reproduced (it decides only a null result)."""
    fixed = {(claim.id, name) for claim in claims for name in claim.null_at_study_values}
    keys = list(zip(sensitivity.claim, sensitivity.rule))
    kept = sensitivity[[key not in fixed for key in keys]]
    kept = kept.assign(power=kept.power.where(kept.status != "reproduced"))
    notes = [f"{claim.id} is not shown over {', '.join(claim.null_at_study_values)}: its null was measured at the "
             "study's values of these rules only, so at every other value it is not testable for want of a null, "
             "whatever the runs show (summary.json keeps those rows)"
             for claim in claims if any(key[0] == claim.id and key in fixed for key in keys)]
    return kept.reset_index(drop=True), notes


def flips(sensitivity: pd.DataFrame) -> list[str]:
    """One sentence per (claim, rule) whose verdict changes over its sweep: which values give which status."""
    out = []
    for (claim, rule), group in sensitivity.groupby(["claim", "rule"], sort=False):
        if group.status.nunique() > 1:
            parts = [f"{status} at {', '.join(f'{v:g}' for v in part.value)}"
                     for status, part in group.groupby("status", sort=False)]
            out.append(f"{claim} — {rule}: " + "; ".join(parts))
    return out


def sweep_text(sensitivity: pd.DataFrame, claim: str, status: str) -> str:
    """Over which swept values of each rule the claim `claim` (an id) rests on, or flips over, its verdict
    keeps `status`, and where it flips ("" when it rests on no swept rule)."""
    parts = []
    for name, frame in sensitivity[sensitivity.claim == claim].groupby("rule", sort=False):
        values = {s: ", ".join(f"{v:g}" for v in group.value) for s, group in frame.groupby("status", sort=False)}
        if set(values) == {status}:
            if frame.rests.any():
                parts.append(f"{name} — same status at every value swept ({frame.value.min():g}–{frame.value.max():g})")
        else:
            moved = [f"{other} at {shown}" for other, shown in values.items() if other != status]
            parts.append(f"{name} — " + ", ".join([f"same status at {values.get(status, 'none')}", *moved]))
    return f"Threshold sweep: {'; '.join(parts)}." if parts else ""


def sweep_texts(sensitivity: pd.DataFrame, verdicts: Sequence[Verdict]) -> dict[str, str]:
    """Claim id → its `sweep_text`, for the report's callouts."""
    return {v.id: sweep_text(sensitivity, v.id, v.status) for v in verdicts if v.id}


def status_table(sensitivity: pd.DataFrame) -> pd.DataFrame:
    """One row per swept rule and value, one column per claim id (registry order): the claim's status there."""
    if sensitivity.empty:
        return pd.DataFrame(columns=["rule", "value"])
    table = sensitivity.pivot(index=["rule", "value"], columns="claim", values="status")
    ordered = list(dict.fromkeys(sensitivity.claim))
    rules = list(dict.fromkeys(sensitivity.rule))
    table = table[ordered].reset_index()
    return table.sort_values("rule", key=lambda r: r.map(rules.index), kind="stable").reset_index(drop=True)
