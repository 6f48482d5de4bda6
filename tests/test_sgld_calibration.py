"""The SGLD calibration sweep: λ̂, error and acceptance over ε × batch × γ, and the stable setting it picks."""

from __future__ import annotations

import pandas as pd
import pytest

from headway.analysis.llc import SGLDSettings
from headway.analysis.llc.calibration import calibrate_sgld, calibration_grid, choose_setting, judge_calibration
from test_llc import half_mse, regression

COLUMNS = ["lr", "batch_size", "localization", "burnin", "draws", "instance", "llc_mean", "llc_se", "acceptance",
           "llc_drift", "n_warnings", "warnings", "lr_change", "batch_change", "stable", "accepted"]


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


def test_grid_keeps_the_sampling_time_of_the_base_settings():
    base = SGLDSettings(lr=0.4, chains=2, draws=100, burnin=50, batch_size=64)
    grid = calibration_grid(base, [0.8, 0.2], [64, 128], [0.01, 1.0])
    assert len(grid) == 8
    assert [(s.lr, s.burnin, s.draws) for s in grid[::4]] == [(0.8, 25, 50), (0.2, 100, 200)]
    assert {(s.batch_size, s.localization) for s in grid} == {(64, 0.01), (64, 1.0), (128, 0.01), (128, 1.0)}


def test_sweep_on_a_regular_model_reports_each_setting_and_picks_a_stable_accepted_one():
    # d = 4, so λ = 2. nβ = 1 keeps the minibatch noise in the MALA energy small; ε ≥ 0.8 is too coarse.
    model, x, y = regression(1, 4, seed=3, n=2048)
    base = SGLDSettings(lr=0.4, nbeta=1.0, localization=0.01, chains=8, draws=100, burnin=50, batch_size=512)
    table = calibrate_sgld(model, half_mse, x, y, base, [1.6, 0.8, 0.4, 0.2, 0.1], [512, 1024], [0.01])
    assert list(table.columns) == COLUMNS and len(table) == 10
    row = table.set_index(["lr", "batch_size"])
    assert row.loc[(1.6, 512)].lr_change < -0.1 and not row.loc[(1.6, 512)].stable  # halving ε moves λ̂
    assert row.loc[(1.6, 512)].acceptance < row.loc[(0.2, 512)].acceptance
    assert pd.isna(row.loc[(0.1, 512)].lr_change) and pd.isna(row.loc[(0.4, 1024)].batch_change)  # no neighbour
    assert row.loc[(0.4, 512)].stable and row.loc[(0.4, 512)].accepted
    assert row.loc[(0.4, 512)].llc_mean == pytest.approx(2.0, rel=0.15)
    assert abs(row.loc[(0.4, 512)].llc_drift) < 0.1  # the chains settled: their two halves read alike
    assert choose_setting(table) == {"lr": 0.4, "batch_size": 512, "localization": 0.01}
    assert choose_setting(table.assign(accepted=False)) is None
    assert choose_setting(table.assign(accepted=False), acceptance=False) == choose_setting(table)
    # judged per checkpoint: a `step` column keeps models apart
    two = pd.concat([table.assign(step=1), table.assign(step=2, llc_mean=table.llc_mean * 2)])
    pd.testing.assert_series_equal(judge_calibration(two).lr_change.reset_index(drop=True),
                                   pd.concat([table.lr_change] * 2).reset_index(drop=True))
