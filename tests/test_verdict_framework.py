"""The Verdict type, the Rules object and `judge`: how every study decides a claim."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from headway.analysis.statistics import (agreement_power, agreement_tail, binomial_tail, fisher_greater, fisher_power,
                                         holm)
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.rules import Rules, rule
from headway.studies.verdict import (STATUSES, Claim, Finding, MissingInput, Verdict, checked_claim, intersection_union,
                                     is_missing, judge, methods_section, present, reads, verdict_callouts)


def test_a_verdict_has_a_known_status_and_evidence():
    assert Verdict("claim", "reproduced", "2 of 3").to_dict() == {
        "claim": "claim", "status": "reproduced", "evidence": "2 of 3", "p_value": None, "alpha": None, "power": None,
        "id": ""}
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


# --- a missing value is never a finding --------------------------------------------------------------------------

@pytest.mark.parametrize("p_value, why", [(None, "the test's p-value is missing"),
                                          (math.nan, "the test's statistic could not be computed"),
                                          (1.5, "the test's p-value 1.5 is no probability"),
                                          ("0.01", "the test's p-value '0.01' is no probability")])
def test_judge_calls_a_missing_or_impossible_p_value_not_testable(p_value, why):
    found = judge([Finding("claim", "a test", "numbers", p_value, lambda level: 0.99), finding(0.001)], Rules())
    assert found[0].status == "not testable" and f"Not testable: {why}." in found[0].evidence
    assert found[0].p_value is None and found[1].status == "reproduced"
    assert "over 1 testable claim(s)" in found[1].evidence  # the untestable one is no part of Holm's family


@pytest.mark.parametrize("power", [None, math.nan, 1.5, -0.1])
def test_judge_treats_a_missing_power_as_unknown(power):
    null, rejected = judge([finding(0.4, power), finding(0.001, power)], Rules())
    assert null.status == "not testable" and "the design's power unknown is below 0.8" in null.evidence
    assert null.power is None and rejected.status == "reproduced" and rejected.power is None


def test_intersection_union_is_the_largest_p_and_missing_when_one_is():
    assert intersection_union([0.01, 0.2, 0.03]) == 0.2
    assert math.isnan(intersection_union([math.nan, 0.2])) and math.isnan(intersection_union([0.2, math.nan]))
    assert math.isnan(intersection_union([0.2, None])) and math.isnan(intersection_union([]))


def count_test(rules: Rules) -> str:
    return f"runs with score ≥ {rules.alpha:g} counted against half"


@checked_claim("scores are high", count_test,
               runs=reads("score", "kept", "note", "label", "grade", optional=("grade",), derived={"label": ("score",)},
                          nullable={"note": "no note was written"}))
def toy_claim(runs: pd.DataFrame, rules: Rules, *, claim: Claim) -> Finding:
    """Counts the kept runs' scores above α (a claim that selects rows before reading what it tests)."""
    kept = runs[runs.kept]
    high = int((kept.score >= rules.alpha).sum())
    notes = [row.note for row in kept.itertuples()]
    grades = [row.grade for row in kept.itertuples()] if "grade" in kept.columns else []
    return claim.finding(f"{high} of {len(kept)} high; {len(notes)} notes, {len(grades)} grades",
                         binomial_tail(high, len(kept), 0.5), lambda level: 0.9)


def toy_runs(**columns) -> pd.DataFrame:
    base = {"score": [0.9, 0.8, 0.7, 0.01], "kept": [True, True, True, False], "note": ["a", None, "c", "d"],
            "label": ["x", "y", "z", "w"], "grade": [1.0, 2.0, 3.0, 4.0], "unread": [1, 2, 3, 4]}
    return pd.DataFrame({**base, **columns})


