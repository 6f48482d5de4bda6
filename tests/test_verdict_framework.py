"""The Verdict type, the Rules object and `judge`: how every study decides a claim."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from headway.analysis.statistics import (agreement_power, agreement_tail, binomial_power, binomial_tail,
                                         fisher_greater, fisher_power, holm)
from headway.cli.study import verdict_table
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.rules import Rules, rule
from headway.studies.verdict import (STATUSES, Claim, Finding, MissingInput, StudyClaim, Verdict, checked_claim,
                                     decision_rule, intersection_union, is_missing, judge, methods_section, not_run,
                                     present, reads, smallest_p, verdict_callouts, verdict_frame)


def test_a_verdict_has_a_known_status_and_evidence():
    assert Verdict("claim", "reproduced", "2 of 3").to_dict() == {
        "claim": "claim", "status": "reproduced", "evidence": "2 of 3", "p_value": None, "alpha": None, "power": None,
        "id": "", "reason": ""}
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


def test_the_family_is_named_by_what_it_holds_the_tested_claims():
    """Holm runs over every claim with a p-value, those a lack of power then makes not testable included; a claim
    without a p-value is outside it, and the evidence says so in one sense of the word."""
    found = judge([finding(0.001), finding(0.5, power=0.1), finding(0.001, untestable="no control")], Rules())
    assert [v.status for v in found] == ["reproduced", "not testable", "not testable"]
    assert all("Holm's correction over the 2 tested claims at family-wise α = 0.05" in v.evidence for v in found[:2])
    assert "testable claim" not in " ".join(v.evidence for v in found)
    assert found[0].reason == "p = 0.001 rejects its null at α = 0.05 (Holm's correction over the 2 tested claims)"
    assert found[1].reason == "p = 0.5 not rejected, and power 0.10 < 0.8: the null result refutes nothing"
    assert found[2].reason == "no control"
    assert "over the tested claims (every one whose test gave a p-value, including those then found not testable" \
        in decision_rule(Rules())


def sign_test(n: int, null: float) -> Finding:
    """All n runs positive against a per-run null rate: the exact binomial test's p and power at rate 0.9."""
    return Finding(f"{n} runs", "a sign test", f"{n} of {n}", binomial_tail(n, n, null),
                   lambda level: binomial_power(n, null, 0.9, level))


def test_a_design_that_cannot_reach_its_level_says_the_smallest_p_it_can_give():
    # two cells that agree by chance with probability 0.25 each: the best outcome has p = 0.0625 > α
    assert smallest_p(sign_test(2, 0.25).power, 0.05 / 3) == pytest.approx(0.0625, rel=1e-9)
    assert smallest_p(sign_test(6, 0.5).power, 0.01) == pytest.approx(0.5 ** 6, rel=1e-9)
    assert math.isnan(smallest_p(lambda level: 0.0, 0.01))  # no outcome rejects at any level
    found = judge([sign_test(2, 0.25), sign_test(1, 0.05), finding(0.001)], Rules())
    assert [v.status for v in found] == ["not testable", "not testable", "reproduced"] and found[0].power == 0.0
    assert ("power 0.00 is below 0.8 (the smallest p this design can give is 0.0625 > α = 0.05, so no outcome "
            "could reject), so the null result refutes nothing.") in found[0].evidence
    assert found[0].reason.endswith("the smallest p this design can give is 0.0625 > α = 0.05, so no outcome could "
                                    "reject")
    # one run against a null rate of α: its best p is α itself, reachable only at Holm's last step
    assert ("the smallest p this design can give is 0.05 > α/3 = 0.0167, the strictest Holm level, at which the "
            "power is computed") in found[1].evidence
    assert "smallest p" not in judge([sign_test(8, 0.25), finding(0.001)], Rules())[0].evidence  # power > 0


def test_power_is_shown_only_where_it_decides_and_a_claim_not_run_is_listed():
    verdicts = judge([finding(0.001, power=0.3), finding(0.5, power=0.95), finding(0.5, power=0.2)], Rules())
    frame = verdict_frame(verdicts)
    assert frame["status"].tolist() == ["reproduced", "not reproduced", "not testable"]
    assert frame["power (null results)"].isna().tolist() == [True, False, False]  # a rejection needs no power

    @checked_claim("answer-only runs fail", lambda rules: "a test", runs=reads("score"))
    def fails(runs: pd.DataFrame, rules: Rules, *, claim) -> None:
        return None

    claims = [StudyClaim("fails", fails, needs="the grid trained no answer-only runs")]
    unrun = not_run(claims, verdicts, Rules())
    assert unrun == [{"id": "fails", "claim": "answer-only runs fail",
                      "reason": "not run: the grid trained no answer-only runs"}]
    html = verdict_callouts(Report("t"), verdicts, "intro", unrun=unrun).render()
    assert "answer-only runs fail" in html and "not run: the grid trained no answer-only runs" in html


def test_the_printed_verdict_table_gives_each_claim_a_reason_and_lists_the_claims_not_run(tmp_path):
    import json

    verdicts = judge([finding(0.001, power=0.3), sign_test(2, 0.25)], Rules())
    unrun = [{"id": "fails", "claim": "answer-only runs fail", "reason": "not run: the grid trained none"}]
    (tmp_path / "summary.json").write_text(json.dumps({"verdicts": [v.to_dict() for v in verdicts],
                                                       "not_run": unrun}))
    lines = verdict_table(tmp_path / "summary.json", width=200).splitlines()
    assert lines[0].startswith("Verdicts (2 claims judged, 1 not run;")
    assert lines[2].split() == ["reproduced", "0.001", "0.05", "–", "claim", "p=0.001"]  # no power beside a rejection
    assert lines[3].strip().startswith("why: p = 0.001 rejects its null")
    assert lines[4].split() == ["not", "testable", "0.062", "0.05", "0.00", "2", "runs"]
    assert "why: p = 0.0625 not rejected, and power 0.00 < 0.8: the smallest p this design can give is 0.0625" \
        in lines[5]
    assert lines[6].split() == ["not", "run", "–", "–", "–", "answer-only", "runs", "fail"]
    assert lines[7].strip() == "why: not run: the grid trained none"
    narrow = verdict_table(tmp_path / "summary.json", width=80).splitlines()
    assert max(map(len, narrow)) <= 80 and " ".join(narrow[:2]).startswith("Verdicts (2 claims judged, 1 not run;")


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
    assert "over the 1 tested claim at" in found[1].evidence  # the untestable one is no part of Holm's family


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
