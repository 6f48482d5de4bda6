"""The sorting study end to end on a small grid, the stage rule, and the study command's checks."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from headway.analysis.development import development, trace_steps
from headway.analysis.llc import SGLDSettings
from headway.analysis.llc.stability import stability_steps
from headway.analysis.stages import label_stages, llc_turns, loss_plateaus, stage_boundaries
from headway.cli.main import main
from headway.errors import ConfigError
from headway.studies.sorting.plan import SortingPlan, gpu_projection, study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.study import SortingStudy
from headway.studies.sorting.verdicts import CLAIMS, llc_rises_then_falls
from headway.studies.verdict import judge
from headway.tasks.registry import scale_settings

LIMITS = SortingRules().llc_validity()
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


def traced_run(llc: list[float], se: float = 10.0, warnings: dict[int, str] | None = None, seed: int = 0,
               run_id: str = "r") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Metrics and a whole-model LLC trace of one run at steps 0, 1, 3, 10, 30, 100, 300, 1000."""
    steps = [0, 1, 3, 10, 30, 100, 300, 1000]
    metrics = pd.DataFrame({"run_id": run_id, "step": steps, "val_loss": np.geomspace(3.9, 0.01, len(steps)),
                            "weight_decay": 0.0, "seed": seed})
    trace = pd.DataFrame({"run_id": run_id, "step": steps, "weights": "all", "llc_mean": llc, "llc_se": se,
                          "warnings": [(warnings or {}).get(step, "") for step in steps], "data": "uniform"})
    return metrics, trace


def test_checkpoints_with_negative_or_diverged_llc_never_make_the_peak():
    # λ̂ climbs through large negative values (w* not yet a minimum), is highest at its first positive
    # checkpoint and falls from there: read on the valid checkpoints there is no rise.
    metrics, trace = traced_run([-4000, -3500, -2000, -100, 600, 500, 400, 380])
    run = development("r", metrics, trace, fall=0.1, validity=LIMITS)
    assert run.peak_step == 30 == run.start_step and run.peak == 600 and run.final == 380
    assert not run.rises_then_falls
    assert set(run.excluded) == {0, 1, 3, 10} and "not a local minimum" in run.excluded[0]
    assert run.exclusions() == "step 0–10 (4 checkpoints): λ̂ ≤ 0 or undefined: w* is not a local minimum"
    # a diverged chain's checkpoint is left out too, however high its λ̂
    metrics, trace = traced_run([-4000, -3000, 200, 400, 600, 450, 5000, 370],
                                warnings={300: "instance 0: chain 2 diverges: …"})
    run = development("r", metrics, trace, fall=0.1, validity=LIMITS)
    assert run.peak_step == 30 and run.excluded[300] == "a chain diverged" and run.final == 370
    assert run.rises_then_falls and run.start_step == 3 and run.start == 200
    # changes within two standard errors are no rise and fall
    metrics, trace = traced_run([-4000, -3000, 200, 400, 600, 450, 400, 370], se=200.0)
    assert not development("r", metrics, trace, fall=0.1, validity=LIMITS).rises_then_falls
    metrics, trace = traced_run([-1.0] * 8)
    nothing = development("r", metrics, trace, fall=0.1, validity=LIMITS)
    assert nothing.peak_step == -1 and not nothing.rises_then_falls and len(nothing.excluded) == 8


def test_a_heads_course_is_read_from_its_own_curve():
    metrics, whole = traced_run([-4000, -3000, 200, 400, 600, 450, 400, 370])
    head = whole.assign(weights="L0H1", llc_mean=[-40.0, -30, 20, 25, 30, 35, 40, 45])  # still rising at the end
    trace = pd.concat([whole, head])
    run = development("r", metrics, trace, fall=0.1, validity=LIMITS)
    alone = development("r", metrics, trace, fall=0.1, validity=LIMITS, weights="L0H1")
    assert run.weights == "all" and run.peak == 600 and run.rises_then_falls
    assert alone.weights == "L0H1" and alone.peak == 45 == alone.final and alone.peak_step == 1000
    assert alone.start == 20 and not alone.rises_then_falls


