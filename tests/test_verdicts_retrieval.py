"""The stacked-heads study's verdicts on hand-made tables: each claim's test must say reproduced, not
reproduced and not testable where it should, never count a missing control or an unbeatable circuit, and
keep its false-positive rate at α on simulated null studies."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from headway.analysis.statistics import fisher_power, largest_agreement_pmf, pooled_count_test
from headway.studies.retrieval import verdicts as retrieval
from headway.studies.retrieval.rules import RetrievalRules, carries_answer
from headway.studies.retrieval.significance import random_set_reach
from headway.studies.retrieval.tables import hop_order, order_agreement
from headway.studies.rules import rule
from headway.studies.verdict import Finding, judge
from missing import Claimed, assert_all_covered, assert_missing_is_untestable, cases, judged

RULES = RetrievalRules()
PLAIN = {"part": "plain", "curriculum": "ic", "layout": "packed", "attention": "causal", "order": "shuffled",
         "supervision": "query"}


def status(finding: Finding) -> str:
    """The verdict on one finding judged alone (level α)."""
    return judge([finding], RULES)[0].status


# --- depth law ----------------------------------------------------------------------------------

def runs(cells: dict[tuple[int, int], tuple[int, int]], **facets) -> pd.DataFrame:
    """Final rows of plain IC runs: (hops, layers) → (solved, trained) runs."""
    return pd.DataFrame([{**PLAIN, **facets, "hops": d, "layers": n, "seed": s, "solved": s < solved,
                          "val_accuracy": 0.99 if s < solved else 0.3, "run_id": f"{d}-{n}-{s}-{facets}"}
                         for (d, n), (solved, trained) in cells.items() for s in range(trained)])


def minimal(final: pd.DataFrame, bounds: dict[int, int]) -> pd.DataFrame:
    """Minimum-depth rows of the plain IC runs of `final`, the bound per D as given."""
    rows = []
    for d, group in final.groupby("hops"):
        layers = set(group.layers)
        solved = sorted(n for n, cell in group.groupby("layers") if cell.solved.mean() >= 0.9)
        rows.append({**PLAIN, "hops": d, "measured_min_layers": solved[0] if solved else np.nan, "bound": bounds[d],
                     "max_layers_trained": max(layers),
                     "bound_testable": bounds[d] in layers and (bounds[d] == 1 or bounds[d] - 1 in layers)})
    return pd.DataFrame(rows)


BOUNDS = {1: 1, 2: 2, 3: 2, 5: 3}  # the bound that applies per D (causal, shuffled, packed)


def depth_law(cells: dict) -> Finding:
    final = runs(cells)
    return retrieval.depth_law(minimal(final, BOUNDS), final, RULES)


def test_the_depth_law_is_a_fisher_test_at_every_discriminating_depth():
    solved_at_bound = depth_law({(3, 1): (0, 8), (3, 2): (8, 8)})
    assert status(solved_at_bound) == "reproduced" and solved_at_bound.p_value == pytest.approx(1 / math.comb(16, 8))
    assert "D=3: measured 2, bound 2 (a test: solved at the bound depth 8 of 8" in solved_at_bound.evidence
    never = depth_law({(3, 1): (0, 12), (3, 2): (0, 12), (3, 3): (12, 12)})  # one hop per layer: refuted
    assert never.p_value == 1.0 and status(never) == "not reproduced"
    shallower = depth_law({(3, 1): (12, 12), (3, 2): (12, 12)})  # one layer fewer solves as well: refuted
    assert status(shallower) == "not reproduced"
    few_seeds = depth_law({(3, 1): (0, 3), (3, 2): (0, 3)})  # the CPU grid: 3 seeds cannot reach α
    assert status(few_seeds) == "not testable" and "is below 0.8, so the null" in judge([few_seeds], RULES)[0].evidence
    both = depth_law({(3, 1): (0, 8), (3, 2): (8, 8), (5, 2): (0, 8), (5, 3): (0, 8)})  # every D must hold
    assert both.p_value == 1.0 and "Largest p over the 2 test(s): 1." in both.evidence
    assert both.power(0.05) == pytest.approx(
        fisher_power(8, 8, 0.9, 0.1, 0.05) ** 2)  # independent cells: the chance both reject


def test_the_depth_law_is_not_testable_where_one_hop_per_layer_agrees_or_a_depth_is_missing():
    agree = depth_law({(1, 1): (3, 3), (2, 1): (0, 3), (2, 2): (3, 3)})
    assert status(agree) == "not testable" and "D=2: measured 2, bound 2 (not discriminating" in agree.evidence
    assert agree.untestable.startswith("no hop count separates the bound from one hop per layer")
    no_fewer = depth_law({(3, 2): (8, 8), (3, 3): (8, 8)})  # one layer fewer than the bound was never trained
    assert status(no_fewer) == "not testable" and "not tested: the bound depth and one layer fewer" in no_fewer.evidence


# --- curriculum ---------------------------------------------------------------------------------

def curriculum(ic: tuple[int, int], none: tuple[int, int], layers: int = 2) -> Finding | None:
    cells = pd.concat([runs({(2, layers): ic}), runs({(2, layers): none}, curriculum="none")], ignore_index=True)
    depth = cells[["part", "curriculum", "layout", "attention", "order", "supervision", "hops", "layers"]] \
        .drop_duplicates().assign(bound=2)
    return retrieval.curriculum_contrast(cells, depth, RULES)


def test_the_curriculum_contrast_is_fishers_test_of_ic_against_answer_only():
    assert status(curriculum((6, 6), (0, 6))) == "reproduced"  # p = 1/924
    solved_without = curriculum((10, 10), (10, 10))
    assert solved_without.p_value == 1.0 and status(solved_without) == "not reproduced"
    assert "best answer-only accuracy 0.990" in solved_without.evidence
    assert status(curriculum((2, 2), (0, 2))) == "not testable"  # two seeds each: power far below 0.8
    below_bound = curriculum((0, 6), (0, 6), layers=1)  # one layer cannot reach D = 2: no contrast to see
    assert status(below_bound) == "not testable" and "enough layers for its bound" in below_bound.untestable
    only_ic = runs({(2, 2): (3, 3)})
    assert retrieval.curriculum_contrast(only_ic, only_ic.assign(bound=2), RULES) is None  # not trained: left out


# --- the named circuit --------------------------------------------------------------------------

def mechanism(n: int, circuit_heads: int = 4, model_heads: int = 8, **changes) -> pd.DataFrame:
    """n solved runs whose circuits pass every part of the check; `changes` replaces columns."""
    rows = {"run_id": [f"r{i}" for i in range(n)], "solved": True, "val_accuracy": 0.99, "chance": 0.25,
            "circuit_ablated_accuracy": 0.25,
            "max_other_head_drop": 0.0, "faithfulness": 0.95, "rest_ablated_accuracy": 0.97, "p_sufficient": 0.02,
            "random_sets": 49, "random_ablated_accuracy": 0.9, "random_rest_accuracy": 0.3,
            "circuit_heads": circuit_heads, "model_heads": model_heads}
    return pd.DataFrame({**rows, **changes})


def test_the_circuit_check_reads_the_rules_and_a_missing_null_fails():
    table = mechanism(3, p_sufficient=[0.02, 0.08, np.nan], faithfulness=[0.95, 0.95, 0.95])
    assert list(carries_answer(table, RULES)) == [True, False, False]
    assert list(carries_answer(table, RULES.changed(random_set_level=0.1))) == [True, True, False]
    assert list(carries_answer(table, RULES.changed(sufficient_faithfulness=0.96))) == [False, False, False]


def test_a_circuit_must_beat_random_sets_in_more_runs_than_chance():
    passing = retrieval.circuit_carries_answer(mechanism(10), RULES)
    assert status(passing) == "reproduced" and passing.p_value == pytest.approx(0.04 ** 10)  # ⌊0.05·50⌋/50
    assert "Testable runs passing every part: 10 of 10" in passing.evidence
    like_random = retrieval.circuit_carries_answer(mechanism(20, p_sufficient=0.5), RULES)
    assert like_random.p_value == 1.0 and status(like_random) == "not reproduced"
    assert like_random.power(0.05) > 0.8
    insufficient = retrieval.circuit_carries_answer(mechanism(20, faithfulness=0.5), RULES)
    assert status(insufficient) == "not reproduced" and "sufficient 0," in insufficient.evidence


def test_a_circuit_of_every_head_cannot_be_tested_and_never_refutes():
    """The CPU study's circuits held every head in 6 of 16 runs: random sets of that size are the circuit."""
    every = retrieval.circuit_carries_answer(mechanism(16, circuit_heads=8, p_sufficient=1.0), RULES)
    assert status(every) == "not testable" and "16 with a circuit of every head" in every.evidence
    nearly = retrieval.circuit_carries_answer(mechanism(16, circuit_heads=7, p_sufficient=0.6), RULES)
    assert status(nearly) == "not testable"  # 8 distinct sets of 7: the circuit is drawn too often to beat them
    mixed = retrieval.circuit_carries_answer(
        mechanism(12, circuit_heads=[8] * 6 + [4] * 6, p_sufficient=[1.0] * 6 + [0.02] * 6), RULES)
    assert "Testable runs passing every part: 6 of 6" in mixed.evidence and status(mixed) == "reproduced"
    no_null = retrieval.circuit_carries_answer(mechanism(4, p_sufficient=np.nan, random_sets=0), RULES)
    assert status(no_null) == "not testable" and "4 without a random-set null" in no_null.evidence
    assert status(retrieval.circuit_carries_answer(mechanism(3, solved=False), RULES)) == "not testable"


