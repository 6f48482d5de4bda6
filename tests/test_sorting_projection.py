"""The sorting rise-and-fall projection (`headway.studies.sorting.projection`) on committed study folders: at a
folder's own measured bias it must give the power its verdict states, and its table must move as power does."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from headway.studies.sorting.projection import (folder_rules, largest_bias, measured_biases, power_table,
                                                projected_power, traced_runs)

RESULTS = Path(__file__).resolve().parent.parent / "results"


def verdict(folder: Path) -> tuple[dict, int]:
    """The folder's rise-and-fall verdict and how many of its claims were tested (Holm's m)."""
    verdicts = json.loads((folder / "summary.json").read_text())["verdicts"]
    return (next(v for v in verdicts if v["id"] == "llc-rise-fall"),
            sum(1 for v in verdicts if v.get("p_value") is not None))


@pytest.mark.parametrize("name", ["sorting-rise-fall-fresh-cpu", "sorting-rise-fall-confirm-cpu",
                                  "sorting-rise-fall-pooled-cpu"])
def test_a_folder_projected_at_its_own_bias_has_its_verdicts_power(name):
    folder = RESULTS / name
    rules = folder_rules(folder)
    runs = traced_runs(folder, rules)
    stated, tested = verdict(folder)
    own = measured_biases(folder, runs, rules)[rules.llc_bias_statistic]  # the statistic the folder was judged by
    assert own == pytest.approx(json.loads((folder / "summary.json").read_text())["llc_stability"]["bias"])
    assert projected_power(runs, rules, own, len(runs), rules.alpha / tested) == pytest.approx(stated["power"],
                                                                                               rel=1e-9)


def test_the_projection_grows_with_runs_and_shrinks_with_bias_and_the_pooled_bias_is_the_screens():
    folder = RESULTS / "sorting-rise-fall-confirm-cpu"
    rules = folder_rules(folder)
    runs = traced_runs(folder, rules)
    biases = measured_biases(folder, runs, rules)
    # half_step differences over the twelve runs: mean +0.60%, sd 1.36% → 2 × (0.0060 + t(0.95, 11) × 0.0039)
    assert biases["pooled"] == pytest.approx(0.02596, abs=5e-5) and biases["largest"] == pytest.approx(0.05435, abs=5e-5)
    table = power_table(runs, rules, [0.01, 0.02, 0.03], [4, 12, 24], rules.alpha / 5)
    powers = table.iloc[:3].to_numpy()
    assert (powers[:-1] >= powers[1:]).all()  # more bias, less power
    assert powers[1, 2] > powers[1, 0] and powers[0].min() > 0.95 and powers[2].max() < 0.3
    for count, bias in zip([4, 12, 24], table.iloc[3], strict=True):
        assert projected_power(runs, rules, bias, count, rules.alpha / 5) >= 0.8
        assert projected_power(runs, rules, bias + 0.001, count, rules.alpha / 5) < 0.8
    assert largest_bias(runs, rules, 12, rules.alpha / 5) == pytest.approx(0.022, abs=0.001)
    assert math.isnan(projected_power([], rules, 0.02, 12, 0.01))


def test_the_pooled_confirmation_weighs_the_shared_part_not_the_largest_difference():
    """The 24-run folder's numbers in docs/study-sorting.md: pooled 1.69%, where the largest difference would be 9.5%."""
    folder = RESULTS / "sorting-rise-fall-pooled-cpu"
    rules = folder_rules(folder)
    biases = measured_biases(folder, traced_runs(folder, rules), rules)
    assert biases["pooled"] == pytest.approx(0.0169, abs=5e-5) and biases["largest"] == pytest.approx(0.0949, abs=5e-5)
