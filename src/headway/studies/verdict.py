"""A study's verdict on one claim, and the report section that opens every study report with them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from headway.errors import ConfigError
from headway.report.html import Report

STATUSES = ("reproduced", "partly reproduced", "not reproduced", "not testable")
# Callout colour per status: green when a claim holds, orange when it does not, blue otherwise.
_KIND = {"reproduced": "ok", "not reproduced": "warning"}


@dataclass(frozen=True)
class Verdict:
    """One claim checked by a study: the claim, its status (one of STATUSES) and the evidence."""

    claim: str
    status: str
    evidence: str

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError(f"verdict status {self.status!r} is unknown; choose one of {', '.join(STATUSES)}")
        if not self.claim or not self.evidence:
            raise ConfigError("a verdict needs both a claim and its evidence")

    def to_dict(self) -> dict[str, str]:
        """{"claim", "status", "evidence"}, as summary.json stores it."""
        return dataclasses.asdict(self)


def share_status(holds: Sequence[bool]) -> str:
    """The status of a claim checked on several runs: reproduced when it holds for every one, partly
    when for some, not reproduced when for none."""
    holds = [bool(h) for h in holds]
    return "reproduced" if all(holds) else "partly reproduced" if any(holds) else "not reproduced"


def verdict_callouts(report: Report, verdicts: Sequence[Verdict], intro: str) -> Report:
    """Add a "Claims checked" section to `report`: `intro`, then one callout per verdict."""
    report.section("Claims checked")
    report.paragraph(intro)
    for verdict in verdicts:
        report.callout(f"**{verdict.claim}** — {verdict.status}. {verdict.evidence}", _KIND.get(verdict.status, "note"))
    return report