def test_a_circuit_can_beat_its_null_only_with_enough_distinct_sets():
    assert random_set_reach(49, 8, 8, 0.05) == 0.0 and random_set_reach(0, 8, 4, 0.05) == 0.0
    assert random_set_reach(49, 8, 4, 0.05) == pytest.approx((69 / 70) ** 49 + 49 / 70 * (69 / 70) ** 48)
    assert random_set_reach(49, 8, 1, 0.05) < 0.05  # one head of eight is drawn in about 6 of 49 sets
    assert random_set_reach(49, 8, 4, 0.01) == 0.0  # 49 sets cannot give p ≤ 0.01


# --- stacked heads ------------------------------------------------------------------------------

def paths(n: int, path: float, direct: float, other: float) -> pd.DataFrame:
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(n)], "solved": True, "channel": "qkv", "path_drop": path,
                         "direct_drop": direct, "other_drop": other})


def test_stacked_heads_is_a_sign_test_over_runs_with_a_control():
    reading = retrieval.stacked_heads_compose(paths(10, 0.9, 0.95, 0.0), RULES)
    assert status(reading) == "reproduced" and reading.p_value == pytest.approx(0.5 ** 10)
    as_others = retrieval.stacked_heads_compose(paths(12, 0.6, 0.95, 0.7), RULES)  # the control reads as much
    assert as_others.p_value == 1.0 and status(as_others) == "not reproduced"
    too_weak = retrieval.stacked_heads_compose(paths(12, 0.3, 0.95, 0.0), RULES)  # below half the senders' effect
    assert status(too_weak) == "not reproduced"
    assert status(retrieval.stacked_heads_compose(paths(12, 0.3, 0.95, 0.0), RULES.changed(path_share=0.25))) \
        == "reproduced"
    assert status(retrieval.stacked_heads_compose(paths(3, 0.9, 0.95, 0.0), RULES)) == "not testable"  # p ≥ 1/8
    senders_idle = retrieval.stacked_heads_compose(paths(10, 0.05, 0.05, 0.0), RULES)
    assert status(senders_idle) == "not testable" and "has a control" in senders_idle.untestable


