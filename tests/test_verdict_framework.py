"""The Verdict type, the Rules object and `judge`: how every study decides a claim."""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest

from headway.analysis.statistics import agreement_power, agreement_tail, fisher_greater, fisher_power, holm
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.rules import Rules, rule
from headway.studies.verdict import STATUSES, Finding, Verdict, judge, methods_section, verdict_callouts


def test_a_verdict_has_a_known_status_and_evidence():
    assert Verdict("claim", "reproduced", "2 of 3").to_dict() == {
        "claim": "claim", "status": "reproduced", "evidence": "2 of 3", "p_value": None, "alpha": None, "power": None}
    with pytest.raises(ConfigError, match="'partly reproduced' is unknown"):
        Verdict("claim", "partly reproduced", "2 of 3")
    with pytest.raises(ConfigError, match="evidence"):
        Verdict("claim", "reproduced", "")
    report = verdict_callouts(Report("t"), [Verdict("holds", "reproduced", "x"), Verdict("fails", "not reproduced", "y")],
                              "intro")
    html = report.render()
    assert "Claims checked" in html and html.index("holds") < html.index("fails")
    assert STATUSES == ("reproduced", "not reproduced", "not testable")


@dataclass(frozen=True)
class ToyRules(Rules):
    solved: float = rule(0.9, "accuracy a run needs to count as solved", sweep=(0.8, 0.9), low=0.0, high=1.0)
    probe: float = rule(0.5, "read while analysing", stage="analysis", low=0.0, high=1.0)


def test_rules_say_why_what_they_sweep_and_what_the_analysis_reads():
    rules = ToyRules()
    assert rules.stamp("analysis") == {"probe": 0.5}
    assert rules.stamp("summary") == {"alpha": 0.05, "power": 0.8, "solved": [0.9, [0.8, 0.9]]}
    assert rules.sweeps() == {"solved": (0.8, 0.9)}
    rows = {row["rule"]: row for row in rules.rows()}
    assert rows["solved"]["reason"].startswith("accuracy") and rows["solved"]["sweep"] == "0.8, 0.9"
    assert rules.changed(solved=0.95).solved == 0.95
    with pytest.raises(ConfigError, match="unknown rule.*solve"):
        rules.changed(solve=0.95)
    with pytest.raises(ConfigError, match=r"rule solved = 1.5 is invalid; use a number in \[0, 1\]"):
        ToyRules(solved=1.5)
    with pytest.raises(ConfigError, match="rule alpha = nan"):
        ToyRules(alpha=math.nan)
    html = methods_section(Report("t"), rules).render()
    assert "Methods: the rules" in html and "accuracy a run needs" in html


def finding(p: float, power: float = 0.9, untestable: str = "") -> Finding:
    return Finding(f"claim p={p}", "a test", "numbers", p, lambda level: power, untestable)


def test_judge_corrects_over_the_testable_claims_and_never_refutes_without_power():
    found = judge([finding(0.01), finding(0.04), None, finding(0.2, power=0.5), finding(0.3),
                   finding(0.001, untestable="every head is in the circuit"), finding(math.nan)], Rules())
    status = [v.status for v in found]
    # Holm over 4 testable p-values: 0.01 ≤ 0.05/4 rejects; 0.04 > 0.05/3 stops
    assert status == ["reproduced", "not reproduced", "not testable", "not reproduced", "not testable", "not testable"]
    assert "every head is in the circuit" in found[4].evidence and found[4].p_value is None
    assert "power 0.50 is below 0.8" in found[2].evidence
    assert found[0].p_value == 0.01 and found[0].alpha == 0.05 and found[0].power == 0.9
    assert "could not be computed" in found[5].evidence


def test_fisher_and_its_power():
    assert fisher_greater(3, 3, 0, 3) == pytest.approx(0.05)
    assert fisher_greater(0, 3, 3, 3) == 1.0
    assert fisher_power(3, 3, 0.9, 0.1, 0.05) < 0.8 < fisher_power(8, 8, 0.9, 0.1, 0.05)


def test_agreement_of_random_orders_is_exact():
    # 3 seeds, 3! orders: all three agree with chance 6 / 6³; some two of them agree with chance 1 − 6·5·4 / 6³
    assert agreement_tail(3, 3, 6) == pytest.approx(6 / 216)
    assert agreement_tail(2, 3, 6) == pytest.approx(1 - 120 / 216)
    assert agreement_tail(1, 3, 6) == 1.0 and agreement_tail(4, 3, 6) == 0.0
    assert agreement_power(2, 2, 1.0, 0.05) == 0.0  # two seeds, two units: agreement is a coin flip
    assert agreement_power(8, 6, 0.9, 0.05) > 0.9


def test_holm_steps_down_and_a_nan_never_rejects():
    assert holm([0.01, 0.04, 0.03], 0.05) == [True, False, False]
    assert holm([0.01, 0.02, 0.03], 0.05) == [True, True, True]
    assert holm([math.nan, 0.001], 0.05) == [False, True]


def test_an_untestable_claim_says_why_once():
    verdict = judge([Finding.not_testable("claim", "a test", "no run learned")], Rules())[0]
    assert verdict.status == "not testable" and verdict.evidence.count("no run learned") == 1
