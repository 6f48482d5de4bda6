"""Emergence steps, orders and their consistency across seeds, on synthetic curves with known answers."""

import json
import math

import numpy as np
import pandas as pd
import pytest

from headway.analysis.emergence import (
    emergence_orders,
    emergence_step,
    emergence_table,
    kendall_tau_b,
    order_consistency,
)
from headway.errors import ConfigError
from headway.plots.emergence import plot_emergence, plot_hop_accuracy

STEPS = np.arange(0, 1001, 25, dtype=float)


def sigmoid(centre: float, width: float = 20.0, low: float = 0.1, high: float = 0.9) -> np.ndarray:
    """A score curve rising from `low` to `high` around step `centre`."""
    return low + (high - low) / (1.0 + np.exp(-(STEPS - centre) / width))


def long_curves(centres_by_seed: dict[int, dict[str, float]]) -> pd.DataFrame:
    """The long (seed, unit, step, score) table of sigmoid curves with the given rise steps."""
    rows = [{"seed": seed, "unit": unit, "step": step, "score": score, "layer": 0}
            for seed, centres in centres_by_seed.items() for unit, centre in centres.items()
            for step, score in zip(STEPS, sigmoid(centre))]
    return pd.DataFrame(rows)


SAME = {"L0 prev": 200.0, "L1 link→next": 400.0, "L2 root": 700.0}
REVERSED = {"L0 prev": 700.0, "L1 link→next": 400.0, "L2 root": 200.0}


def test_sigmoid_emerges_at_its_midpoint():
    assert abs(emergence_step(STEPS, sigmoid(300.0)) - 300.0) <= 25.0


def test_flat_or_falling_curve_never_emerges():
    assert math.isnan(emergence_step(STEPS, np.full(len(STEPS), 0.4)))
    assert math.isnan(emergence_step(STEPS, sigmoid(300.0)[::-1]))
    assert math.isnan(emergence_step(STEPS, sigmoid(300.0, low=0.5, high=0.6)))


def test_transient_spike_before_the_rise_is_ignored():
    scores = sigmoid(600.0)
    scores[(STEPS >= 100) & (STEPS <= 150)] = 0.95
    assert abs(emergence_step(STEPS, scores) - 600.0) <= 25.0


def test_fraction_moves_the_level():
    early, late = emergence_step(STEPS, sigmoid(500.0), fraction=0.1), emergence_step(STEPS, sigmoid(500.0), 0.9)
    assert early < 500.0 < late


@pytest.mark.parametrize("steps, scores, kwargs, needle", [
    ([0, 10, 20], [0.1, 0.5, 0.9], {"fraction": 1.5}, "1.5"),
    ([0, 10, 20], [0.1, 0.5, 0.9], {"fraction": 0.0}, "fraction = 0.0"),
    ([0, 20, 10], [0.1, 0.5, 0.9], {}, "[0.0, 20.0, 10.0]"),
    ([0, 10], [0.1, 0.5, 0.9], {}, "same length"),
    ([0], [0.1], {}, "1 checkpoint"),
    ([0, 10, 20], [0.1, np.nan, 0.9], {}, "nan"),
    ([0, 10, 20], [0.1, 0.5, 0.9], {"min_rise": -0.1}, "-0.1"),
])
def test_bad_input_raises_config_error_naming_the_value(steps, scores, kwargs, needle):
    with pytest.raises(ConfigError) as error:
        emergence_step(np.array(steps), np.array(scores), **kwargs)
    assert needle in str(error.value)


def test_table_has_one_row_per_seed_and_unit():
    curves = long_curves({0: SAME, 1: SAME})
    idle = pd.DataFrame({"seed": 0, "unit": "L3 idle", "step": STEPS, "score": 0.2, "layer": 3})
    curves = pd.concat([curves, idle])
    table = emergence_table(curves.sample(frac=1.0, random_state=np.random.default_rng(0)))
    assert list(table.columns) == ["seed", "unit", "emergence_step", "initial_score", "final_score"]
    assert len(table) == 7
    row = table[(table.seed == 0) & (table.unit == "L1 link→next")].iloc[0]
    assert abs(row.emergence_step - 400.0) <= 25.0
    assert row.initial_score == pytest.approx(0.1, abs=1e-3) and row.final_score == pytest.approx(0.9, abs=1e-3)
    assert math.isnan(table[table.unit == "L3 idle"].emergence_step.iloc[0])