def test_a_missing_control_is_left_out_and_never_passes():
    """The CPU study: 6 of 8 pairs had no head outside the circuit in the receiving layer (NaN control)."""
    no_control = retrieval.stacked_heads_compose(paths(8, 0.93, 0.94, np.nan), RULES)
    assert status(no_control) == "not testable"
    assert "8 of them without a control" in no_control.evidence
    mixed = pd.concat([paths(6, 0.93, 0.94, np.nan), paths(2, 0.9, 0.94, 0.0).assign(run_id=["c0", "c1"])])
    counted = retrieval.stacked_heads_compose(mixed, RULES)
    assert "Runs positive: 2 of 2" in counted.evidence and status(counted) == "not testable"  # 2 runs: p = 1/4
    one_pair_each = pd.concat([paths(10, 0.9, 0.95, 0.0), paths(10, 0.9, 0.95, np.nan)])  # same runs, 2 pairs
    assert retrieval.stacked_heads_compose(one_pair_each, RULES).p_value == pytest.approx(0.5 ** 10)


# --- emergence order ----------------------------------------------------------------------------

def order_cells(cells: list[tuple[int, int, int]], hops: list[int] | None = None) -> pd.DataFrame:
    """Emergence rows: (units, seeds counted, seeds agreeing) per cell."""
    return pd.DataFrame([{"hops": (hops or [2] * len(cells))[i], "layers": 3, "order_units": u, "order_seeds": s,
                          "agreeing_seeds": a, "tested_order": " → ".join(f"u{k}" for k in range(u)), "tied_seeds": 0}
                         for i, (u, s, a) in enumerate(cells)])


