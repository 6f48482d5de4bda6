"""The sorting study end to end on a small grid, the stage rule, and the study command's checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from headway.analysis.development import trace_steps
from headway.analysis.llc import SGLDSettings
from headway.analysis.stages import label_stages, llc_turns, loss_plateaus, stage_boundaries
from headway.cli.main import main
from headway.errors import ConfigError
from headway.studies.sorting.plan import SortingPlan, study_plan
from headway.studies.sorting.study import SortingStudy
from headway.tasks.registry import scale_settings

SMALL = {**scale_settings("cpu", "sorting"), "length": 5, "values": 16, "d_model": 32, "d_head": 16, "steps": 150,
         "batch_size": 64, "train_size": 5000, "val_size": 500, "eval_every": 25, "checkpoint_every": 50,
         "log_checkpoints": 6}


def small_plan(**changes) -> SortingPlan:
    plan = SortingPlan("cpu", data=("uniform", 1.5), weight_decays=(0.005, 0.0), seeds=(0, 1), settings=SMALL,
                       sgld=SGLDSettings(lr=1e-4, chains=2, draws=10, burnin=5, batch_size=32, init_loss_batches=4),
                       llc_checkpoints=4, examples=300)
    return plan.with_overrides(**changes)


def test_stage_rule_finds_a_rise_then_fall_and_the_loss_plateaus():
    steps = np.unique(np.round(np.logspace(0, 4, 25)).astype(int))
    x = np.log10(steps)
    llc = 10 + 40 * np.exp(-((x - 2.0) ** 2) / 0.3)  # peaks at step 100
    loss = 1 / (1 + np.exp(4 * (x - 1.5))) * 3 + 0.05  # falls around step 30
    turns = llc_turns(steps, llc)
    assert [kind for _, kind in turns] == ["max"] and 60 <= turns[0][0] <= 160
    plateaus = loss_plateaus(steps, loss)
    assert [kind for _, kind in plateaus] == ["loss falls", "loss settles"]
    assert plateaus[0][0] < 30 < plateaus[1][0]
    boundaries = stage_boundaries(steps, loss, steps, llc)
    assert set(boundaries.source) == {"llc", "loss"} and boundaries.step.is_monotonic_increasing
    stages = label_stages(boundaries[boundaries.source == "llc"], steps, llc)
    assert stages.llc.tolist() == ["rises", "falls"]


def test_checkpoints_that_are_not_minima_are_left_out_of_the_llc_rule():
    steps = np.array([0, 1, 3, 10, 30, 100, 300, 1000])
    llc = np.array([-4000, -3500, -2000, 500, 600, 450, 380, 370.0])  # negative: w* is no local minimum yet
    loss = np.array([3.9, 3.5, 2.0, 0.5, 0.1, 0.05, 0.04, 0.04])
    boundaries = stage_boundaries(steps, loss, steps, llc)
    llc_rows = boundaries[boundaries.source == "llc"]
    assert (10, "local") in set(zip(llc_rows.step, llc_rows.kind))
    stages = label_stages(llc_rows, steps, llc)
    assert stages.llc.iloc[0] == "not local" and stages.end.iloc[0] == 10
    assert stages.llc.tolist() == ["not local", "falls"]  # the rise through negative values is not counted


def test_stage_rule_ignores_noise_and_flat_curves():
    steps = np.arange(1, 30)
    rng = np.random.default_rng(0)
    noisy = 20 + rng.normal(0, 0.2, len(steps)) + np.linspace(0, 10, len(steps))  # a steady rise with noise
    assert llc_turns(steps, noisy) == []
    assert llc_turns(steps, np.full(len(steps), 5.0)) == []
    assert loss_plateaus(steps, np.full(len(steps), 1.0)) == []
    with pytest.raises(ConfigError, match="one value per step"):
        stage_boundaries(steps, noisy[:-1], steps, noisy)


def test_trace_steps_are_log_spaced_and_keep_the_ends():
    saved = [0, 1, 2, 3, 5, 8, 13, 22, 36, 60, 100, 170, 300, 500, 800, 1200]
    picked = trace_steps(saved, 6)
    assert picked[0] == 0 and picked[-1] == 1200 and len(picked) <= 6
    assert trace_steps(saved[:4], 6) == saved[:4]


def test_plans_check_their_grid():
    assert len(study_plan("cpu").runs()) == 18
    assert len(study_plan("cpu").development_runs()) == 2
    with pytest.raises(ConfigError, match="scale = 'tpu'"):
        study_plan("tpu")
    with pytest.raises(ConfigError, match="mean_gap = 9"):
        study_plan("cpu").with_overrides(data=("uniform", 9.0))
    with pytest.raises(ConfigError, match="weight decay"):
        study_plan("cpu").with_overrides(weight_decays=(-1.0,))


@pytest.mark.slow
def test_sorting_study_end_to_end_on_a_small_grid(tmp_path):
    out = tmp_path / "study"
    report = SortingStudy(small_plan(), out, device="cpu", progress=False).run()
    html = report.read_text()
    for section in ("Head modes", "Threshold sensitivity", "Circuits", "Ablations", "Development", "Claims",
                    "Methods"):
        assert section in html
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 8 and sum(summary["modes"].values()) == 8
    assert {v["claim"] for v in summary["verdicts"]} >= {
        "A one-layer attention-only transformer learns to sort",
        "Vocabulary-splitting appears with and without weight decay",
        "The LLC rises during initial learning and falls while the heads specialise"}
    assert abs(summary["realised_mean_gap"]["gap 1.5"] - 1.5) < 0.1
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 8 and results["mode"].isin(["splitting", "copy_suppression", "overlapping", "other"]).all()
    sweep = pd.read_csv(out / "mode_sweep.csv")  # every run at every swept threshold value, the default among them
    assert len(sweep) == 8 * 10 and set(sweep.threshold) == {"copy", "max_overlap"}
    at_default = sweep[(sweep.threshold == "copy") & (sweep.value == 3.5)].set_index("run_id")["mode"]
    assert at_default.to_dict() == results.set_index("run_id")["mode"].to_dict()
    fractions = pd.read_csv(out / "mode_fractions.csv")
    assert (fractions.ci_low <= fractions.fraction).all() and (fractions.fraction <= fractions.ci_high).all()
    assert results.val_accuracy.between(0, 1).all() and results.ar_token_accuracy.between(0, 1).all()
    assert np.isfinite(results.llc).all()
    curve = pd.read_csv(out / "llc_curve.csv")
    assert set(curve.weights) == {"all", "L0H0", "L0H1"} and curve.step.nunique() == 4
    assert curve.run_id.nunique() == 2  # uniform data, seed 0, both weight decays
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert {"training.png", "mode_map.png", "mode_fractions.png"} <= figures
    assert sum(name.startswith("development_") for name in figures) == 2
    assert sum(name.startswith("sgld_") for name in figures) == 2  # each chain's loss trace, per traced run
    assert any(name.startswith("circuits_") for name in figures)
    # a second call reuses everything: same tables, nothing retrained or re-estimated
    before = (out / "results.csv").read_text()
    SortingStudy(small_plan(), out, device="cpu", progress=False).run()
    assert (out / "results.csv").read_text() == before
    again = json.loads((out / "summary.json").read_text())
    assert again["seconds"]["training_s"] < 5 and again["seconds"]["analysis_s"] < 5


def test_study_sorting_cli_dry_run_and_bad_input(capsys):
    assert main(["study", "sorting", "--out", "unused", "--dry-run"]) == 0
    assert "18 runs in 1 ensemble(s)" in capsys.readouterr().out
    assert main(["study", "sorting", "--out", "unused", "--mean-gap", "uniform,2,3", "--seed", "0..3",
                 "--dry-run"]) == 0
    assert "24 runs" in capsys.readouterr().out
    assert main(["study", "sorting", "--out", "unused", "--mean-gap", "abc", "--dry-run"]) == 2
    assert "abc" in capsys.readouterr().err