def test_llc_verdict_states_its_test_and_groups_seeds_by_condition():
    rules = SortingRules(llc_bias_source="suite")  # the runs below weigh no bias
    falls = development("a", *traced_run([-4000, -3000, 200, 400, 600, 450, 400, 370], run_id="a"), fall=0.1,
                        validity=LIMITS)
    no_rise = development("b", *traced_run([-4000, -3500, -2000, -100, 600, 500, 400, 380], seed=1, run_id="b"),
                          fall=0.1, validity=LIMITS)
    alone = judge([llc_rises_then_falls([no_rise], rules)], rules)[0]
    assert alone.status != "reproduced" and alone.p_value == 1.0
    assert alone.evidence.startswith("Test: per traced run, one-sided z-tests")
    assert "uniform, no wd: seed 1: λ̂ 600 at step 30" in alone.evidence
    assert "no rise: the peak is the first valid checkpoint" in alone.evidence
    assert "left out: step 0–10 (4 checkpoints): λ̂ ≤ 0" in alone.evidence
    both = judge([llc_rises_then_falls([falls, no_rise], rules)], rules)[0]
    assert "1/2 (0.09–0.91) usable traced runs rise and fall" in both.evidence
    assert "uniform, no wd: seed 0: λ̂ 200 at step 3, peak 600 at step 30" in both.evidence


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
    assert len(study_plan("cpu").runs()) == 72  # sized for the mode claims (tests/test_sorting_design.py)
    assert len(study_plan("cpu").development_runs()) == 4  # two seeds at each weight decay
    with pytest.raises(ConfigError, match="llc_weights = 'heads' must include 'all'"):
        study_plan("cpu").with_overrides(llc_weights="heads")
    with pytest.raises(ConfigError, match="scale = 'tpu'"):
        study_plan("tpu")
    with pytest.raises(ConfigError, match="mean_gap = 9"):
        study_plan("cpu").with_overrides(data=("uniform", 9.0))
    with pytest.raises(ConfigError, match="weight decay"):
        study_plan("cpu").with_overrides(weight_decays=(-1.0,))


def test_the_gpu_plan_can_test_the_gap_claim_and_traces_the_llc_within_its_budget():
    """Budget (docs/study-sorting.md): 1e16–4e16 training FLOPs and 35–60 min projected with the LLC at the
    rates measured on an H100; one ensemble small enough for an 80 GB GPU."""
    from headway.runs.cost import training_memory

    plan = study_plan("gpu")
    projected = gpu_projection(plan)
    assert 1e16 <= projected["training_flops"] <= 4e16
    assert 35 * 60 <= projected["total_s"] <= 60 * 60
    assert training_memory(plan.runs()) < 64 * 2**30
    gaps = [d for d in plan.data if d != "uniform"]
    assert len(gaps) >= 6 and min(gaps) <= 1.5 and max(gaps) >= 4 and len(plan.seeds) >= 16  # power 1.00 at 16
    traced = plan.development_runs()
    assert {r.train.weight_decay for r in traced} == set(plan.weight_decays)
    assert len(traced) >= 4 * len(plan.weight_decays)
    assert plan.llc_checkpoints is None and "heads" in plan.llc_weights  # every saved checkpoint, per head too


