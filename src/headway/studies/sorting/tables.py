"""Study-level tables of the sorting study (`summarise`): one row per run with its mode, the mode
fractions per data value and weight decay with Wilson intervals, the pre-specified gap test with the
simulated p-values its power is read from, each run's mode over a sweep of the classifier's thresholds,
each traced run's development, and the estimator's bias; the tables under other rules, for the threshold
sensitivity (`tables_at`); and the machine-readable summary. Every
threshold comes from the study's rules (`headway.studies.sorting.rules.SortingRules`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.llc.study_settings import sgld_record
from headway.analysis.development import Development, development
from headway.analysis.llc.stability import ModelStability
from headway.analysis.llc.validity import ValidityLimits, invalid_reasons, limited_reasons
from headway.analysis.statistics import permutation_independence, sidak, wilson_interval
from headway.runs.store import final_metrics, plain_value
from headway.studies.base import StudyData
from headway.studies.sorting.plan import data_label_of
from headway.studies.sorting.rise_fall import run_test
from headway.studies.sorting.rules import SortingRules
from headway.studies.verdict import Verdict
from headway.analysis.sorting.modes import MODES

GAP_SEED = 20_251_125  # seeds the gap test's permutations and its power simulation, so a report is reproducible


@dataclass
class SortingTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    final: pd.DataFrame  # one row per run: grid coordinates, accuracies, mode and its quantities, LLC
    fractions: pd.DataFrame  # learned runs per (data, weight decay) in each mode
    gap_test: dict[str, Any] | None  # the pre-specified test of mode × δ̄ (`gap_test`) with its simulated p-values
    development: list[Development]  # the traced runs, in trace order
    weight_decays: tuple[float, ...]  # the plan's weight decays, in plan order
    ablation: pd.DataFrame
    dla: pd.DataFrame
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run × swept threshold value: the mode
    llc_bias: float = math.nan  # the LLC estimator's relative bias the rise-and-fall test weighs (NaN: not measured)
    stability: ModelStability | None = None  # the traced models' own stability (`llc_bias_source` "model"), else None
    heads: list[Development] = field(default_factory=list)  # each traced run's heads (restricted LLCs), if traced


def summarise(data: StudyData, llc_bias: float = math.nan) -> SortingTables:
    """The study's tables from the gathered metrics and analysis tables, by the rules in `data.rules`;
    `llc_bias` is the known-answer suite's relative bias, weighed by the LLC test when the rules' `llc_bias_source`
    is "suite" (NaN: not measured, then taken as 0); with "model" the test weighs the traced models' own stability
    (`model_stability` of the llc_stability table; NaN when a testable run lacks it, and the claim is not testable)."""
    rules = data.rules
    final = final_table(data.metrics, data.tables, rules.llc_validity())
    final = final.merge(mode_settled(data.tables["mode_curve"]), on="run_id", how="left")
    curve = data.tables["llc_curve"]
    llc_bias, stability = rules.weighed_bias(data.tables.get("llc_stability", pd.DataFrame()), curve, llc_bias)
    traced = [development(run_id, data.metrics, curve, rules.llc_fall, rules.llc_validity(), rules.llc_change_z,
                           llc_bias, rules.llc_resolved_only)
              for run_id in curve.run_id.unique()] if len(curve) else []
    groups = sorted(set(curve.weights) - {"all"}) if len(curve) else []
    heads = [development(run_id, data.metrics, curve, rules.llc_fall, rules.llc_validity(), rules.llc_change_z,
                         llc_bias, rules.llc_resolved_only, group)
             for run_id in curve.run_id.unique() for group in groups] if groups else []
    return SortingTables(final=final, fractions=mode_fractions(final, rules.learned),
                         gap_test=gap_test_with_power(final, rules),
                         development=traced, heads=heads, weight_decays=tuple(data.plan.weight_decays),
                         ablation=data.tables["ablation"], dla=data.tables["dla"],
                         sweep=mode_sweep(final, data.tables["mode_sweep"]), llc_bias=llc_bias,
                         stability=stability)


def final_table(metrics: pd.DataFrame, tables: dict[str, pd.DataFrame], limits: ValidityLimits) -> pd.DataFrame:
    """One row per run: grid coordinates, measured δ̄, final accuracies, mode and its quantities, final LLC (with why
    it is no estimate, llc_invalid, or only a lower bound, llc_limited, at the LLC `limits`; "" when neither)."""
    last = final_metrics(metrics)
    keep = ["run_id", "seed", "weight_decay", "val_loss", "val_accuracy", "val_list_accuracy"]
    final = tables["final"].merge(last[keep], on="run_id", how="left")
    estimates = tables["llc_final"]
    llc = estimates[["run_id", "llc_mean", "llc_std", "llc_se", "acceptance", "warnings"]].rename(
        columns={"llc_mean": "llc", "acceptance": "llc_acceptance", "warnings": "llc_warnings"})
    llc = llc.assign(llc_invalid=invalid_reasons(estimates, limits), llc_limited=limited_reasons(estimates, limits))
    final = final.merge(llc, on="run_id", how="left")
    front = ["run_id", "data", "mean_gap", "weight_decay", "seed", "val_accuracy", "val_list_accuracy", "mode"]
    rest = [c for c in final.columns if c not in front and c not in ("instance", "ensemble")]
    return final[front + rest].sort_values(["data", "weight_decay", "seed"], ascending=[True, False, True],
                                            ignore_index=True)


def mode_fractions(final: pd.DataFrame, learned_accuracy: float) -> pd.DataFrame:
    """Fraction of seeds in each mode per (data, weight decay), learned runs only (validation accuracy
    ≥ `learned_accuracy`), with its Wilson 95% interval (ci_low, ci_high): with 3 or 16 seeds a cell's
    fraction alone says little."""
    learned = final[final.val_accuracy >= learned_accuracy]
    rows = []
    for (data, gap, wd), group in learned.groupby(["data", "mean_gap", "weight_decay"]):
        for mode in MODES:
            count = int((group["mode"] == mode).sum())
            low, high = wilson_interval(count, len(group))
            rows.append({"data": data, "mean_gap": gap, "weight_decay": wd, "mode": mode, "count": count,
                         "n": len(group), "fraction": count / len(group), "ci_low": low, "ci_high": high})
    return pd.DataFrame(rows, columns=["data", "mean_gap", "weight_decay", "mode", "count", "n", "fraction",
                                       "ci_low", "ci_high"])


def mode_sweep(final: pd.DataFrame, sweep: pd.DataFrame) -> pd.DataFrame:
    """Per run × swept threshold value (`threshold_sweep`): the run's grid coordinates and its mode there."""
    keep = ["run_id", "data", "weight_decay", "seed", "val_accuracy"]
    return final[keep].merge(sweep[["run_id", "threshold", "value", "mode"]], on="run_id").sort_values(
        ["threshold", "value", "data", "weight_decay", "seed"], ascending=[True, True, True, False, True],
        ignore_index=True)


