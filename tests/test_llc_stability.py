"""The LLC's stability on the model itself (`headway.analysis.llc.stability`): where it is measured, the bias a
turning-point test weighs from it, and that nothing missing is weighed as a bias of 0."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from headway.analysis.development import development
from headway.analysis.llc.stability import FIRST, LAST, model_stability, stability_steps, variant_settings
from headway.analysis.llc.validity import ValidityLimits, invalid_reasons, refusal
from headway.errors import ConfigError
from headway.studies.sorting.plan import study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.verdicts import llc_rises_then_falls
from headway.studies.verdict import judge

LIMITS = ValidityLimits()


def trace(run_id: str, values: list[float], steps: list[int] | None = None, invalid: str = "") -> pd.DataFrame:
    """Whole-model trace rows of one run: valid by every sampler check where λ̂ > 0."""
    steps = steps or [10 * (i + 1) for i in range(len(values))]
    return pd.DataFrame({"run_id": run_id, "step": steps, "weights": "all", "llc_mean": values, "llc_se": 1.0,
                         "warnings": "", "acceptance": 0.5, "basin_fraction": 0.1, "invalid": invalid,
                         "data": "uniform"})


def stability_rows(run_id: str, first: int, last: int, changes: dict[tuple[str, str], float]) -> pd.DataFrame:
    """The llc_stability rows of one run: the plan setting (change 0) and each variant's change at each checkpoint."""
    rows = []
    for role, step in ((FIRST, first), (LAST, last)):
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


def test_a_refused_choice_stays_invalid_whatever_the_limits():
    rows = trace("c", [100.0, 200.0], invalid=refusal("h_max too small"))
    assert (invalid_reasons(rows, LIMITS) == "no SGLD setting qualified: h_max too small").all()
    assert (invalid_reasons(trace("d", [100.0, 200.0]), LIMITS) == "").all()


def test_the_bias_is_twice_the_largest_difference_between_the_two_checkpoints():
    frame = pd.concat([trace("a", [-5, 300, 400, 350]), trace("b", [-5, 200, 300, 250])])
    table = pd.concat([
        stability_rows("a", 20, 40, {(FIRST, "half_step"): -0.05, (LAST, "half_step"): -0.02,
                                     (FIRST, "double_batch"): 0.01, (LAST, "double_batch"): 0.00}),
        stability_rows("b", 20, 40, {(FIRST, "half_step"): 0.04, (LAST, "half_step"): 0.04,
                                     (FIRST, "double_batch"): -0.06, (LAST, "double_batch"): 0.02})])
    measured = model_stability(table, frame, LIMITS)
    assert measured.bias == pytest.approx(2 * 0.08) and measured.largest_change == pytest.approx(0.06)
    assert measured.missing == [] and len(measured.table) == 4
    # a shared relative change at both checkpoints bends nothing: no bias
    shared = stability_rows("a", 20, 40, {(role, v): -0.1 for role in (FIRST, LAST)
                                          for v in ("half_step", "double_batch")})
    assert model_stability(shared, trace("a", [-5, 300, 400, 350]), LIMITS).bias == 0.0


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