@pytest.mark.slow
def test_sorting_study_end_to_end_on_a_small_grid(tmp_path):
    out = tmp_path / "study"
    report = SortingStudy(small_plan(llc_budget=200), out, device="cpu", progress=False).run()
    html = report.read_text()
    for section in ("Head modes", "Threshold sensitivity", "Circuits", "Ablations", "Development", "Claims",
                    "Methods: the rules", "LLC estimator bias", "own stability"):
        assert section in html
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 8 and sum(summary["modes"].values()) == 8
    # the rise-and-fall test weighs the traced models' own stability, measured on each run with a valid checkpoint
    # (none when the settings' choice was refused: every estimate is then invalid, and nothing is weighed)
    assert summary["rules"]["learned"] == 0.95 and summary["llc_bias_source"] == "model"
    stability = pd.concat(pd.read_parquet(path) for path in (out / "analysis").glob("*/llc_stability.parquet"))
    testable = stability_steps(pd.read_parquet(next((out / "analysis").glob("*/llc_curve.parquet"))), LIMITS)
    assert set(stability.get("run_id", [])) == set(testable)  # an empty table has no columns
    assert (summary["llc_bias"] is None) == (not testable) == (summary["sgld_refused"] != "")
    assert all(v["alpha"] == 0.05 for v in summary["verdicts"] if v["p_value"] is not None)
    assert all({"claim", "status", "evidence", "p_value", "alpha", "power", "id", "reason"} == set(v)
               for v in summary["verdicts"])
    assert all(v["reason"] for v in summary["verdicts"])
    assert {v["id"] for v in summary["verdicts"]} <= {claim.id for claim in CLAIMS}  # each named by its registry id
    assert {"llc_p_run", "llc_candidate_peaks", "llc_unusable"} <= set(summary["development"][0])
    assert {v["claim"] for v in summary["verdicts"]} >= {
        "A one-layer attention-only transformer learns to sort",
        "Vocabulary-splitting appears with and without weight decay",
        "The LLC rises during initial learning and falls while the heads specialise"}
    assert abs(summary["realised_mean_gap"]["gap 1.5"] - 1.5) < 0.1
    results = pd.read_csv(out / "results.csv")
    assert len(results) == 8 and results["mode"].isin(["splitting", "copy_suppression", "overlapping", "other"]).all()
    sweep = pd.read_csv(out / "mode_sweep.csv")  # every run at every swept threshold value, the default among them
    assert len(sweep) == 8 * 20 and set(sweep.threshold) == {"copy", "suppress_z", "suppress_share", "min_suppressed",
                                                             "max_overlap"}
    at_default = sweep[(sweep.threshold == "copy") & (sweep.value == 3.5)].set_index("run_id")["mode"]
    assert at_default.to_dict() == results.set_index("run_id")["mode"].to_dict()
    fractions = pd.read_csv(out / "mode_fractions.csv")
    assert (fractions.ci_low <= fractions.fraction).all() and (fractions.fraction <= fractions.ci_high).all()
    assert results.val_accuracy.between(0, 1).all() and results.ar_token_accuracy.between(0, 1).all()
    assert np.isfinite(results.llc).all()
    curve = pd.read_csv(out / "llc_curve.csv")
    assert set(curve.weights) == {"all", "L0H0", "L0H1"} and curve.step.nunique() == 4
    assert curve.llc_drift.notna().any()  # each estimate's drift from its kept loss traces
    heads = pd.DataFrame(summary["llc_heads"])  # each traced run's heads read by the rise-and-fall rule
    assert len(heads) == 4 and set(heads.weights) == {"L0H0", "L0H1"} and heads.run_id.nunique() == 2
    assert set(heads["mode"]) <= {"splitting", "copy_suppression", "overlapping", "other"}
    assert "restricted LLC over training, read by the rise-and-fall" in html
    # the settings were chosen once, within the budget, and every estimate (trace and final) was taken at them
    choice = summary["sgld_choice"]
    assert choice.startswith("h_max = ") and set(curve.choice) == {choice}
    used = {json.dumps(summary["sgld"], sort_keys=True)}
    final = pd.concat(pd.read_parquet(path) for path in (out / "analysis").glob("*/llc_final.parquet"))
    assert set(curve.settings) == set(final.settings) == used and summary["sgld"]["burnin"] <= 200 // 4
    assert "Why these settings: h_max = " in html
    refused = summary["sgld_refused"] != ""  # refused: the plan's own settings, every estimate invalid with the reason
    assert (summary["sgld"]["lr"] == small_plan().sgld.lr) == refused
    assert (curve.invalid.str.startswith("no SGLD setting qualified") == refused).all()
    assert curve.run_id.nunique() == 2  # uniform data, seed 0, both weight decays
    figures = {p.name for p in (out / "figures").glob("*.png")}
    assert {"training.png", "mode_map.png", "mode_fractions.png"} <= figures
    assert sum(name.startswith("development_") for name in figures) == 2
    assert sum(name.startswith("sgld_") for name in figures) == 2  # each chain's loss trace, per traced run
    assert any(name.startswith("circuits_") for name in figures)
    # a second call reuses everything: same tables, nothing retrained or re-estimated
    before = (out / "results.csv").read_text()
    SortingStudy(small_plan(llc_budget=200), out, device="cpu", progress=False).run()
    assert (out / "results.csv").read_text() == before
    again = json.loads((out / "summary.json").read_text())
    assert again["seconds"]["training_s"] < 5 and again["seconds"]["analysis_s"] < 5


