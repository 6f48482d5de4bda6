"""The factor comparison of the retrieval study: which of order, supervision and attention elicits composition."""

import math

import pandas as pd

from headway.studies.retrieval.factors import factor_table
from headway.studies.retrieval.rules import RetrievalRules


def grid(composed: dict[tuple[str, str], int], seeds: int = 8, hops: int = 3, layers: int = 2) -> tuple:
    """Final-run and mechanism tables of a causal packed grid: per (order, supervision), `seeds` runs of which
    the given number solve by composing; the others are unsolved."""
    final, mechanisms = [], []
    for (order, supervision), count in composed.items():
        for seed in range(seeds):
            run_id = f"{order}-{supervision}-{seed}"
            final.append({"run_id": run_id, "part": "plain", "curriculum": "ic", "hops": hops, "layers": layers,
                          "solved": seed < count, "order": order, "supervision": supervision,
                          "attention": "causal", "layout": "packed"})
            mechanisms.append({"run_id": run_id, "mechanism": "compositional" if seed < count else "unsolved"})
    return pd.DataFrame(final), pd.DataFrame(mechanisms)


def test_order_composes_and_supervision_does_not():
    final, mechanisms = grid({("chain", "query"): 8, ("chain", "dense"): 8, ("shuffled", "query"): 0,
                              ("shuffled", "dense"): 1})
    table = factor_table(final, mechanisms, RetrievalRules())
    order = table[table.factor == "order"].set_index("held")
    assert set(order.index) == {"supervision query; attention causal; layout packed",
                                "supervision dense; attention causal; layout packed"}
    query = order.loc["supervision query; attention causal; layout packed"]
    assert (query.level_a, query.composed_a, query.level_b, query.composed_b) == ("chain", 8, "shuffled", 0)
    assert math.isclose(query.p_value, 2 / math.comb(16, 8))  # the one table as extreme, both sides
    assert query.power > 0.9  # 8 vs 8 runs detect 0.9 against 0.1 at α/2 (0.93)
    supervision = table[table.factor == "supervision"]
    chain = supervision[supervision.held.str.startswith("attention causal; order chain")].iloc[0]
    assert chain.composed_a == chain.composed_b == 8 and chain.p_value == 1.0
    assert table[table.factor == "attention"].empty  # one attention level: nothing to compare


def test_only_cells_beyond_one_hop_per_layer_are_compared():
    final, mechanisms = grid({("chain", "query"): 8, ("shuffled", "query"): 0}, hops=2, layers=2)
    assert factor_table(final, mechanisms, RetrievalRules()).empty
    few, few_mechanisms = grid({("chain", "query"): 2, ("shuffled", "query"): 0}, seeds=2)
    row = factor_table(few, few_mechanisms, RetrievalRules()).iloc[0]
    assert row.power < 0.8 and row.p_value > 0.05  # 2 vs 2 runs cannot decide: the table says so


def test_a_run_whose_mechanism_is_not_classifiable_counts_for_neither_level():
    final, mechanisms = grid({("chain", "query"): 8, ("shuffled", "query"): 0})
    mechanisms.loc[mechanisms.run_id.isin(["chain-query-0", "chain-query-1"]), "mechanism"] = "not classifiable"
    row = factor_table(final, mechanisms, RetrievalRules()).iloc[0]
    assert (row.composed_a, row.runs_a, row.composed_b, row.runs_b) == (6, 6, 0, 8)


def test_solving_is_compared_with_every_run_counted_whatever_its_mechanism():
    # a level that solves by a route the classifier cannot certify shows in the solved counts only
    final, mechanisms = grid({("shuffled", "whole-chain"): 8, ("shuffled", "dense"): 0})
    mechanisms.loc[mechanisms.run_id.str.contains("whole-chain"), "mechanism"] = "not classifiable"
    row = factor_table(final, mechanisms, RetrievalRules()).iloc[0]
    assert (row.level_a, row.level_b) == ("dense", "whole-chain")
    assert (row.composed_a, row.runs_a, row.composed_b, row.runs_b) == (0, 8, 0, 0)
    assert (row.solved_a, row.trained_a, row.solved_b, row.trained_b) == (0, 8, 8, 8)
    assert math.isclose(row.p_solved, 2 / math.comb(16, 8)) and row.power_solved > 0.9
