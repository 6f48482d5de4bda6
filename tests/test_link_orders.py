"""Accuracy per link order: the order an example's queried chain is laid out in, the layers the information flow
needs in it, and the per-run summary that weighs every order the same."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from headway.analysis.retrieval.orders import (direction_needs, layers_needed, link_orders, order_classes,
                                               order_names, run_order_summary)
from headway.analysis.retrieval.reach import reachable_fraction
from headway.studies.retrieval.study import RetrievalStudy
from headway.tasks.retrieval import generate
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.flow import reaches
from headway.tasks.retrieval.positions import map_statements


def _read_orders(batch, hops: int) -> list[str]:
    """Each example's link order read straight from its statements: link k is the statement [x_k, x_{k-1}]."""
    names = []
    for chain, statements in zip(batch.chain, batch.statements, strict=True):
        x = chain[::-1]  # x_0 … x_D
        where = {k: i for i, (left, right) in enumerate(statements) for k in range(1, hops + 1)
                 if left == x[k] and right == x[k - 1]}
        names.append("".join(str(k) for k in sorted(where, key=where.get)))
    return names


@pytest.mark.parametrize(("order", "layout"), [("shuffled", "packed"), ("shuffled", "flat"), ("chain", "packed")])
def test_link_orders_name_the_sequence_the_links_appear_in(order, layout):
    task = RetrievalConfig(hops=4, chains=3, vocab=24, order=order, layout=layout)
    batch = generate(task, 300, 3)
    names = order_names(link_orders(map_statements(task, batch)))
    assert list(names) == _read_orders(batch, 4)
    if order == "chain":
        assert set(names) == {"1234"}  # forward hop order: the root link x₁ = x₀ first
    else:
        assert len(set(names)) == 24


def test_order_classes_say_which_neighbour_comes_first():
    orders = np.array([[0, 1, 2], [2, 1, 0], [1, 0, 2], [0, 2, 1]])  # "123", "321", "213", "132"
    assert list(order_names(orders)) == ["123", "321", "213", "132"]
    assert list(order_classes(orders)) == ["<<", ">>", "><", "<>"]


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_layers_needed_agree_with_the_reachable_fraction_over_every_order(layout):
    every = np.array(list(itertools.permutations(range(4))))
    needed = layers_needed(every, "causal", layout)
    for layers in range(1, 6):
        assert (needed <= layers).mean() == pytest.approx(reachable_fraction(4, layers, "causal", "shuffled",
                                                                             layout).fraction)
    assert (layers_needed(every, "bidirectional", "packed") == layers_needed(every[:1], "bidirectional",
                                                                               "packed")[0]).all()


def _rows(run_id: str, accuracy: list[float], reachable: list[float], examples: int = 100) -> pd.DataFrame:
    return pd.DataFrame({"run_id": run_id, "link_order": [f"o{i}" for i in range(len(accuracy))],
                         "order_class": "<", "examples": examples, "correct": [round(a * examples) for a in accuracy],
                         "accuracy": accuracy, "reachable": reachable, "layers_needed": 2})


def test_the_run_summary_weighs_every_reachable_order_the_same_and_keeps_missing_values_missing():
    table = pd.concat([_rows("a", [1.0, 1.0, 0.95, 0.0, 0.2], [1, 1, 1, 1, 0]),
                       _rows("b", [0.3, 0.4], [0, 0]),
                       _rows("c", [1.0, 0.5, 0.1], [1, 0.5, 0])], ignore_index=True)
    summary = run_order_summary(table, 0.9).set_index("run_id")
    a = summary.loc["a"]
    assert a.reachable_orders == 4 and a.reachable_accuracy == pytest.approx(2.95 / 4)
    assert a.unreachable_accuracy == pytest.approx(0.2) and a.reachable_orders_solved == pytest.approx(0.75)
    assert a.worst_order == "o3" and a.worst_order_accuracy == 0.0
    b = summary.loc["b"]  # no reachable order: nothing to say about them, not zero
    assert b.reachable_orders == 0 and math.isnan(b.reachable_accuracy) and math.isnan(b.reachable_orders_solved)
    assert b.worst_order == "" and b.unreachable_accuracy == pytest.approx(0.35)
    c = summary.loc["c"]  # a class only partly reachable counts on neither side
    assert c.reachable_accuracy == 1.0 and c.unreachable_accuracy == pytest.approx(0.1)
    assert run_order_summary(pd.DataFrame(), 0.9).empty