def mode_settled(curve: pd.DataFrame) -> pd.DataFrame:
    """Per run: the first checkpoint from which the mode equals the final mode at every later one."""
    rows = []
    for run_id, frame in curve.sort_values("step").groupby("run_id"):
        modes, steps = frame["mode"].to_numpy(), frame.step.to_numpy()
        last = modes[-1]
        differs = np.flatnonzero(modes != last)
        start = steps[differs[-1] + 1] if len(differs) else steps[0]
        rows.append({"run_id": run_id, "settled_step": int(start)})
    return pd.DataFrame(rows, columns=["run_id", "settled_step"])


def gap_test(final: pd.DataFrame, learned_accuracy: float, permutations: int, rng: np.random.Generator
             ) -> dict[str, Any] | None:
    """The one pre-specified test that the data decide the mode: at each weight decay, Pearson's χ² of
    the mode × data table of its learned runs (validation accuracy ≥ `learned_accuracy`) over all data
    values, with a permutation p-value (data labels shuffled among those runs); the weight decays combined
    by Šidák, so picking the weight decay with the strongest effect is part of the test. None when no
    weight decay has learned runs at two data values. `simulated_p` is left for `gap_power`'s p-values."""
    learned = final[final.val_accuracy >= learned_accuracy]
    strata = []
    for wd, group in learned.groupby("weight_decay"):
        if group.data.nunique() < 2:
            continue
        chi2, p = permutation_independence(group["mode"].to_numpy(), group.data.to_numpy(), permutations, rng)
        strata.append({"weight_decay": float(wd), "chi2": chi2, "p_value": p, "runs": len(group),
                       "data_values": int(group.data.nunique()), "modes": int(group["mode"].nunique())})
    if not strata:
        return None
    return {"p_value": sidak([s["p_value"] for s in strata]), "permutations": permutations, "per_decay": strata,
            "simulated_p": []}


