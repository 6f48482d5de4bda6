"""A study's verdict on each claim, decided the same way for every claim of every study.

Each claim is a test fixed before the data (a `Finding`): the null or control it is tested against, the
test, its one-sided p-value, and the power the design has to detect the claim's stated effect. `judge`
then decides every claim of a study together:

- **reproduced** — the test rejects its null at the family-wise level `rules.alpha`, Holm-corrected over
  the study's testable claims;
- **not reproduced** — it does not, and the design had at least `rules.power` to detect the stated effect
  (at the Bonferroni level alpha / m, the strictest Holm step, so the power is never overstated);
- **not testable** — the finding says why it cannot be tested (a missing control, a circuit that cannot
  beat its null, too few learned runs), its p-value is missing, or it has too little power. An untestable
  claim never counts as a refutation, and a missing value never passes a comparison.

The report opens with the verdicts (`verdict_callouts`) and states the rules in a Methods section
(`methods_section`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headway.analysis.statistics import holm
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.rules import Rules

STATUSES = ("reproduced", "not reproduced", "not testable")
# Callout colour per status: green when a claim holds, orange when it does not, blue otherwise.
_KIND = {"reproduced": "ok", "not reproduced": "warning"}


@dataclass(frozen=True)
class Verdict:
    """One claim judged by a study: the claim, its status (one of STATUSES), the evidence, and the test's
    p-value, the family-wise level it was judged at and the power it had (None where not computed)."""

    claim: str
    status: str
    evidence: str
    p_value: float | None = None
    alpha: float | None = None
    power: float | None = None

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError(f"verdict status {self.status!r} is unknown; choose one of {', '.join(STATUSES)}")
        if not self.claim or not self.evidence:
            raise ConfigError("a verdict needs both a claim and its evidence")

    def to_dict(self) -> dict[str, object]:
        """{"claim", "status", "evidence", "p_value", "alpha", "power"}, as summary.json stores it."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Finding:
    """One claim's pre-registered test, before the study-wide correction.

    `test` says in advance what decides the claim: the null or control, the test and the effect it must
    detect. `p_value` is the test's one-sided p (NaN when it could not be computed); `power(level)` the
    probability that the test rejects at `level` when the stated effect holds; `evidence` the numbers
    (statistic, intervals, per-cell detail); `untestable` why the claim cannot be tested here ("" when it
    can)."""

    claim: str
    test: str
    evidence: str
    p_value: float = math.nan
    power: Callable[[float], float] = lambda level: math.nan
    untestable: str = ""

    @classmethod
    def not_testable(cls, claim: str, test: str, why: str, evidence: str = "") -> Finding:
        """A claim this study cannot test, and why (the reason is not repeated as evidence)."""
        return cls(claim, test, evidence, untestable=why)


def judge(findings: Sequence[Finding | None], rules: Rules) -> list[Verdict]:
    """The verdict on every finding (None entries dropped), Holm-corrected over the testable ones at
    `rules.alpha`; a null result is a refutation only with power ≥ `rules.power` (see the module docstring)."""
    present = [f for f in findings if f is not None]
    testable = [f for f in present if not f.untestable and not math.isnan(f.p_value)]
    rejected = dict(zip(map(id, testable), holm([f.p_value for f in testable], rules.alpha)))
    level = rules.alpha / max(1, len(testable))
    verdicts = []
    for finding in present:
        rule = f"Test, fixed in advance: {finding.test}."
        if finding.untestable or math.isnan(finding.p_value):
            why = finding.untestable or "the test's statistic could not be computed"
            verdicts.append(Verdict(finding.claim, "not testable",
                                    f"{rule} Not testable: {why}." + (f" {finding.evidence}" if finding.evidence else "")))
            continue
        power = float(finding.power(level))
        judged = (f"p = {finding.p_value:.3g}, judged with Holm's correction over {len(testable)} testable claim(s) "
                  f"at family-wise α = {rules.alpha:g}")
        if rejected[id(finding)]:
            status, tail = "reproduced", f"{judged}: rejected."
        elif power >= rules.power:
            status, tail = "not reproduced", f"{judged}: not rejected, with power {power:.2f} ≥ {rules.power:g}."
        else:
            status = "not testable"
            shown = "unknown" if math.isnan(power) else f"{power:.2f}"
            tail = (f"{judged}: not rejected, but the design's power {shown} is below {rules.power:g}, so the null "
                    "result refutes nothing.")
        verdicts.append(Verdict(finding.claim, status, f"{rule} {finding.evidence} {tail}", finding.p_value,
                                rules.alpha, None if math.isnan(power) else power))
    return verdicts


def verdict_callouts(report: Report, verdicts: Sequence[Verdict], intro: str) -> Report:
    """Add a "Claims checked" section to `report`: `intro`, then one callout per verdict."""
    report.section("Claims checked")
    report.paragraph(intro)
    for verdict in verdicts:
        report.callout(f"**{verdict.claim}** — {verdict.status}. {verdict.evidence}", _KIND.get(verdict.status, "note"))
    return report


def methods_section(report: Report, rules: Rules) -> Report:
    """Add a "Methods: the rules" section: every rule of the study with its value, when it is read, why,
    and the values its sensitivity sweep tries."""
    import pandas as pd

    report.section("Methods: the rules")
    report.paragraph("Every threshold, level and minimum effect the verdicts use, fixed before the data "
                     f"(`{type(rules).__module__}.{type(rules).__name__}`). A claim is reproduced when its test "
                     "rejects its null at the family-wise level α (Holm's correction over the study's testable "
                     "claims), not reproduced when it does not and the design had the stated power, and not "
                     "testable otherwise.")
    report.table(pd.DataFrame(rules.rows()), "The rules (stage: analysis rules are part of the analysis cache's "
                 "stamp; summary rules are read when judging the tables).", float_format="{:g}")
    return report