def test_heads_emerging_in_one_order_are_tested_against_random_orders():
    agree = retrieval.heads_emerge_in_order(order_cells([(3, 8, 8)]), RULES)
    assert status(agree) == "reproduced" and agree.p_value == pytest.approx(6 * (1 / 6) ** 8)
    disagree = retrieval.heads_emerge_in_order(order_cells([(3, 8, 2)] * 3), RULES)
    assert status(disagree) == "not reproduced" and disagree.power(0.05) >= 0.8
    # the CPU study: two cells of two groups and three seeds, all agreeing — chance 1/4 each
    cpu = retrieval.heads_emerge_in_order(order_cells([(2, 3, 3)] * 2), RULES)
    assert cpu.p_value == pytest.approx(1 / 16) and status(cpu) == "not testable"
    assert "chance of agreeing as well at random 0.25" in cpu.evidence
    one_group = retrieval.heads_emerge_in_order(order_cells([(1, 3, 3)]), RULES)
    assert status(one_group) == "not testable" and "two or more circuit groups" in one_group.untestable
    assert status(retrieval.heads_emerge_in_order(pd.DataFrame(), RULES)) == "not testable"


def test_hops_in_curriculum_order_are_tested_against_one_in_d_factorial():
    in_order = retrieval.hops_learned_in_order(order_cells([(2, 8, 8), (3, 4, 4)], hops=[2, 3]), RULES)
    assert status(in_order) == "reproduced" and in_order.p_value == pytest.approx(0.5 ** 8 * (1 / 6) ** 4)
    reversed_ = retrieval.hops_learned_in_order(order_cells([(3, 12, 0)], hops=[3]), RULES)
    assert reversed_.p_value == 1.0 and status(reversed_) == "not reproduced"
    cpu = retrieval.hops_learned_in_order(order_cells([(2, 3, 3), (2, 3, 3), (3, 1, 1)], hops=[2, 2, 3]), RULES)
    assert cpu.p_value == pytest.approx(0.5 ** 6 / 6) and status(cpu) == "reproduced"  # the CPU study's 7 seeds
    two = retrieval.hops_learned_in_order(order_cells([(2, 3, 3)], hops=[2]), RULES)
    assert two.p_value == 0.125 and status(two) == "not testable"  # 3 seeds of one 2-hop cell: power 0 at α
    assert status(retrieval.hops_learned_in_order(order_cells([(2, 0, 0)]), RULES)) == "not testable"


def test_the_order_counts_leave_out_ties_and_choose_the_unit_set_without_looking_at_orders():
    orders = [("a", "b"), ("b", "a"), ("a", "b", "c"), ("c", "b", "a"), ("b", "c", "a")]
    counted = order_agreement(orders)  # three seeds emerged {a, b, c}: the set most seeds share
    assert counted == {"order_units": 3, "order_seeds": 3, "agreeing_seeds": 1, "tested_order": "a → b → c"}
    expected = order_agreement([("hop 1", "hop 2"), ("hop 2", "hop 1"), ("hop 1",)],
                               hop_order(pd.Series({"hops": 2})))
    assert expected == {"order_units": 2, "order_seeds": 2, "agreeing_seeds": 1, "tested_order": "hop 1 → hop 2"}
    assert order_agreement([])["order_seeds"] == 0