def gap_test_with_power(final: pd.DataFrame, rules: SortingRules) -> dict[str, Any] | None:
    """`gap_test` of `final` under `rules` with its simulated p-values (`gap_power`), from the study's fixed
    seed: the gap claim's whole input, the same for every study that judges it."""
    rng = np.random.default_rng(GAP_SEED)
    test = gap_test(final, rules.learned, rules.gap_permutations, rng)
    if test is not None:
        test["simulated_p"] = gap_power(final, rules, rng).tolist()
    return test


def gap_power(final: pd.DataFrame, rules: SortingRules, rng: np.random.Generator) -> np.ndarray:
    """The combined p-values of `gap_test` in `rules.gap_power_studies` simulated studies with the same
    learned runs per (weight decay, data) cell, where one mode's fraction moves linearly in the measured
    δ̄ from `gap_effect_low` at the smallest to `gap_effect_high` at the largest, at every weight decay
    (`rules.gap_power_permutations` each): the power at any level is the share of them at or below it
    (`gap_power_at`). Empty when every data value has the same δ̄."""
    learned = final[final.val_accuracy >= rules.learned]
    gaps = learned.groupby("data").mean_gap.first()
    span = gaps.max() - gaps.min()
    if not span > 0:
        return np.array([])
    low, high = rules.gap_effect_low, rules.gap_effect_high
    share = learned.data.map(low + (high - low) * (gaps - gaps.min()) / span).to_numpy()
    found = []
    for _ in range(rules.gap_power_studies):
        simulated = learned.assign(mode=np.where(rng.random(len(learned)) < share, "a", "b"))
        found.append(gap_test(simulated, rules.learned, rules.gap_power_permutations, rng)["p_value"])
    return np.asarray(found)


def gap_power_at(test: dict[str, Any], level: float) -> float:
    """The gap test's power at `level`: the share of its simulated p-values at or below it (NaN: none)."""
    simulated = np.asarray(test["simulated_p"], dtype=float)
    return float((simulated <= level).mean()) if len(simulated) else math.nan


def run_title(traced: Development) -> str:
    """How a traced run is named in captions: its data, weight decay and seed."""
    row = traced.loss.iloc[-1]
    return f"{traced.llc.data.iloc[0]}, wd {row.weight_decay:g}, seed {int(row.seed)}"


def head_courses(tables: SortingTables, rules: SortingRules) -> pd.DataFrame:
    """One row per traced run and head: its restricted LLC's start, peak and last valid value, read by the
    rise-and-fall test's own rule (`run_test`, the run's whole-model bias weighed in), beside the run's final mode and
    the step from which that mode held: whether specialisation shows head by head. Descriptive, not a claim."""
    final = tables.final.set_index("run_id")
    rows = []
    for traced in tables.heads:
        tested = run_test(traced, rules)
        run = final.loc[traced.run_id] if traced.run_id in final.index else None
        rows.append({"run": run_title(traced), "run_id": traced.run_id, "weights": traced.weights,
                     "mode": None if run is None else run["mode"],
                     "mode_settled_step": None if run is None else run.get("settled_step"),
                     "valid": int(traced.llc[traced.llc.weights == traced.weights].step.nunique()
                                  - len(traced.excluded)),
                     "start_step": traced.start_step, "start": traced.start, "peak_step": traced.peak_step,
                     "peak": traced.peak, "final": traced.final,
                     "fall": 1 - traced.final / traced.peak if traced.peak > 0 else math.nan,
                     "p_rise": traced.p_rise, "p_fall": traced.p_fall, "p": tested.p,
                     "rises_and_falls": tested.counted, "unusable": tested.unusable})
    return pd.DataFrame(rows, columns=["run", "run_id", "weights", "mode", "mode_settled_step", "valid", "start_step",
                                       "start", "peak_step", "peak", "final", "fall", "p_rise", "p_fall", "p",
                                       "rises_and_falls", "unusable"])


