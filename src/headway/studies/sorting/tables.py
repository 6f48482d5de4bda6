"""Study-level tables of the sorting study (`summarise`): one row per run with its mode, the mode
fractions per data value and weight decay with Wilson intervals, the pre-specified gap test with its
power, each run's mode over a sweep of the classifier's thresholds, and each traced run's
development; and the machine-readable summary."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.development import Development, development
from headway.analysis.statistics import permutation_independence, sidak, wilson_interval
from headway.runs.store import final_metrics
from headway.studies.base import StudyData
from headway.studies.sorting.plan import data_label_of
from headway.studies.verdict import Verdict
from headway.tasks.sorting.modes import MODES

LEARNED = 0.95  # per-token validation accuracy a run must reach to count as having learned to sort
LLC_FALL = 0.1  # the final LLC must sit this fraction of the peak below it for "rises, then falls"
SIGNIFICANT = 0.05  # level of the gap test: the data decide the mode when its combined p is below this
GAP_SEED = 20_251_125  # seeds the gap test's permutations and its power simulation, so a report is reproducible
GAP_PERMUTATIONS = 9999  # permutations of the data labels per weight decay in the gap test
POWER_EFFECT = (0.2, 0.8)  # the effect a null result is judged against: one mode's fraction, smallest → largest δ̄
POWER_STUDIES = 400  # simulated studies behind the power of a null gap test (binomial s.e. ≤ 0.025)
POWER_PERMUTATIONS = 999  # permutations per weight decay in each simulated study
ADEQUATE_POWER = 0.8  # a null gap test refutes the claim only if the design had this power for POWER_EFFECT


@dataclass
class SortingTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    final: pd.DataFrame  # one row per run: grid coordinates, accuracies, mode and its quantities, LLC
    fractions: pd.DataFrame  # learned runs per (data, weight decay) in each mode
    gap_test: dict[str, Any] | None  # the pre-specified test of mode × δ̄ (`gap_test`), with its power when null
    development: list[Development]  # the traced runs, in trace order
    weight_decays: tuple[float, ...]  # the plan's weight decays, in plan order
    ablation: pd.DataFrame
    dla: pd.DataFrame
    sweep: pd.DataFrame = field(default_factory=pd.DataFrame)  # per run × swept threshold value: the mode


def summarise(data: StudyData) -> SortingTables:
    """The study's tables from the gathered metrics and analysis tables."""
    final = final_table(data.metrics, data.tables)
    final = final.merge(mode_settled(data.tables["mode_curve"]), on="run_id", how="left")
    fractions = mode_fractions(final)
    curve = data.tables["llc_curve"]
    traced = [development(run_id, data.metrics, curve, LLC_FALL) for run_id in curve.run_id.unique()] \
        if len(curve) else []
    rng = np.random.default_rng(GAP_SEED)
    test = gap_test(final, rng)
    if test is not None and test["p_value"] >= SIGNIFICANT:
        test["power"] = gap_power(final, rng)
    return SortingTables(final=final, fractions=fractions, gap_test=test, development=traced,
                         weight_decays=tuple(data.plan.weight_decays), ablation=data.tables["ablation"],
                         dla=data.tables["dla"], sweep=mode_sweep(final, data.tables["mode_sweep"]))


