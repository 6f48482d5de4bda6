"""The stacked-heads study's verdicts on hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headway.analysis.development import Development
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.modular import verdicts as modular
from headway.studies.modular.tables import ModularTables, run_steps
from headway.studies.retrieval import rules
from headway.studies.retrieval import verdicts as retrieval
from headway.studies.sorting import verdicts as sorting
from headway.studies.sorting.plan import data_label_of, study_plan
from headway.studies.sorting.tables import SIGNIFICANT, SortingTables, gap_power, gap_test, mode_fractions
from headway.studies.verdict import STATUSES, Verdict, verdict_callouts
from headway.tasks.sorting.modes import MODES


# --- retrieval ----------------------------------------------------------------------------------

def minimal(rows: list[tuple[int, float, int]], layers: tuple[int, ...] = (1, 2, 3)) -> pd.DataFrame:
    """Minimum-depth rows (hops, measured or NaN, bound) of the plain IC task, one variant, `layers` trained."""
    return pd.DataFrame([{"part": "plain", "curriculum": "ic", "layout": "packed", "attention": "causal",
                          "order": "shuffled", "hops": d, "measured_min_layers": m, "bound": b,
                          "max_layers_trained": max(layers),
                          "bound_testable": b in layers and (b == 1 or b - 1 in layers)} for d, m, b in rows])


def test_the_depth_law_is_judged_only_where_it_can_fail():
    """D = 1 and 2 agree with one hop per layer too: not testable, whatever they show."""
    untestable = retrieval.depth_law(minimal([(1, 1, 1), (2, 2, 2)]))
    assert untestable.status == "not testable" and "D=2: measured 2, bound 2 (not discriminating" in untestable.evidence
    assert untestable.evidence.startswith("Refuted at a hop count D where the bound and one hop per layer differ")
    assert retrieval.depth_law(minimal([(1, 1, 1), (2, 2, 2), (3, 2, 2)])).status == "reproduced"
    linear = retrieval.depth_law(minimal([(1, 1, 1), (2, 2, 2), (3, 3, 2)]))  # one hop per layer: refuted
    assert linear.status == "not reproduced" and "D=3: measured 3, bound 2 (a test)" in linear.evidence
    unsolved = retrieval.depth_law(minimal([(3, np.nan, 2)]))  # the bound depth was trained and failed
    assert unsolved.status == "not reproduced" and "D=3: measured none ≤ 3, bound 2" in unsolved.evidence
    assert retrieval.depth_law(minimal([(3, 2, 2), (5, np.nan, 3)])).status == "partly reproduced"
    shallow = retrieval.depth_law(minimal([(3, 2, 2), (4, 1, 2)]))  # one layer fewer than the bound solves
    assert shallow.status == "partly reproduced"
    no_bound_depth = retrieval.depth_law(minimal([(3, 3, 2)], layers=(3,)))  # bound depth 2 never trained
    assert no_bound_depth.status == "not testable" and "not tested: the bound depth" in no_bound_depth.evidence


def test_the_minimum_depth_table_says_whether_the_bound_was_testable():
    from headway.studies.retrieval.depth import measured_min_layers

    cells = pd.DataFrame([{"hops": d, "layers": layer, "solved": layer >= d} for d in (1, 3, 5) for layer in (2, 3)])
    table = measured_min_layers(cells).set_index("hops")
    assert table.bound.to_dict() == {1: 1, 3: 2, 5: 3}
    assert table.bound_testable.to_dict() == {1: False, 3: False, 5: True}  # D=3 needs layer 1 trained too
    assert table.measured_min_layers[1] == 2 and table.measured_min_layers[3] == 3
    assert np.isnan(table.measured_min_layers[5]) and table.max_layers_trained[5] == 3


def test_the_curriculum_contrast_needs_both_curricula_and_fails_when_answer_only_solves():
    cells = pd.DataFrame([{"part": "plain", "layout": "packed", "attention": "causal", "order": "shuffled", "hops": 2,
                           "layers": 2, "curriculum": c, "supervision": "query", "accuracy": a}
                          for c, a in (("ic", 0.99), ("none", 0.3))])
    assert retrieval.curriculum_contrast(cells).status == "reproduced"
    dense_only = pd.concat([cells.assign(accuracy=[0.3, 0.3]), cells.iloc[:1].assign(supervision="dense")])
    assert retrieval.curriculum_contrast(dense_only).status == "not testable"  # dense IC is not the contrast
    assert retrieval.curriculum_contrast(cells[cells.curriculum == "ic"]) is None
    solved_without = cells.assign(accuracy=0.97)
    assert retrieval.curriculum_contrast(solved_without).status == "not reproduced"
    neither = retrieval.curriculum_contrast(cells.assign(accuracy=0.3))  # nothing learned: no contrast to see
    assert neither.status == "not testable" and neither.evidence.startswith("Refuted if an answer-only cell")


def mechanism_rows(**changes: list) -> pd.DataFrame:
    """Two solved runs whose circuits pass every check, and an unsolved one; `changes` replaces columns."""
    rows = {"solved": [True, True, False], "chance": [0.25] * 3, "circuit_ablated_accuracy": [0.25, 0.27, 0.2],
            "circuit_resample_accuracy": [0.22, 0.24, 0.2], "max_other_head_drop": [0.0, 0.01, 0.0],
            "faithfulness": [0.95, 0.9, 0.1], "rest_ablated_accuracy": [0.97, 0.95, 0.3],
            "p_necessary": [0.02, 0.02, 1.0], "p_sufficient": [0.02, 0.04, 1.0], "random_sets": [49] * 3,
            "random_ablated_accuracy": [0.9, 0.85, 0.5], "random_rest_accuracy": [0.3, 0.35, 0.3],
            "circuit_heads": [2, 3, 0], "minimal_heads": [2, 2, 0], "minimal_faithfulness": [0.95, 0.85, 0.1],
            "p_minimal_sufficient": [0.02, 0.02, 1.0]}
    table = pd.DataFrame({**rows, **changes})
    return table.assign(circuit_carries_answer=rules.carries_answer(table))


def test_a_circuit_must_be_necessary_sufficient_and_better_than_random_sets():
    passing = retrieval.circuit_carries_answer(mechanism_rows())
    assert passing.status == "reproduced" and "Passing all: 2 of 2 solved runs" in passing.evidence
    assert passing.evidence.startswith("Refuted for a run if mean-ablating its circuit leaves more than")
    above_baseline = retrieval.circuit_carries_answer(mechanism_rows(circuit_ablated_accuracy=[0.25, 0.6, 0.2]))
    assert above_baseline.status == "partly reproduced" and "necessary 1," in above_baseline.evidence
    insufficient = retrieval.circuit_carries_answer(mechanism_rows(faithfulness=[0.95, 0.5, 0.1]))
    assert insufficient.status == "partly reproduced" and "sufficient 1," in insufficient.evidence
    like_random = mechanism_rows(p_sufficient=[0.5, 1.0, 1.0])  # circuits of ~every head: any set of that size suffices
    assert retrieval.circuit_carries_answer(like_random).status == "not reproduced"
    bottleneck = mechanism_rows(p_necessary=[0.4, 0.46, 1.0])  # random sets holding one key head are as necessary
    assert retrieval.circuit_carries_answer(bottleneck).status == "reproduced"
    assert retrieval.circuit_carries_answer(mechanism_rows()[lambda f: ~f.solved]) is None


def test_stacked_heads_verdict_needs_the_path_to_carry_what_the_senders_carry():
    def paths(path: float, direct: float, other: float) -> pd.DataFrame:
        return pd.DataFrame({"run_id": ["a"], "solved": [True], "channel": ["qkv"], "path_drop": [path],
                             "direct_drop": [direct], "other_drop": [other]})

    assert retrieval.stacked_heads_compose(paths(0.9, 0.95, float("nan"))).status == "reproduced"
    assert retrieval.stacked_heads_compose(paths(0.3, 0.95, 0.0)).status == "not reproduced"  # < half
    assert retrieval.stacked_heads_compose(paths(0.6, 0.95, 0.7)).status == "not reproduced"  # the null does as well
    assert retrieval.stacked_heads_compose(paths(0.05, 0.05, 0.0)).status == "not testable"  # senders matter not
    assert retrieval.stacked_heads_compose(paths(0.3, 0.95, 0.0), share=0.25).status == "reproduced"


def emergence(order: str, share: float, ties: int, hops: int = 2) -> pd.DataFrame:
    return pd.DataFrame([{"hops": hops, "layers": 2, "seeds": 3, "most_common_order": order,
                          "share_most_common": share, "tied_seeds": ties, "kendall_tau_mean": 1.0}])


def test_emergence_order_verdicts():
    assert retrieval.heads_emerge_in_order(emergence("L1 a → L2 b", 1.0, 0)).status == "reproduced"
    assert retrieval.heads_emerge_in_order(emergence("L1 a → L2 b", 1.0, 2)).status == "partly reproduced"
    assert retrieval.heads_emerge_in_order(emergence("L1 a → L2 b", 2 / 3, 0)).status == "not reproduced"
    assert retrieval.heads_emerge_in_order(emergence("L1 a", 1.0, 0)).status == "not testable"
    assert retrieval.hops_learned_in_order(emergence("hop 2 → hop 1", 1.0, 0)).status == "not reproduced"
    assert retrieval.hops_learned_in_order(emergence("hop 1 → hop 2", 1.0, 0)).status == "reproduced"
    # the null beside each cell: 3 seeds agreeing on one of 2 orders by chance, (1/2)^2; matching hop 1 → 2, (1/2)^3
    assert "by chance 0.25" in retrieval.heads_emerge_in_order(emergence("L1 a → L2 b", 1.0, 0)).evidence
    assert "by chance 0.12" in retrieval.hops_learned_in_order(emergence("hop 1 → hop 2", 1.0, 0)).evidence


def test_a_single_seed_says_why_its_order_agreement_is_undefined_instead_of_printing_nan():
    one_seed = emergence("hop 1 → hop 2", 1.0, 0).assign(seeds=1, kendall_tau_mean=float("nan"))
    evidence = retrieval.hops_learned_in_order(one_seed).evidence
    assert "τ undefined (no two seeds with two units emerged at distinct steps" in evidence and "nan" not in evidence
    assert "τ mean 1.00" in retrieval.hops_learned_in_order(emergence("hop 1 → hop 2", 1.0, 0)).evidence


def test_reach_verdict_fails_for_one_hop_per_layer_and_above_the_bound():
    final = pd.DataFrame({"run_id": ["a", "b"], "part": ["plain"] * 2, "curriculum": ["ic"] * 2, "solved": [True, True]})

    def reach(a: list[int], b: list[int]) -> pd.DataFrame:
        return pd.DataFrame({"run_id": ["a"] * 3 + ["b"] * 3, "site": ["query"] * 6, "layer": [0, 1, 2] * 2,
                             "reach": a + b, "bound_theorem": [0, 1, 4] * 2})

    linear = retrieval.reach_beyond_one_hop_per_layer(final, reach([0, 1, 2], [0, 1, 2]))
    assert linear.status == "not reproduced" and "one hop per layer: 0 of 2" in linear.evidence
    assert retrieval.reach_beyond_one_hop_per_layer(final, reach([0, 1, 3], [0, 1, 2])).status == "partly reproduced"
    assert retrieval.reach_beyond_one_hop_per_layer(final, reach([0, 1, 3], [0, 1, 4])).status == "reproduced"
    above = retrieval.reach_beyond_one_hop_per_layer(final, reach([0, 1, 5], [0, 1, 4]))
    assert above.status == "not reproduced" and "above ⌊3ᵗ/2⌋: 1 of 4" in above.evidence
    unsolved = final.assign(solved=False)  # reach 0 everywhere satisfied the old bound check; it proves nothing
    assert retrieval.reach_beyond_one_hop_per_layer(unsolved, reach([0, 0, 0], [0, 0, 0])) is None


# --- sorting ------------------------------------------------------------------------------------

def sorting_final(modes: list[str], decays: list[float], data: list[str] | None = None,
                  accuracy: float = 0.99) -> pd.DataFrame:
    n = len(modes)
    return pd.DataFrame({"run_id": [f"r{i}" for i in range(n)], "mode": modes, "weight_decay": decays,
                         "data": data or ["uniform"] * n, "mean_gap": [4.5] * n, "seed": range(n),
                         "val_accuracy": [accuracy] * n, "val_list_accuracy": [0.9] * n,
                         "ar_token_accuracy": [0.98] * n, "suppress_fraction0": [0.0] * n})


def test_sensitivity_names_where_a_verdict_flips():
    from headway.studies.retrieval.sensitivity import flips

    table = pd.DataFrame({"claim": ["depth law"] * 3 + ["reach"] * 2, "threshold": ["solved"] * 3 + ["probe"] * 2,
                          "value": [0.5, 0.9, 0.95, 0.8, 0.9], "default": [False, True, False, False, True],
                          "status": ["reproduced", "reproduced", "not reproduced", "not reproduced", "not reproduced"]})
    assert flips(table) == ["depth law — solved: reproduced at 0.5, 0.9; not reproduced at 0.95"]


def phase_rows(**changes) -> pd.DataFrame:
    """Two formulations × cells (L2/D2 linear-reachable, L2/D3 solvable beyond L, L1/D2 unsolvable)."""
    rows = []
    for supervision in ("query", "dense"):
        for layers, hops, ceiling in ((2, 2, 1.0), (2, 3, 1.0), (1, 2, 0.25)):
            rows.append({"supervision": supervision, "attention": "causal", "order": "shuffled", "layout": "packed",
                         "layers": layers, "hops": hops, "accuracy": 0.3, "ceiling": ceiling,
                         "solvable": ceiling >= 0.9, "beyond_linear": hops > layers, "solved_runs": 0,
                         "compositional": 0, "linear": 0})
    table = pd.DataFrame(rows)
    for column, values in changes.items():
        table[column] = values
    table["solved"] = table.accuracy >= 0.9
    return table


def test_more_hops_than_layers_needs_a_solved_solvable_cell_of_compositional_models():
    none_solved = retrieval.layers_solve_more_hops(phase_rows())
    assert none_solved.status == "not reproduced" and "best L2/D3 0.30 (ceiling 1.00)" in none_solved.evidence
    assert "left out as unsolvable (ceiling < 0.9): 2" in none_solved.evidence
    dense = [0.3, 0.3, 0.3, 0.99, 0.98, 0.3]
    shown = retrieval.layers_solve_more_hops(phase_rows(accuracy=dense, solved_runs=[0, 0, 0, 2, 2, 0],
                                                        compositional=[0, 0, 0, 0, 2, 0], linear=[0, 0, 0, 2, 0, 0]))
    assert shown.status == "reproduced" and "Formulations showing it: dense/causal/shuffled/packed." in shown.evidence
    linear = retrieval.layers_solve_more_hops(phase_rows(accuracy=dense, solved_runs=[0, 0, 0, 2, 2, 0],
                                                         compositional=[0, 0, 0, 0, 1, 0], linear=[0, 0, 0, 2, 1, 0]))
    assert linear.status == "not reproduced"  # a model solving D > L classified linear contradicts the classifier
    unsolvable_only = retrieval.layers_solve_more_hops(phase_rows()[lambda t: ~t.solvable | ~t.beyond_linear])
    assert unsolvable_only.status == "not testable"
    solved_where_impossible = phase_rows(accuracy=[0.3, 0.3, 0.95, 0.3, 0.3, 0.3])
    assert retrieval.layers_solve_more_hops(solved_where_impossible).status == "not reproduced"  # unsolvable cells never count


def test_the_depth_bound_that_applies_follows_the_attention():
    from headway.studies.retrieval.depth import depth_table

    rows = [{"run_id": f"{a}{d}{n}", "step": 10, "seed": 0, "attention": a, "order": "shuffled", "layout": "packed",
             "hops": d, "layers": n, "val_accuracy": 0.95, "vocab": 24, "chains": 4}
            for a in ("causal", "bidirectional") for d in (3, 4) for n in (2, 3)]
    table = depth_table(pd.DataFrame(rows), by=("attention", "order", "layout"))
    bound = table.groupby(["attention", "hops"]).bound.first().to_dict()
    assert bound == {("bidirectional", 3): 2, ("bidirectional", 4): 2, ("causal", 3): 2, ("causal", 4): 3}
    assert set(table.theorem_bound[table.hops == 4]) == {2}  # Theorem 1 allows two layers for D = 4