def test_study_sorting_cli_dry_run_and_bad_input(capsys):
    assert main(["study", "sorting", "--out", "unused", "--dry-run"]) == 0
    assert "72 runs in 1 ensemble(s)" in capsys.readouterr().out
    assert main(["study", "sorting", "--out", "unused", "--mean-gap", "uniform,2,3", "--seed", "0..3",
                 "--dry-run"]) == 0
    assert "24 runs" in capsys.readouterr().out
    assert main(["study", "sorting", "--out", "unused", "--mean-gap", "abc", "--dry-run"]) == 2
    assert "abc" in capsys.readouterr().err
    assert main(["study", "sorting", "--out", "unused", "--llc-budget", "many", "--dry-run"]) == 2
    assert "--llc-budget got 'many'; expected an integer or 'fixed'" in capsys.readouterr().err
    assert main(["study", "sorting", "--out", "unused", "--llc-budget", "1", "--dry-run"]) == 2
    assert "llc_budget = 1 is invalid; use an integer >= 2" in capsys.readouterr().err
    assert main(["study", "sorting", "--out", "unused", "--llc-budget", "fixed", "--dry-run"]) == 0


def test_damaged_circuits_are_refused_with_one_line(tmp_path):
    """The report reads each ensemble's circuits back through the checked reader: flipped bytes or a truncated
    file are refused naming the file, never drawn as other numbers."""
    from headway.errors import ConfigError
    from headway.runs.config import RunConfig
    from headway.studies.sorting.analyse import CIRCUITS, circuits_spec, load_circuits, save_circuits

    runs = [RunConfig.from_flat({"task": "sorting", "values": 5, "length": 3, "layers": 1, "heads": 2,
                                 "d_model": 8, "seed": seed}) for seed in (0, 1)]
    circuits = {name: torch.randn(shape, dtype=dtype) for name, (dtype, shape) in circuits_spec(runs).items()}
    path = tmp_path / "E1" / CIRCUITS
    save_circuits(path.parent, circuits, runs)
    tensors, ids = load_circuits(tmp_path, "E1", runs)
    assert ids == [run.run_id for run in runs] and torch.equal(tensors["ov"], circuits["ov"])
    with pytest.raises(ConfigError, match=f"{CIRCUITS} is damaged .* of runs"):  # another ensemble's circuits
        load_circuits(tmp_path, "E1", runs[::-1])
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"{CIRCUITS} is damaged"):
        load_circuits(tmp_path, "E1", runs)
    path.write_bytes(bytes(data[: len(data) // 2]))
    with pytest.raises(ConfigError, match=CIRCUITS):
        load_circuits(tmp_path, "E1", runs)