def simulated_rate(test, cells: list[tuple[int, int]], studies: int, rng: np.random.Generator,
                   missing: float = 0.0) -> float:
    """Share of simulated null studies (every seed's order uniformly random; a unit missing with probability
    `missing`) in which `test` rejects at α; `cells` are (units, seeds)."""
    rejected = 0
    for _ in range(studies):
        rows = []
        for units, seeds in cells:
            names = [f"hop {k}" for k in range(1, units + 1)]
            orders = [tuple(names[i] for i in rng.permutation(units) if rng.random() >= missing) for _ in range(seeds)]
            rows.append({"hops": units, "layers": 2, "tied_seeds": 0,
                         **order_agreement(orders, tuple(names) if test is retrieval.hops_learned_in_order else None)})
        rejected += test(pd.DataFrame(rows), RULES).p_value <= RULES.alpha
    return rejected / studies


@pytest.mark.parametrize("test", [retrieval.heads_emerge_in_order, retrieval.hops_learned_in_order])
def test_order_tests_keep_their_false_positive_rate_on_simulated_null_studies(test):
    """600 studies of random orders per design (the rates run at 0.01–0.03); Monte Carlo margin 0.025 (2.8
    standard errors at α = 0.05)."""
    rng = np.random.default_rng(20_261_201)
    for cells, missing in (([(2, 3), (2, 3), (3, 8)], 0.0), ([(2, 8), (3, 6), (4, 5)], 0.1)):
        assert simulated_rate(test, cells, 600, rng, missing) <= RULES.alpha + 0.025


def test_the_pooled_order_test_is_exact():
    """The sum of two cells' largest agreements: its null tail, by enumeration of 2 × 3 seeds' orders of 2 units."""
    pmf = largest_agreement_pmf(3, 2)
    assert pmf.tolist() == pytest.approx([0, 0, 0.75, 0.25])
    p, power = pooled_count_test(5, [pmf, pmf], [pmf, pmf])
    assert p == pytest.approx(2 * 0.75 * 0.25 + 0.25 ** 2) and power(0.07) == pytest.approx(0.25 ** 2)


# --- probe reach, composition, conditional retrieval -------------------------------------------

