"""The reachable fraction (headway.analysis.retrieval.reach): known values, the chain and tripling
rules, exact against simulated, the flat layout, seeds, refusals and `headway reach`."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest

from headway.cli.main import main
from headway.errors import ConfigError
from headway.analysis.retrieval import reach
from headway.tasks.retrieval import flow
from headway.analysis.retrieval.reach import ReachBound, accuracy_ceiling, reach_table, reachable_fraction
from headway.tasks.retrieval.theory import min_layers


def reference_reaches(order, layers, attention, layout):
    """The rule of the module docstring with Python sets, one order at a time."""
    hops = len(order)
    if layout == "packed":
        sets = [{k + 1, k} for k in order] + [{hops}]
        statement = list(range(hops + 1))
    else:
        sets = [s for k in order for s in ({k + 1}, {k})] + [{hops}, set()]
        statement = [i // 2 for i in range(2 * hops + 2)]
    for _ in range(layers):
        sets = [set().union(*(sets[j] for j in range(len(sets))
                              if (attention == "bidirectional" or j <= i)
                              and (sets[i] & sets[j] or statement[i] == statement[j])))
                for i in range(len(sets))]
    return 0 in sets[-1]


def test_vectorised_rule_matches_the_set_reference():
    rng = np.random.default_rng(3)
    for _ in range(300):
        hops, layers = int(rng.integers(1, 9)), int(rng.integers(1, 5))
        attention, layout = rng.choice(["causal", "bidirectional"]), rng.choice(["packed", "flat"])
        order = rng.permutation(hops)
        got = bool(flow.reaches(order[None, :], layers, attention, layout)[0])
        assert got == reference_reaches(list(order), layers, attention, layout)


def test_known_causal_shuffled_values():
    assert reachable_fraction(3, 2) == ReachBound(1.0, 1.0, 1.0, "exact", 6)
    four = reachable_fraction(4, 2)
    assert four.method == "exact" and four.orders == 24 and four.lower == four.upper == four.fraction
    assert four.fraction == 8 / 24  # the "about 32%": exactly 8 of the 24 orders
    nine = reachable_fraction(9, 3)
    assert nine.method == "simulated" and nine.orders == 20000
    # Every one of the 9! orders enumerated once (flow.reaches): 188496 / 362880 = 51.94%. The
    # quoted "about 53%" is 3 standard errors above that at 20000 orders; the interval holds the
    # enumerated value, not 0.53.
    assert nine.lower <= 188496 / 362880 <= nine.upper
    assert abs(nine.fraction - 0.5194) < 0.01
    thirteen = reachable_fraction(13, 3)
    # 4,000,000 orders (seeds 100..109) give 0.411% [0.405%, 0.418%], the "about 0.4%"; at the
    # default 20000 orders seed 0 draws 0.495% [0.407%, 0.602%], which holds that value.
    assert thirteen.method == "simulated" and thirteen.lower < 0.00411 < thirteen.upper
    assert 0.002 < thirteen.fraction < 0.007


def test_eight_hops_three_layers_is_exact_over_every_order():
    bound = reachable_fraction(8, 3)
    assert bound.method == "exact" and bound.orders == math.factorial(8) == reach.EXACT_LIMIT
    assert bound.fraction == 0.8


@pytest.mark.parametrize("layers", [1, 2, 3, 4])
def test_causal_chain_order_reaches_two_to_the_t_minus_one(layers):
    limit = 2**layers - 1
    assert reachable_fraction(limit, layers, order="chain") == ReachBound(1.0, 1.0, 1.0, "exact", 1)
    assert reachable_fraction(limit + 1, layers, order="chain").fraction == 0.0


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_bidirectional_reaches_floor_three_to_the_t_over_two_in_every_order(layers):
    limit = 3**layers // 2  # 1, 4, 13: exactly Theorem 1's bound
    for order in ("shuffled", "chain"):
        assert reachable_fraction(limit, layers, "bidirectional", order).fraction == 1.0
        assert reachable_fraction(limit + 1, layers, "bidirectional", order).fraction == 0.0
    assert min_layers(limit) <= layers < min_layers(limit + 1)


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_bidirectional_does_not_depend_on_the_order(layout):
    orders = np.random.default_rng(0).permuted(np.tile(np.arange(7), (200, 1)), axis=1)
    for layers in (1, 2, 3):
        reached = flow.reaches(orders, layers, "bidirectional", layout)
        assert reached.all() or not reached.any()


@pytest.mark.parametrize("hops, layers", [(6, 3), (7, 3), (6, 2)])
def test_simulated_interval_holds_the_exact_value(hops, layers, monkeypatch):
    exact = reachable_fraction(hops, layers)
    monkeypatch.setattr(reach, "EXACT_LIMIT", 1)
    simulated = reachable_fraction(hops, layers, samples=5000, seed=1)
    assert exact.method == "exact" and simulated.method == "simulated" and simulated.orders == 5000
    assert simulated.lower <= exact.fraction <= simulated.upper


def test_exact_enumeration_matches_a_direct_count():
    for hops, layers in [(4, 2), (5, 2), (6, 3)]:
        orders = np.array(list(itertools.permutations(range(hops))))
        direct = np.mean([reference_reaches(list(o), layers, "causal", "packed") for o in orders])
        assert reachable_fraction(hops, layers).fraction == pytest.approx(direct)


def test_flat_needs_one_more_layer_than_packed():
    for attention in ("causal", "bidirectional"):
        assert reachable_fraction(1, 1, attention, layout="packed").fraction == 1.0
        assert reachable_fraction(1, 1, attention, layout="flat").fraction == 0.0
        assert reachable_fraction(1, 2, attention, layout="flat").fraction == 1.0
    # and in general the flat layout at t layers reaches what packed does at t-1
    for hops, layers in [(3, 3), (4, 3), (3, 4), (7, 4)]:
        assert (reachable_fraction(hops, layers, order="chain", layout="flat").fraction
                == reachable_fraction(hops, layers - 1, order="chain").fraction)


def test_seeds_reproduce():
    a = reachable_fraction(10, 3, samples=3000, seed=5)
    assert a == reachable_fraction(10, 3, samples=3000, seed=5)
    assert a.fraction != reachable_fraction(10, 3, samples=3000, seed=6).fraction
    assert reach_table([10], [3], samples=3000, seed=5).equals(reach_table([10], [3], samples=3000, seed=5))


def test_accuracy_ceiling():
    assert accuracy_ceiling(1.0, 4) == 1.0
    assert accuracy_ceiling(0.0, 4) == 0.25
    assert accuracy_ceiling(0.5, 2) == 0.75
    with pytest.raises(ConfigError, match="fraction"):
        accuracy_ceiling(1.5, 4)
    with pytest.raises(ConfigError, match="chains"):
        accuracy_ceiling(0.5, 0)


def test_reach_table_rows_and_columns():
    table = reach_table(range(1, 6), range(1, 4), chains=4)
    assert len(table) == 2 * 2 * 1 * 3 * 5
    assert list(table.columns) == ["attention", "order", "layout", "layers", "hops", "fraction", "lower", "upper",
                                   "method", "orders", "ceiling", "theorem_bound"]
    row = table.query("attention == 'causal' and order == 'shuffled' and layers == 2 and hops == 4").iloc[0]
    assert row.fraction == pytest.approx(1 / 3) and row.ceiling == pytest.approx(1 / 3 + (2 / 3) / 4)
    assert row.theorem_bound  # min_layers(4) = 2
    bidirectional = table[table.attention == "bidirectional"]
    assert ((bidirectional.fraction == 1.0) == bidirectional.theorem_bound).all()


@pytest.mark.parametrize("call, fragment", [
    (lambda: reachable_fraction(0, 2), "hops = 0"),
    (lambda: reachable_fraction(2, 0), "layers = 0"),
    (lambda: reachable_fraction(63, 2), "hops = 63"),
    (lambda: reachable_fraction(2.5, 2), "hops = 2.5"),
    (lambda: reachable_fraction(2, 2, attention="sideways"), "causal, bidirectional"),
    (lambda: reachable_fraction(2, 2, order="sorted"), "shuffled, chain"),
    (lambda: reachable_fraction(2, 2, layout="diagonal"), "packed, flat"),
    (lambda: reachable_fraction(9, 2, samples=0), "samples = 0"),
    (lambda: reach_table([1, 0], [1]), "hops = 0"),
    (lambda: reach_table([], [1]), "hops is empty"),
])
def test_bad_values_raise_config_error_naming_them(call, fragment):
    with pytest.raises(ConfigError, match=fragment):
        call()


def test_cli_prints_the_table_and_writes_csv(tmp_path, capsys):
    out = tmp_path / "reach.csv"
    code = main(["reach", "--hops", "1..4", "--layers", "1,2", "--attention", "causal", "--order", "shuffled",
                 "--layout", "packed,flat", "--csv", str(out)])
    printed = capsys.readouterr().out
    assert code == 0
    assert "D=4" in printed and "33.3" in printed
    lines = out.read_text().splitlines()
    assert lines[0].startswith("attention,order,layout,layers,hops,fraction") and len(lines) == 1 + 2 * 2 * 4


def test_cli_refuses_bad_values_in_one_line(capsys):
    code = main(["reach", "--layout", "diagonal"])
    err = capsys.readouterr().err
    assert code == 2 and err.strip().count("\n") == 0 and "diagonal" in err and err.startswith("headway: error:")


def test_cli_lists_every_order_with_the_reads_it_needs(tmp_path, capsys):
    out = tmp_path / "orders.csv"
    assert main(["reach", "--per-order", "--hops", "3,4", "--layers", "2,3", "--attention", "causal",
                 "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "link_order" in printed and "rootward_reachable" in printed
    table = pd.read_csv(out, dtype={"link_order": str, "leafward_layers": str})
    assert len(table) == 2 * (6 + 24)
    three = table[(table.hops == 3) & (table.layers == 2)]
    assert three.reachable.all() and set(three[three.rootward_reachable == 0].link_order) == {"213", "231", "321"}
    four = table[(table.hops == 4) & (table.layers == 3)]
    assert set(four[four.rootward_reachable == 0].link_order) == {"3214", "3241", "3421", "4321"}
    assert main(["reach", "--per-order", "--hops", "7"]) == 2
    assert "1..6 hops" in capsys.readouterr().err
    assert main(["reach", "--per-order", "--hops", "4", "--attention", "diagonal"]) == 2  # not read as bidirectional
    assert "diagonal" in capsys.readouterr().err
