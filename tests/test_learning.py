"""Real training at CPU scale (packed layout, IC): the depth claims the toolkit exists to test.

One layer learns one hop; on two hops, two layers learn it while one layer gets no further than
guessing among the chain roots (1/K), which needs no retrieval at all.
"""

from __future__ import annotations

import pytest

from headway.runs.config import expand_grid
from headway.runs.store import final_metrics
from headway.tasks.registry import scale_settings
from headway.train.sweep import train_runs

STEPS = 1000
SEEDS = [0, 1]


def final_accuracies(tmp_path, layers: int, hops: int) -> list[float]:
    base = {**scale_settings("cpu"), "steps": STEPS, "layout": "packed", "curriculum": "ic"}
    runs = expand_grid(base, {"layers": [layers], "hops": [hops], "seed": SEEDS})
    final = final_metrics(train_runs(runs, tmp_path, device="cpu", progress=False))
    assert len(final) == len(SEEDS)
    return final.val_accuracy.tolist()


@pytest.mark.slow
def test_one_layer_learns_one_hop(tmp_path):
    assert min(final_accuracies(tmp_path, layers=1, hops=1)) >= 0.98


@pytest.mark.slow
def test_two_hops_need_two_layers(tmp_path):
    chance_roots = 1 / scale_settings("cpu")["chains"]
    two = final_accuracies(tmp_path / "two", layers=2, hops=2)
    one = final_accuracies(tmp_path / "one", layers=1, hops=2)
    assert min(two) >= 0.98, two
    assert all(abs(acc - chance_roots) <= 0.10 for acc in one), (one, chance_roots)
