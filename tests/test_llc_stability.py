"""The LLC's stability on the model itself (`headway.analysis.llc.stability`): where it is measured, the bias a
turning-point test weighs from it, and that nothing missing is weighed as a bias of 0."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest
from test_study_sorting import small_plan

from headway.analysis.development import development
from headway.analysis.llc import SGLDSettings
from headway.analysis.llc.stability import (FIRST, LAST, PEAK, SETTLED, model_stability, stability_steps,
                                             variant_settings)
from headway.analysis.llc.validity import ValidityLimits, invalid_reasons, refusal
from headway.errors import ConfigError
from headway.studies.llc_bias import errors_text, weighed_bias_text
from headway.studies.sorting.plan import study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.study import SortingStudy
from headway.studies.sorting.verdicts import llc_rises_then_falls
from headway.studies.verdict import judge

LIMITS = ValidityLimits()


def trace(run_id: str, values: list[float], steps: list[int] | None = None, invalid: str = "") -> pd.DataFrame:
    """Whole-model trace rows of one run: valid by every sampler check where λ̂ > 0."""
    steps = steps or [10 * (i + 1) for i in range(len(values))]
    return pd.DataFrame({"run_id": run_id, "step": steps, "weights": "all", "llc_mean": values, "llc_se": 1.0,
                         "warnings": "", "acceptance": 0.5, "basin_fraction": 0.1, "invalid": invalid,
                         "data": "uniform"})


def stability_rows(run_id: str, first: int, last: int, changes: dict[tuple[str, str], float],
                   roles: tuple[str, str] = (FIRST, LAST)) -> pd.DataFrame:
    """The llc_stability rows of one run: the plan setting (change 0) and each variant's change at each checkpoint."""
    rows = []
    for role, step in zip(roles, (first, last)):
        rows.append({"run_id": run_id, "step": step, "checkpoint": role, "variant": "plan", "change": 0.0})
        rows += [{"run_id": run_id, "step": step, "checkpoint": role, "variant": variant,
                  "change": changes[role, variant]} for variant in ("half_step", "double_batch")]
    return pd.DataFrame(rows)


def test_variants_halve_the_step_over_the_same_sampling_time_and_double_the_batch():
    base = study_plan("cpu").sgld
    variants = variant_settings(base)
    assert variants["plan"] == base
    half, double = variants["half_step"], variants["double_batch"]
    assert half.lr == base.lr / 2 and half.burnin == 2 * base.burnin and half.draws == 2 * base.draws
    assert half.batch_size == base.batch_size and double.batch_size == 2 * base.batch_size
    assert (double.lr, double.burnin, double.draws) == (base.lr, base.burnin, base.draws)


def test_stability_is_measured_at_each_runs_first_valid_and_last_checkpoint():
    frame = pd.concat([trace("a", [-50, -5, 300, 400, 350]), trace("b", [-50, -40, -30, -20, -10]),
                       trace("c", [100, 200, 150], invalid=refusal("nothing qualified"))])
    points = stability_steps(frame, LIMITS)
    assert points == {"a": {FIRST: 30, LAST: 50}}  # b: no λ̂ > 0; c: its settings' choice was refused


def test_the_modular_study_compares_each_runs_peak_with_its_last_checkpoint():
    """The peak is the valid checkpoint of highest λ̂ (an invalid higher one is not it); the bias is then read between
    the peak's and the last checkpoint's changes, the table's columns named by them."""
    frame = pd.concat([trace("a", [-50, 5, 300, 400, 350]),
                       trace("b", [-50, 5, 900, 200, 100]).assign(basin_fraction=[0.1, 0.1, 0.9, 0.1, 0.1])])
    assert stability_steps(frame, LIMITS, (PEAK, LAST)) == {"a": {PEAK: 40, LAST: 50}, "b": {PEAK: 40, LAST: 50}}
    assert stability_steps(frame, LIMITS) == {"a": {FIRST: 20, LAST: 50}, "b": {FIRST: 20, LAST: 50}}
    table = pd.concat([stability_rows(run, 40, 50, {(PEAK, "half_step"): 0.03, (LAST, "half_step"): 0.01,
                                                    (PEAK, "double_batch"): 0.0, (LAST, "double_batch"): 0.0},
                                      roles=(PEAK, LAST)) for run in ("a", "b")])
    measured = model_stability(table, frame, LIMITS, (PEAK, LAST))
    assert measured.bias == pytest.approx(0.04) and measured.missing == []
    assert list(measured.table.columns) == ["run_id", "variant", "peak_step", "peak_change", "last_step", "last_change",
                                            "difference"]
    assert math.isnan(model_stability(table, frame, LIMITS).bias)  # measured at the peak, not the first valid one