def reach_tables(per_run: list[list[int]], hops: int = 4) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Solved plain IC runs of `hops` hops with the query reach after layers 0, 1, …"""
    final = pd.DataFrame([{**PLAIN, "run_id": f"r{i}", "hops": hops, "solved": True, "val_accuracy": 0.99}
                          for i in range(len(per_run))])
    reach = pd.DataFrame([{"run_id": f"r{i}", "site": "query", "layer": t, "reach": r, "bound_theorem": 3 ** t // 2}
                          for i, row in enumerate(per_run) for t, r in enumerate(row)])
    return final, reach


def test_reach_beyond_one_hop_per_layer_is_tested_against_a_probes_chance():
    tripling = retrieval.reach_beyond_one_hop_per_layer(*reach_tables([[0, 1, 3, 4]] * 10), RULES)
    assert status(tripling) == "reproduced" and tripling.p_value == pytest.approx(0.05 ** 10)
    linear = retrieval.reach_beyond_one_hop_per_layer(*reach_tables([[0, 1, 2, 3]] * 20), RULES)
    assert status(linear) == "not reproduced" and "Runs positive: 0 of 20" in linear.evidence
    above = retrieval.reach_beyond_one_hop_per_layer(*reach_tables([[0, 2, 3, 4]] * 10), RULES)  # > ⌊3/2⌋ after 1
    assert above.p_value == 1.0 and "above ⌊3ᵗ/2⌋ after some layer 10" in above.evidence
    cannot = retrieval.reach_beyond_one_hop_per_layer(*reach_tables([[0, 1, 2]] * 16, hops=2), RULES)
    assert status(cannot) == "not testable" and "16 solved plain IC run(s), none with D ≥ 3" in cannot.evidence


def phase_rows(accuracy: float = 0.3, solved_runs: int = 0, compositional: int = 0, not_classifiable: int = 0,
               seeds: int = 8) -> pd.DataFrame:
    """Cells L2/D2 (linear-reachable), L2/D3 (solvable beyond L) and L1/D2 (unsolvable), two formulations;
    the L2/D3 cells take the given outcome."""
    rows = []
    for supervision in ("query", "dense"):
        for layers, hops, ceiling in ((2, 2, 1.0), (2, 3, 1.0), (1, 2, 0.25)):
            beyond = hops > layers and ceiling >= 0.9
            rows.append({"supervision": supervision, "attention": "causal", "order": "shuffled", "layout": "packed",
                         "layers": layers, "hops": hops, "accuracy": accuracy if beyond else 0.3, "ceiling": ceiling,
                         "solvable": ceiling >= 0.9, "beyond_linear": hops > layers, "seeds": seeds,
                         "solved_runs": solved_runs if beyond else 0, "compositional": compositional if beyond else 0,
                         "linear": 0, "not_classifiable": not_classifiable if beyond else 0})
    return pd.DataFrame(rows)


def test_more_hops_than_layers_counts_runs_solving_solvable_cells_by_composition():
    composing = retrieval.layers_solve_more_hops(phase_rows(0.95, 8, 8), RULES)
    assert status(composing) == "reproduced" and "Runs solving by composition: 16 of 16" in composing.evidence
    none_solved = retrieval.layers_solve_more_hops(phase_rows(), RULES)
    assert status(none_solved) == "not reproduced"
    assert "left out as unsolvable (ceiling < 0.9): 2" in none_solved.evidence
    some = retrieval.layers_solve_more_hops(phase_rows(0.95, 8, 4, 4), RULES)  # not classifiable: negatives
    assert status(some) == "reproduced" and "Runs solving by composition: 8 of 16" in some.evidence
    assert "Solved runs not classifiable (probes too weak" in some.evidence and "negatives: 8." in some.evidence
    unclassified = retrieval.layers_solve_more_hops(phase_rows(0.95, 8, 0, 8), RULES)
    assert status(unclassified) == "not testable"  # never a refutation: nothing was classified


def test_unsolved_runs_never_refute_composition_while_solved_runs_are_undecided():
    """Issue: 4 solved runs dropped as not classifiable and the claim refuted on the 12 unsolved ones (p = 1, power
    0.93). Counted as negatives, they leave the claim untestable unless the classified runs alone reproduce it."""
    rows = pd.concat([phase_rows(0.4, 3, 1, 2, seeds=8).assign(supervision=lambda t: t.supervision + "-a"),
                      phase_rows(0.05, 0, 0, 0, seeds=8)], ignore_index=True)
    undecided = retrieval.layers_solve_more_hops(rows, RULES)
    assert status(undecided) == "not testable" and "undecided the test cannot refute" in undecided.evidence
    assert "Runs solving by composition: 2 of 32" in undecided.evidence
    decided = retrieval.layers_solve_more_hops(rows.assign(not_classifiable=0), RULES)
    assert status(decided) == "not reproduced"  # every solved run classified: then the same runs do refute it
    all_undecided = retrieval.layers_solve_more_hops(rows.assign(compositional=0, not_classifiable=rows.solved_runs),
                                                     RULES)
    assert status(all_undecided) == "not testable" and "every solved run" in all_undecided.untestable
    unsolvable = retrieval.layers_solve_more_hops(phase_rows()[lambda t: ~t.solvable | ~t.beyond_linear], RULES)
    assert status(unsolvable) == "not testable"
    assert status(retrieval.layers_solve_more_hops(phase_rows(seeds=1), RULES)) == "not testable"  # 2 runs


def test_conditional_retrieval_counts_solved_runs_against_the_decoy_guess():
    def conditional(solved: int, n: int) -> Finding | None:
        return retrieval.conditional_learned(runs({(1, 3): (solved, n)}, part="conditional"), RULES)

    assert status(conditional(6, 16)) == "reproduced"
    assert status(conditional(0, 16)) == "not reproduced"
    assert status(conditional(0, 2)) == "not testable"  # the CPU cell: 2 seeds
    assert retrieval.conditional_learned(runs({(1, 3): (3, 3)}), RULES) is None  # no conditional runs trained


# --- the rules ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class RetrievalRulesWithRoleSweep(RetrievalRules):
    role_score: float = rule(0.4, "the same rule with a wider sweep", sweep=(0.2, 0.4, 0.6), stage="analysis")


def test_the_rules_read_while_analysing_are_in_the_cache_stamp():
    from headway.studies.retrieval.plan import study_plan
    from headway.studies.retrieval.study import RetrievalStudy

    assert RULES.stamp("analysis") == {"role_score": [0.4, [0.3, 0.4, 0.5, 0.6]],
                                       "circuit_drop": [0.05, [0.02, 0.05, 0.1, 0.2]],
                                       "sufficient_faithfulness": [0.8, [0.6, 0.8, 0.9]], "read_level": 0.3,
                                       "random_sets": 49}
    assert RULES.sweeps()["solved_accuracy"] == (0.5, 0.7, 0.8, 0.9, 0.95)
    plan = study_plan("cpu")
    run = plan.runs()[:1]
    default = RetrievalStudy(plan, "unused").analysis_stamp(run)
    stricter = RetrievalStudy(plan, "unused", rules=RULES.changed(sufficient_faithfulness=0.9)).analysis_stamp(run)
    assert default != stricter  # a changed analysis rule re-analyses instead of reusing stale tables
    reading = RetrievalStudy(plan, "unused", rules=RULES.changed(read_level=0.5)).analysis_stamp(run)
    assert default != reading  # the composing heads the composition check ablates are chosen at analysis
    looser = RetrievalStudy(plan, "unused", rules=RULES.changed(solved_accuracy=0.8)).analysis_stamp(run)
    assert default == looser  # a summary rule re-judges the cached tables
    wider = RetrievalStudy(plan, "unused", rules=RetrievalRulesWithRoleSweep()).analysis_stamp(run)
    assert default != wider  # the analysis computes its sweep too


def test_a_cache_stamped_before_a_fixed_value_became_a_rule_stays_valid_while_the_rule_holds_it():
    """read_level was mechanism.READ_LEVEL = 0.3 before it became a rule: a cache stamped then (without it) was
    computed at 0.3, so it is reused at 0.3 and analysed again at any other level."""
    before = {name: value for name, value in RULES.stamp("analysis").items() if name != "read_level"}
    assert RULES.stamps("analysis") == [RULES.stamp("analysis"), before]
    assert RULES.changed(read_level=0.5).stamps("analysis") == [RULES.changed(read_level=0.5).stamp("analysis")]


def test_sensitivity_names_where_a_verdict_flips():
    from headway.studies.sensitivity import flips

    table = pd.DataFrame({"claim": ["depth-law"] * 3 + ["reach"] * 2, "rule": ["solved_accuracy"] * 3 + ["probe"] * 2,
                          "value": [0.5, 0.9, 0.95, 0.8, 0.9], "default": [False, True, False, False, True],
                          "status": ["reproduced", "reproduced", "not testable", "not reproduced", "not reproduced"]})
    assert flips(table) == ["depth-law — solved_accuracy: reproduced at 0.5, 0.9; not testable at 0.95"]


def test_the_depth_bound_that_applies_follows_the_attention():
    from headway.studies.retrieval.depth import depth_table

    rows = [{"run_id": f"{a}{d}{n}", "step": 10, "seed": 0, "attention": a, "order": "shuffled", "layout": "packed",
             "hops": d, "layers": n, "val_accuracy": 0.95, "vocab": 24, "chains": 4}
            for a in ("causal", "bidirectional") for d in (3, 4) for n in (2, 3)]
    table = depth_table(pd.DataFrame(rows), by=("attention", "order", "layout"))
    bound = table.groupby(["attention", "hops"]).bound.first().to_dict()
    assert bound == {("bidirectional", 3): 2, ("bidirectional", 4): 2, ("causal", 3): 2, ("causal", 4): 3}
    assert set(table.theorem_bound[table.hops == 4]) == {2}  # Theorem 1 allows two layers for D = 4


def test_the_minimum_depth_table_says_whether_the_bound_was_testable():
    from headway.studies.retrieval.depth import measured_min_layers

    cells = pd.DataFrame([{"hops": d, "layers": layer, "solved": layer >= d} for d in (1, 3, 5) for layer in (2, 3)])
    table = measured_min_layers(cells).set_index("hops")
    assert table.bound.to_dict() == {1: 1, 3: 2, 5: 3}
    assert table.bound_testable.to_dict() == {1: False, 3: False, 5: True}  # D=3 needs layer 1 trained too
    assert table.measured_min_layers[1] == 2 and table.measured_min_layers[3] == 3
    assert np.isnan(table.measured_min_layers[5]) and table.max_layers_trained[5] == 3


# --- a missing input is never a finding --------------------------------------------------------------------------

def depth_inputs() -> dict:
    """D = 3 tested (the bound depth solves, one layer fewer does not: reproduced) and D = 5 trained at three
    layers only, which none solves (its measured depth is missing by design, the evidence shows how deep it
    was trained)."""
    final = runs({(3, 1): (0, 8), (3, 2): (8, 8), (5, 3): (0, 8)})
    return {"minimal": minimal(final, BOUNDS), "final": final}


def curriculum_inputs() -> dict:
    cells = pd.concat([runs({(2, 2): (6, 6)}), runs({(2, 2): (0, 6)}, curriculum="none")], ignore_index=True)
    depth = cells[["part", "curriculum", "layout", "attention", "order", "supervision", "hops", "layers"]] \
        .drop_duplicates().assign(bound=2)
    return {"final": cells, "depth": depth}


CLAIMS = {
    "depth": Claimed(retrieval.depth_law, depth_inputs, rows={"max_layers_trained": 1}),
    "curriculum": Claimed(retrieval.curriculum_contrast, curriculum_inputs),
    "circuit": Claimed(retrieval.circuit_carries_answer, lambda: {"mechanism": mechanism(10)}),
    "stacked": Claimed(retrieval.stacked_heads_compose, lambda: {"paths": paths(10, 0.9, 0.95, 0.0)}),
    "heads order": Claimed(retrieval.heads_emerge_in_order, lambda: {"emergence": order_cells([(3, 8, 8)])}),
    "hops order": Claimed(retrieval.hops_learned_in_order,
                          lambda: {"hop_emergence": order_cells([(2, 8, 8), (3, 4, 4)], hops=[2, 3])}),
    # reach after layer 0 is never read: one layer is the least that can show anything
    "reach": Claimed(retrieval.reach_beyond_one_hop_per_layer,
                     lambda: dict(zip(("final", "reach"), reach_tables([[0, 1, 3, 4]] * 10))),
                     rows={"reach": 1, "bound_theorem": 1}),
    # the second row is the first cell beyond one hop per layer, the only cells the claim reads
    "composition": Claimed(retrieval.layers_solve_more_hops, lambda: {"phase": phase_rows(0.95, 8, 8)}, row=1),
    "conditional": Claimed(retrieval.conditional_learned,
                           lambda: {"final": runs({(1, 3): (6, 16)}, part="conditional")}),
}


def test_every_column_a_claim_reads_is_in_its_test_inputs():
    assert_all_covered(CLAIMS, retrieval)


@pytest.mark.parametrize("name, table, column, rows, value", cases(CLAIMS))
def test_a_missing_value_in_any_input_column_makes_the_claim_not_testable(name, table, column, rows, value):
    """The sweep that found circuit_carries_answer (faithfulness NaN) saying "not reproduced" with power
    0.9997, and reach_beyond_one_hop_per_layer and layers_solve_more_hops crashing on NaN."""
    assert_missing_is_untestable(CLAIMS[name], RULES, table, column, rows, value, derived={"solved": "val_accuracy"})


@pytest.mark.parametrize("name, table, column, rows, value", cases(CLAIMS, nullable=True))
def test_a_missing_value_that_is_data_is_read_as_such(name, table, column, rows, value):
    finding, status = judged(CLAIMS[name], RULES, table, column, rows, value)
    assert status in ("reproduced", "not reproduced", "not testable") and "missing input" not in finding.untestable


def test_a_missing_faithfulness_is_no_refutation():
    table = mechanism(20, faithfulness=[math.nan] * 20)
    found = judge([retrieval.circuit_carries_answer(table, RULES)], RULES)[0]
    assert found.status == "not testable" and found.power is None  # was "not reproduced", power 0.9997
    assert "faithfulness in the mechanism table is missing in 20 of the 20 row(s)" in found.evidence
    unsolved = mechanism(20, solved=[True] * 10 + [False] * 10, faithfulness=[0.95] * 10 + [math.nan] * 10)
    assert status(retrieval.circuit_carries_answer(unsolved, RULES)) == "reproduced"  # unsolved runs are not read


def test_a_missing_accuracy_is_read_through_whether_the_run_solved():
    """`solved` is computed from the accuracy, so a missing accuracy behind a recorded `solved` still counts."""
    final = runs({(1, 3): (6, 16)}, part="conditional")
    final.loc[3, "val_accuracy"] = math.nan
    assert retrieval.conditional_learned(final, RULES).untestable == \
        "a missing input: val_accuracy in the final table is missing in 1 of the 16 row(s) the test reads"