def final_table(metrics: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per run: grid coordinates, measured δ̄, final accuracies, mode and its quantities, final LLC."""
    last = final_metrics(metrics)
    keep = ["run_id", "seed", "weight_decay", "val_loss", "val_accuracy", "val_list_accuracy"]
    final = tables["final"].merge(last[keep], on="run_id", how="left")
    llc = tables["llc_final"][["run_id", "llc_mean", "llc_std", "llc_se", "acceptance", "warnings"]].rename(
        columns={"llc_mean": "llc", "acceptance": "llc_acceptance", "warnings": "llc_warnings"})
    final = final.merge(llc, on="run_id", how="left")
    front = ["run_id", "data", "mean_gap", "weight_decay", "seed", "val_accuracy", "val_list_accuracy", "mode"]
    rest = [c for c in final.columns if c not in front and c not in ("instance", "ensemble")]
    return final[front + rest].sort_values(["data", "weight_decay", "seed"], ascending=[True, False, True],
                                            ignore_index=True)


def mode_fractions(final: pd.DataFrame) -> pd.DataFrame:
    """Fraction of seeds in each mode per (data, weight decay), learned runs only, with its Wilson 95%
    interval (ci_low, ci_high): with 3 or 16 seeds a cell's fraction alone says little."""
    learned = final[final.val_accuracy >= LEARNED]
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


def gap_test(final: pd.DataFrame, rng: np.random.Generator, permutations: int = GAP_PERMUTATIONS
             ) -> dict[str, Any] | None:
    """The one pre-specified test that the data decide the mode: at each weight decay, Pearson's χ² of
    the mode × data table of its learned runs over all data values, with a permutation p-value (data
    labels shuffled among those runs); the weight decays combined by Šidák, so picking the weight decay
    with the strongest effect is part of the test. None when no weight decay has learned runs at two
    data values."""
    learned = final[final.val_accuracy >= LEARNED]
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
            "power": None, "power_effect": list(POWER_EFFECT), "power_studies": POWER_STUDIES}


def gap_power(final: pd.DataFrame, rng: np.random.Generator, studies: int = POWER_STUDIES,
              permutations: int = POWER_PERMUTATIONS, effect: tuple[float, float] = POWER_EFFECT) -> float:
    """Probability that `gap_test` finds p < SIGNIFICANT in a study with the same learned runs per
    (weight decay, data) cell when one mode's fraction moves linearly in the measured δ̄ from effect[0]
    at the smallest to effect[1] at the largest, at every weight decay (simulated): what a null result
    of this design can rule out. NaN when every data value has the same δ̄."""
    learned = final[final.val_accuracy >= LEARNED]
    gaps = learned.groupby("data").mean_gap.first()
    span = gaps.max() - gaps.min()
    if not span > 0:
        return float("nan")
    share = learned.data.map(effect[0] + (effect[1] - effect[0]) * (gaps - gaps.min()) / span).to_numpy()
    found = 0
    for _ in range(studies):
        simulated = learned.assign(mode=np.where(rng.random(len(learned)) < share, "a", "b"))
        found += gap_test(simulated, rng, permutations)["p_value"] < SIGNIFICANT
    return found / studies


def run_title(traced: Development) -> str:
    """How a traced run is named in captions: its data, weight decay and seed."""
    row = traced.loss.iloc[-1]
    return f"{traced.llc.data.iloc[0]}, wd {row.weight_decay:g}, seed {int(row.seed)}"


def summary_json(data: StudyData, tables: SortingTables, verdicts: list[Verdict]) -> dict[str, Any]:
    """Machine-readable results: the grid, accuracies, mode counts, LLC trace stages, verdicts, timings."""
    plan, final = data.plan, tables.final
    return {
        "study": "sorting", "scale": plan.scale, "runs": len(final),
        "grid": {"data": [data_label_of(d) for d in plan.data], "weight_decays": list(plan.weight_decays),
                 "seeds": list(plan.seeds)},
        "realised_mean_gap": final.groupby("data").mean_gap.first().to_dict(),
        "accuracy": {"min_per_token": float(final.val_accuracy.min()),
                     "median_list": float(final.val_list_accuracy.median()),
                     "learned": int((final.val_accuracy >= LEARNED).sum())},
        "modes": {m: int((final["mode"] == m).sum()) for m in MODES},
        "mode_fractions": tables.fractions.to_dict("records"),
        "gap_test": tables.gap_test,
        "development": [traced.summary(run_title(traced)) for traced in tables.development],
        "sgld": plan.sgld.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts],
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
        "run_ids": final.run_id.tolist(),
    }