def test_a_checked_claim_reads_its_declared_columns_on_the_rows_it_keeps():
    assert toy_claim.reads["runs"].columns == ("score", "kept", "note", "label", "grade")
    found = toy_claim(toy_runs(), Rules())
    assert found.claim == "scores are high" and found.test == "runs with score ≥ 0.05 counted against half"
    assert found.evidence == "3 of 3 high; 3 notes, 3 grades" and found.p_value == 0.125  # a missing note is data
    # a score missing on a row the claim drops is never read: the claim filters first
    assert toy_claim(toy_runs(score=[0.9, 0.8, 0.7, math.nan]), Rules()).p_value == 0.125
    # ... but the column that selects the rows is read on every row
    unselected = toy_claim(toy_runs(kept=[True, True, None, False]), Rules())
    assert unselected.untestable == "a missing input: kept in the runs table is missing in 1 of the 4 row(s) the " \
                                    "test reads"
    missing = toy_claim(toy_runs(score=[0.9, math.nan, math.nan, 0.01]), Rules())
    assert missing.untestable == "a missing input: score in the runs table is missing in 2 of the 3 row(s) the " \
                                 "test reads"
    assert judge([missing], Rules())[0].status == "not testable"
    assert toy_claim(toy_runs().drop(columns="grade"), Rules()).evidence.endswith("0 grades")  # optional: may lack
    assert toy_claim(toy_runs(grade=[1.0, None, 3.0, 4.0]), Rules()).untestable.startswith(
        "a missing input: grade in the runs table is missing in 1 of the 3")  # ... but checked where present
    assert toy_claim(toy_runs().drop(columns="kept"), Rules()).untestable == \
        "a missing input: the runs table has no kept column"


def test_a_checked_claim_cannot_read_what_it_did_not_declare():
    @checked_claim("c", count_test, runs=reads("score"))
    def sneaky(runs: pd.DataFrame, rules: Rules, *, claim: Claim) -> Finding:
        return claim.finding(str(runs.unread.sum()), 0.5, lambda level: 0.9)

    with pytest.raises(AttributeError, match="unread"):
        sneaky(toy_runs(), Rules())
    with pytest.raises(ValueError, match="must be among the columns read"):
        reads("score", nullable={"note": "none"})
    with pytest.raises(ValueError, match="takes rules, claim"):
        checked_claim("c", count_test, table=reads("score"))(lambda rules, claim: None)


def test_a_derived_column_checks_what_it_is_derived_from_and_rows_check_as_they_are_read():
    @checked_claim("c", count_test, runs=reads("score", "label", derived={"label": ("score",)}))
    def by_label(runs: pd.DataFrame, rules: Rules, *, claim: Claim) -> Finding:
        labels = [row.label for row in runs.itertuples()]
        return claim.finding(" ".join(labels), 0.5, lambda level: 0.9)

    assert by_label(toy_runs(), Rules()).evidence == "x y z w"
    assert by_label(toy_runs(score=[0.9, 0.8, math.nan, 0.1]), Rules()).untestable == \
        "a missing input: score in the runs table is missing in 1 of the 4 row(s) the test reads"
    assert by_label(toy_runs(label=["x", None, "z", "w"]), Rules()).untestable.startswith(
        "a missing input: label in the runs table is missing in 1 of the 4")


def test_merges_and_group_keys_stay_checked():
    @checked_claim("c", count_test, left=reads("run_id", "score"), right=reads("run_id", "group"))
    def merged(left: pd.DataFrame, right: pd.DataFrame, rules: Rules, *, claim: Claim) -> Finding:
        both = left.merge(right, on="run_id")
        means = both.groupby("group").score.mean()
        return claim.finding(", ".join(f"{g} {m:g}" for g, m in means.items()), 0.5, lambda level: 0.9)

    left = pd.DataFrame({"run_id": ["a", "b", "c"], "score": [1.0, 2.0, 3.0]})
    right = pd.DataFrame({"run_id": ["a", "b", "c"], "group": ["g", "g", "h"]})
    assert merged(left, right, Rules()).evidence == "g 1.5, h 3"
    assert "group in the right table is missing in 1 of the 3" in \
        merged(left, right.assign(group=["g", None, "h"]), Rules()).untestable
    assert "score in the left table is missing in 1 of the 3" in \
        merged(left.assign(score=[1.0, math.nan, 3.0]), right, Rules()).untestable
    assert "run_id in the left table is missing" in \
        merged(left.assign(run_id=["a", None, "c"]), right, Rules()).untestable


def test_a_value_that_is_no_column_is_checked_by_name():
    assert present("the gap test's p-value", 0.2) == 0.2
    for gone in (None, math.nan, pd.NA, np.float64("nan")):
        with pytest.raises(MissingInput, match="the gap test's p-value is missing"):
            present("the gap test's p-value", gone)
    assert not is_missing("") and not is_missing([math.nan]) and is_missing(pd.NaT)