def test_an_analysis_from_before_the_order_table_stays_current_without_it():
    assert RetrievalStudy.lacks(RetrievalStudy.version) == set()
    assert RetrievalStudy.lacks(6) == {"orders", "probe_orders"}
    assert RetrievalStudy.lacks(7) == {"probe_orders"}  # version 8 added optional rows and columns only
    assert RetrievalStudy.lacks(8) == {"probe_orders"}
    assert RetrievalStudy.lacks(5) is None  # version 6 changed the probes: older analyses are stale
    assert RetrievalStudy.lacks(RetrievalStudy.version + 1) is None


def _every(hops: int) -> np.ndarray:
    return np.array(list(itertools.permutations(range(hops))))


def test_root_ward_reads_answer_the_orders_whose_root_link_comes_first_at_two_layers_and_three_hops():
    """D = 3, two causal layers: every order is reachable, but without leaf-ward reads only the orders whose root
    link precedes the hop-2 link are, and the other three need a leaf-ward read at layer 1."""
    every = _every(3)
    rootward, leafward = direction_needs(every, 2, "causal", "packed")
    names = order_names(every)
    root_first = [name.index("1") < name.index("2") for name in names]
    assert list(rootward == 1.0) == root_first
    assert {n: w for n, w in zip(names, leafward, strict=True) if w} == {"213": "1", "231": "1", "321": "1"}


def test_the_orders_three_layers_need_leaf_ward_reads_for_are_the_leaf_to_root_class():
    """Three causal layers: at D = 4 root-ward reads miss exactly the four orders with links 3, 2, 1 leaf-to-root (a
    leaf-ward read at layer 1 or at layer 2 will do, so neither layer alone is needed); at D = 5 the five orders with
    links 4, 3, 2, 1 leaf-to-root need one at layer 1 itself."""
    four = _every(4)
    rootward, leafward = direction_needs(four, 3, "causal", "packed")
    assert set(order_names(four)[rootward == 0.0]) == {"3214", "3241", "3421", "4321"} and not any(leafward)
    five = _every(5)
    rootward, leafward = direction_needs(five, 3, "causal", "packed")
    assert set(order_names(five)[leafward == "1"]) == {"43215", "43251", "43521", "45321", "54321"}
    assert set(leafward) == {"", "1"} and (rootward == 0.0).sum() == 55
    assert np.isnan(direction_needs(four, 3, "causal", "flat")[0]).all()  # defined for the packed layout only


def test_forbidding_no_leaf_ward_read_changes_nothing():
    every = _every(5)
    for layers in (1, 2, 3):
        assert (reaches(every, layers, "causal", "packed", [True] * layers)
                == reaches(every, layers, "causal", "packed")).all()
    with pytest.raises(ValueError, match="packed layout only"):
        reaches(every, 2, "causal", "flat", [True, False])


def _class_rows(classes: list[str], hops: int = 6) -> pd.DataFrame:
    """Per-class rows of one cell (beyond ORDER_ROWS_HOPS, `link_order` is empty) for two seeds."""
    return pd.DataFrame([{"run_id": f"r{seed}", "part": "plain", "curriculum": "ic", "layout": "packed",
                          "attention": "causal", "order": "shuffled", "supervision": "query", "hops": hops,
                          "layers": 3, "seed": seed, "link_order": "", "order_class": c, "examples": 10,
                          "correct": 5, "accuracy": 0.5, "reachable": 1.0, "layers_needed": 3}
                         for seed in (0, 1) for c in classes])


def test_the_order_figure_names_class_panels_as_classes():
    from headway.plots.orders import order_figure, varied_cells

    figure = order_figure(_class_rows(["<<<<<", ">>>>>", "<><><"]))
    assert "3 order classes" in figure.axes[0].get_title()
    assert varied_cells(_class_rows(["<<<<<"])).empty  # one class per cell: nothing to compare


def test_a_stale_order_table_is_removed_and_a_fifo_in_its_place_refused(tmp_path):
    import os

    from headway.errors import ConfigError
    from headway.studies.retrieval.report import _write_or_clear

    stale = tmp_path / "order_table.csv"
    stale.write_text("old")
    _write_or_clear(stale, pd.DataFrame())
    assert not stale.exists()
    _write_or_clear(stale, pd.DataFrame({"a": [1]}))
    assert stale.read_text().splitlines() == ["a", "1"]
    fifo = tmp_path / "factor_table.csv"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="FIFO"):
        _write_or_clear(fifo, pd.DataFrame())
    assert fifo.exists()