def test_a_refused_choice_stays_invalid_whatever_the_limits():
    rows = trace("c", [100.0, 200.0], invalid=refusal("h_max too small"))
    assert (invalid_reasons(rows, LIMITS) == "no SGLD setting qualified: h_max too small").all()
    assert (invalid_reasons(trace("d", [100.0, 200.0]), LIMITS) == "").all()


def two_measured_runs() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two traced runs and their stability rows: half_step differences −0.03 and 0, double_batch +0.01 and −0.08."""
    frame = pd.concat([trace("a", [-5, 300, 400, 350]), trace("b", [-5, 200, 300, 250])])
    table = pd.concat([
        stability_rows("a", 20, 40, {(FIRST, "half_step"): -0.05, (LAST, "half_step"): -0.02,
                                     (FIRST, "double_batch"): 0.01, (LAST, "double_batch"): 0.00}),
        stability_rows("b", 20, 40, {(FIRST, "half_step"): 0.04, (LAST, "half_step"): 0.04,
                                     (FIRST, "double_batch"): -0.06, (LAST, "double_batch"): 0.02})])
    return frame, table


def test_the_bias_is_twice_the_largest_difference_between_the_two_checkpoints():
    frame, table = two_measured_runs()
    measured = model_stability(table, frame, LIMITS)
    assert measured.bias == pytest.approx(2 * 0.08) and measured.largest_change == pytest.approx(0.06)
    assert measured.missing == [] and len(measured.table) == 4
    # a shared relative change at both checkpoints bends nothing: no bias
    shared = stability_rows("a", 20, 40, {(role, v): -0.1 for role in (FIRST, LAST)
                                          for v in ("half_step", "double_batch")})
    assert model_stability(shared, trace("a", [-5, 300, 400, 350]), LIMITS).bias == 0.0


def test_the_pooled_bias_bounds_the_runs_mean_difference_and_narrows_as_runs_are_added():
    """Statistic "pooled": twice the upper 95% bound (Student's t) of each variant's mean signed difference, the
    larger variant's; with noise alone around a shared difference it stays near that difference as runs are added,
    while the largest difference grows."""
    frame, table = two_measured_runs()
    pooled = model_stability(table, frame, LIMITS, statistic="pooled")
    # double_batch differences +0.01 and −0.08: |mean| 0.035 + t(0.95, 1) 6.314 × sd 0.0636 / √2
    assert pooled.bias == pytest.approx(2 * (0.035 + 6.3138 * 0.09 / 2), rel=1e-4)
    assert pooled.statistic == "pooled" and pooled.summary()["statistic"] == "pooled"
    one = model_stability(table[table.run_id == "a"], trace("a", [-5, 300, 400, 350]), LIMITS, statistic="pooled")
    assert math.isnan(one.bias)  # one run: its spread, and so the bound, is unknown
    rng = np.random.default_rng(5)
    runs = {n: [f"r{i}" for i in range(n)] for n in (4, 12, 48)}
    biases, variants = {}, ("half_step", "double_batch")
    for n, names in runs.items():
        rows = [stability_rows(name, 20, 40, {(FIRST, v): 0.005 + rng.normal(0, 0.01) for v in variants}
                               | {(LAST, v): 0.0 for v in variants}) for name in names]
        traces = pd.concat([trace(name, [-5, 300, 400, 350]) for name in names])
        biases[n] = (model_stability(pd.concat(rows), traces, LIMITS, statistic="pooled").bias,
                     model_stability(pd.concat(rows), traces, LIMITS).bias)
    assert biases[48][0] < biases[12][0] < biases[4][0] and 0.01 < biases[48][0] < 0.02  # → 2 × 0.005
    assert biases[48][1] > biases[4][1] and biases[48][1] > 0.05  # the largest grows with the runs
    with pytest.raises(ConfigError, match="statistic = 'median' is unknown; choose one of largest, pooled"):
        model_stability(table, frame, LIMITS, statistic="median")
    with pytest.raises(ConfigError, match="rule llc_bias_statistic = 'mean' is unknown"):
        SortingRules(llc_bias_statistic="mean")
    assert "upper 95% bound of the mean difference" in SortingRules(llc_bias_statistic="pooled").llc_bias_source_text()


def test_a_run_without_its_stability_leaves_the_bias_unmeasured_and_the_claim_not_testable():
    frame = pd.concat([trace("a", [-5, 300, 400, 350]), trace("b", [-5, 200, 300, 250])])
    only_a = stability_rows("a", 20, 40, {(role, v): 0.01 for role in (FIRST, LAST)
                                          for v in ("half_step", "double_batch")})
    measured = model_stability(only_a, frame, LIMITS)
    assert math.isnan(measured.bias) and measured.missing == ["b"]
    broken = only_a.assign(change=float("nan"))  # the plan setting's λ̂ was 0: no change to read
    assert model_stability(broken, trace("a", [-5, 300, 400, 350]), LIMITS).missing == ["a"]
    assert math.isnan(model_stability(pd.DataFrame(), frame, LIMITS).bias)
    # the rise-and-fall claim then says so, rather than weigh a bias of 0
    metrics = pd.DataFrame({"run_id": "a", "step": [10, 20, 30, 40], "val_loss": [2.0, 1.0, 0.5, 0.4],
                            "weight_decay": 0.0, "seed": 0})
    rules = SortingRules()
    assert rules.llc_bias_source == "model"
    traced = development("a", metrics, trace("a", [-5, 300, 400, 350]), fall=0.1, validity=LIMITS,
                         bias=measured.bias)
    verdict = judge([llc_rises_then_falls([traced], rules)], rules)[0]
    assert verdict.status == "not testable" and "stability" in verdict.reason and "was not measured" in verdict.reason
    suite = SortingRules(llc_bias_source="suite")  # the suite's bias, when not measured, is taken as 0
    assert judge([llc_rises_then_falls([traced], suite)], suite)[0].status != "not testable"


def test_the_bias_source_and_first_traced_step_are_checked():
    with pytest.raises(ConfigError, match="rule llc_bias_source = 'devinterp' is unknown; choose one of model, suite"):
        SortingRules(llc_bias_source="devinterp")
    with pytest.raises(ConfigError, match="llc_first_step = 5000 is invalid; use an integer in 0..1200"):
        study_plan("cpu").with_overrides(llc_first_step=5000)
    assert study_plan("cpu").with_overrides(llc_first_step=100).llc_first_step == 100


@pytest.mark.slow
def test_fresh_data_runs_are_traced_pool_by_pool_and_their_stability_measured(tmp_path):
    """Traced runs on fresh data have their own training pools: each pool is traced on its own (they once made the
    analysis stop with "the traced instances must share their task and data"), from `llc_first_step` on, and each
    run's LLC is estimated again at ε/2 (twice the steps) and at twice the batch at its first valid and its last
    checkpoint; the rise-and-fall test weighs twice the largest difference between those two checkpoints' changes."""
    out = tmp_path / "fresh"
    sgld = SGLDSettings(lr=1e-5, nbeta=1e3, localization=1e3, chains=2, draws=20, burnin=20, batch_size=32,
                        init_loss_batches=4)  # valid from step 50 on these models (λ̂ ≤ 0 before)
    plan = small_plan(data=("uniform",), weight_decays=(0.0,), development_seeds=(0, 1), fresh_data=True,
                      llc_first_step=3, sgld=sgld)
    SortingStudy(plan, out, device="cpu", progress=False).run()
    summary = json.loads((out / "summary.json").read_text())
    curve = pd.read_csv(out / "llc_curve.csv")
    assert curve.run_id.nunique() == 2 and sorted(curve.step.unique()) == [3, 20, 50, 150]
    assert len(list((out / "analysis").glob("*/llc_trace/pool-from-*/step_*.parquet"))) == 2 * 4
    stability = pd.concat(pd.read_parquet(path) for path in (out / "analysis").glob("*/llc_stability.parquet"))
    testable = stability_steps(pd.read_parquet(next((out / "analysis").glob("*/llc_curve.parquet"))), LIMITS)
    assert len(testable) == 2 and set(stability.run_id) == set(testable)
    assert len(pd.read_csv(out / "llc_stability.csv")) == len(stability) == 2 * 2 * 3  # runs × checkpoints × settings
    for run_id, points in testable.items():
        mine = stability[stability.run_id == run_id]
        assert dict(mine.groupby("checkpoint").step.first()) == points and len(mine) == 6
    plan_rows = stability[stability.variant == "plan"]
    half, double = (stability[stability.variant == v].iloc[0] for v in ("half_step", "double_batch"))
    assert (plan_rows.change == 0).all() and half.lr == plan.sgld.lr / 2 and half.burnin == 2 * plan.sgld.burnin
    assert half.draws == 2 * plan.sgld.draws and double.batch_size == 2 * plan.sgld.batch_size
    changes = stability[stability.variant != "plan"].pivot_table(index=["run_id", "variant"], columns="checkpoint",
                                                                  values="change")
    expected = 2 * (changes.first_valid - changes["last"]).abs().max()
    assert summary["llc_bias"] == pytest.approx(expected) and summary["llc_stability"]["bias"] == summary["llc_bias"]
    assert f"(the models' own stability) {expected:.1%} is added to every standard error" in next(
        v["evidence"] for v in summary["verdicts"] if v["id"] == "llc-rise-fall")
    # judged again under the suite's bias, the same tables weigh the known-answer suite instead
    suite = SortingStudy(plan, out, device="cpu", progress=False, rules=SortingRules(llc_bias_source="suite"))
    suite.run()
    again = json.loads((out / "summary.json").read_text())
    assert again["llc_stability"] is None and again["llc_bias"] != summary["llc_bias"]
    assert again["seconds"]["analysis_s"] < 5  # nothing sampled again but the suite


def test_a_caption_says_whether_its_p_values_weighed_a_bias_and_the_bias_text_groups_runs():
    """A table's p-values weigh the bias shown above them only when one was measured; unmeasured, the models'
    stability leaves them descriptive and the suite's takes it as 0. Runs that weighed the same bias are named
    together, and not at all when every run did."""
    model, suite = SortingRules(), SortingRules(llc_bias_source="suite")
    assert errors_text(0.02, model) == errors_text(0.02, suite) == "with the estimator's bias above weighed in"
    assert "descriptive only" in errors_text(math.nan, model)
    assert errors_text(math.nan, suite) == "with the estimator's bias taken as 0 (not measured)"
    same = weighed_bias_text([("run a", 0.02), ("run b", 0.02)], model)
    assert same == "the estimator's relative bias (the models' own stability) 2.0% is added to every standard error"
    mixed = weighed_bias_text([("run a", 0.02), ("run b", math.nan), ("run c", 0.02)], suite)
    assert mixed == ("the estimator's relative bias (the known-answer suite's error) 2.0% is added to every standard "
                     "error for run a, run c; the estimator's bias (the known-answer suite's error) was not measured "
                     "(taken as 0) for run b")
    assert weighed_bias_text([], model) == "the estimator's bias (the models' own stability) was not measured"


def test_a_settled_checkpoint_is_the_last_valid_one_after_the_peak_whose_training_loss_did_not_rise():
    """Full-batch runs spike once their loss is tiny: a checkpoint whose loss at w* rose since the one before it is
    mid-spike, and the fall is read at the last one that is not (rule llc_fall_at = settled)."""
    spike = trace("a", [5, 500, 300, 20, 130]).assign(init_loss=[4.0, 0.02, 1e-4, 1e-7, 0.03])
    calm = trace("b", [5, 500, 300, 20, 130]).assign(init_loss=[4.0, 0.02, 1e-4, 1e-3, 1e-5])
    always = trace("c", [5, 500, 300, 200]).assign(init_loss=[4.0, 0.02, 0.03, 0.04])  # rising after its peak
    frame = pd.concat([spike, calm, always])
    assert stability_steps(frame, LIMITS, (PEAK, SETTLED)) == {"a": {PEAK: 20, SETTLED: 40},
                                                               "b": {PEAK: 20, SETTLED: 50}}
    assert stability_steps(frame, LIMITS, (PEAK, LAST))["c"] == {PEAK: 20, LAST: 40}  # left out only when asked
    # an invalid checkpoint is never the settled one, though its loss did not rise
    invalid_last = calm.assign(basin_fraction=[0.1, 0.1, 0.1, 0.1, 0.9])
    assert stability_steps(invalid_last, LIMITS, (PEAK, SETTLED)) == {"b": {PEAK: 20, SETTLED: 30}}
    # a loss that is missing settles nothing, at the checkpoint or at the one before it
    unknown = calm.assign(init_loss=[4.0, 0.02, 1e-4, math.nan, 1e-5])
    assert stability_steps(unknown, LIMITS, (PEAK, SETTLED)) == {"b": {PEAK: 20, SETTLED: 30}}
    assert stability_steps(calm.assign(init_loss=math.nan), LIMITS, (PEAK, SETTLED)) == {}