def test_duplicate_steps_in_a_curve_name_the_seed_and_unit():
    curves = long_curves({0: SAME})
    with pytest.raises(ConfigError, match="seed 0, unit 'L0 prev'"):
        emergence_table(pd.concat([curves, curves[curves.unit == "L0 prev"].head(1)]))


def test_same_order_in_every_seed_is_fully_consistent():
    table = emergence_table(long_curves({0: SAME, 1: SAME, 2: SAME}))
    orders = emergence_orders(table)
    assert list(orders.order) == [("L0 prev", "L1 link→next", "L2 root")] * 3
    assert not orders.ties.any() and list(orders.n_units) == [3, 3, 3]
    result = order_consistency(table)
    assert result == {"seeds": 3, "most_common_order": ["L0 prev", "L1 link→next", "L2 root"],
                      "share_most_common": 1.0, "kendall_tau_mean": 1.0, "kendall_tau_min": 1.0, "pairs": 3, "tied_seeds": 0}
    json.dumps(result)


def test_a_reversed_seed_gives_tau_minus_one_and_share_two_thirds():
    table = emergence_table(long_curves({0: SAME, 1: SAME, 2: REVERSED}))
    result = order_consistency(table)
    assert result["share_most_common"] == pytest.approx(2 / 3)
    assert result["most_common_order"] == ["L0 prev", "L1 link→next", "L2 root"]
    assert result["kendall_tau_min"] == pytest.approx(-1.0)
    assert result["kendall_tau_mean"] == pytest.approx((1.0 - 1.0 - 1.0) / 3)
    pair = order_consistency(table[table.seed.isin([0, 2])])
    assert pair["kendall_tau_mean"] == pytest.approx(-1.0) and pair["pairs"] == 1


def test_ties_are_broken_by_name_and_flagged():
    table = emergence_table(long_curves({0: {"b": 300.0, "a": 300.0, "c": 600.0}, 1: SAME}))
    orders = emergence_orders(table).set_index("seed")
    assert orders.loc[0, "order"] == ("a", "b", "c") and orders.loc[0, "ties"]
    assert not orders.loc[1, "ties"]
    assert order_consistency(table)["tied_seeds"] == 1


def test_tau_b_handles_ties_like_the_textbook_formula():
    assert kendall_tau_b(np.array([1, 2, 3]), np.array([1, 1, 2])) == pytest.approx(2 / math.sqrt(6))
    assert math.isnan(kendall_tau_b(np.array([1, 1, 1]), np.array([1, 2, 3])))


def test_units_emerging_in_one_seed_only_are_left_out_of_tau():
    table = emergence_table(long_curves({0: {"a": 200.0, "b": 500.0}, 1: {"c": 200.0, "d": 500.0}}))
    result = order_consistency(table)
    assert result["pairs"] == 0 and math.isnan(result["kendall_tau_mean"]) and math.isnan(result["kendall_tau_min"])
    assert result["share_most_common"] == 0.5
    json.dumps(result)


def test_plots_write_png_files(tmp_path):
    centres = {seed: {f"hop {hop}": 100.0 * hop * (seed + 1) for hop in (1, 2, 3)} for seed in range(5)}
    curves = long_curves(centres)
    table = emergence_table(curves)
    roles = plot_emergence(curves, table, tmp_path / "fig" / "emergence.png")
    hops = plot_hop_accuracy(curves, table, tmp_path / "hops.png", chance=0.25)
    log_curves = curves.assign(step=curves.step * 10)  # 0 … 10 000: symlog x axis
    log_path = plot_emergence(log_curves, emergence_table(log_curves), tmp_path / "log.png")
    for path in (roles, hops, log_path):
        assert path.is_file() and path.stat().st_size > 10_000
