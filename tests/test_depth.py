"""The depth bound and the depth-law table and figure built from a metrics DataFrame."""

import pandas as pd
import pytest

from headway.plots.depth import plot_depth
from headway.studies.retrieval.depth import depth_table, measured_min_layers
from headway.tasks.retrieval.theory import min_layers


@pytest.mark.parametrize("hops, layers", [(1, 1), (2, 2), (4, 2), (5, 3), (13, 3), (14, 4), (40, 4),
                                          (41, 5), (121, 5), (122, 6)])
def test_min_layers_is_ceil_log3_of_2d(hops, layers):
    assert min_layers(hops) == layers


def synthetic_metrics():
    rows = []
    accuracy = {(1, 1): 1.0, (1, 2): 0.25, (2, 1): 1.0, (2, 2): 0.99}  # (layers, hops) -> final acc
    for (layers, hops), acc in accuracy.items():
        for seed in (0, 1):
            run_id = f"L{layers}D{hops}s{seed}"
            rows.append(dict(run_id=run_id, step=0, val_accuracy=0.05, layers=layers, hops=hops, seed=seed,
                             vocab=16, chains=4))
            rows.append(dict(run_id=run_id, step=100, val_accuracy=acc - 0.01 * seed, layers=layers, hops=hops,
                             seed=seed, vocab=16, chains=4))
    return pd.DataFrame(rows)


def test_depth_table_uses_final_steps_and_reports_baselines():
    table = depth_table(synthetic_metrics())
    cell = table[(table.layers == 1) & (table.hops == 2)].iloc[0]
    assert cell.accuracy == pytest.approx(0.245)
    assert cell.accuracy_min == pytest.approx(0.24) and cell.accuracy_max == pytest.approx(0.25)
    assert cell.chance_roots == 0.25 and cell.chance_vocab == 1 / 16 and cell.seeds == 2
    assert not cell.solved
    measured = measured_min_layers(table).set_index("hops")
    assert measured.loc[1, "measured_min_layers"] == 1 and measured.loc[2, "measured_min_layers"] == 2
    assert measured.loc[2, "bound"] == 2


def test_depth_figure_is_written(tmp_path):
    path = plot_depth(depth_table(synthetic_metrics()), tmp_path / "fig" / "depth.png")
    assert path.is_file() and path.stat().st_size > 10_000