def summary_json(data: StudyData, tables: SortingTables, verdicts: list[Verdict],
                 sensitivity: pd.DataFrame) -> dict[str, Any]:
    """Machine-readable results: the grid, accuracies, mode counts, the gap test, each traced run's LLC
    course and rise-and-fall test, the rules, verdicts (with p, α and power), the threshold sensitivity
    (`headway.studies.sensitivity`), timings."""
    plan, final, rules = data.plan, tables.final, data.rules
    development = []
    for traced in tables.development:
        tested = run_test(traced, rules)
        development.append({**traced.summary(run_title(traced)), "llc_rises_then_falls": tested.counted,
                            "llc_p_run": tested.p, "llc_candidate_peaks": tested.candidates,
                            "llc_unusable": tested.unusable})
    return {
        "study": "sorting", "scale": plan.scale, "runs": len(final),
        "grid": {"data": [data_label_of(d) for d in plan.data], "weight_decays": list(plan.weight_decays),
                 "seeds": list(plan.seeds), "development_seeds": list(plan.development_seeds),
                 "fresh_data": plan.fresh_data, "llc_first_step": plan.llc_first_step, "llc_burnin": plan.llc_burnin,
                 "llc_draws": plan.llc_draws, "llc_weights": plan.llc_weights},
        "realised_mean_gap": final.groupby("data").mean_gap.first().to_dict(),
        "accuracy": {"min_per_token": float(final.val_accuracy.min()),
                     "median_list": float(final.val_list_accuracy.median()),
                     "learned": int((final.val_accuracy >= rules.learned).sum())},
        "modes": {m: int((final["mode"] == m).sum()) for m in MODES},
        "mode_fractions": tables.fractions.to_dict("records"),
        "gap_test": None if tables.gap_test is None
        else {k: v for k, v in tables.gap_test.items() if k != "simulated_p"},  # the verdict gives its power
        "development": development,
        "llc_heads": [{k: plain_value(v) for k, v in row.items()}
                      for row in head_courses(tables, rules).drop(columns="run").to_dict("records")],
        "llc_bias": None if math.isnan(tables.llc_bias) else tables.llc_bias,
        "llc_bias_source": rules.llc_bias_source,
        "llc_stability": None if tables.stability is None else tables.stability.summary(),
        **sgld_record(data.tables["llc_curve"], plan.sgld),
        "rules": rules.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts],
        "threshold_sensitivity": [{k: plain_value(v) for k, v in row.items()} for row in sensitivity.to_dict("records")],
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
        "run_ids": final.run_id.tolist(),
    }


def tables_at(tables: SortingTables, rules: SortingRules, changed: SortingRules) -> SortingTables | None:
    """The study's `tables` (judged by `rules`) as `changed` rules give them, for the threshold sensitivity
    (`headway.studies.sensitivity`): where a mode threshold moved, every model's mode read from the analysis'
    sweep (`tables.sweep`; None where it stored no value there); otherwise the same tables, which a summary
    rule does not change but through the claims (the gap and LLC claims are held: `StudyClaim.held`)."""
    moved = [name for name in changed.mode_sweeps() if getattr(changed, name) != getattr(rules, name)]
    if not moved:
        return tables
    sweep = tables.sweep
    at = sweep[(sweep.threshold == moved[0]) & (sweep.value == getattr(changed, moved[0]))] if len(sweep) else sweep
    if at.empty:
        return None
    return replace(tables, final=tables.final.drop(columns="mode").merge(at[["run_id", "mode"]], on="run_id"))
