"""The recipe sweep's tables: one row per run (`runs`), one per variant (`variants`), the training curves and the
mean probe accuracy per variant, site, label and layer (`probes`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headway.studies.base import StudyData
from headway.studies.recipes.plan import RecipePlan
from headway.studies.recipes.rules import RecipeRules
from headway.studies.variants import spec_of


@dataclass
class RecipeTables:
    """What the report reads: per run, per variant, the curves (variant, run_id, step, val_accuracy) and the
    probes averaged over seeds."""

    runs: pd.DataFrame
    variants: pd.DataFrame
    curves: pd.DataFrame
    probes: pd.DataFrame


def summarise(data: StudyData) -> RecipeTables:
    """The sweep's tables from its gathered data."""
    plan: RecipePlan = data.plan
    variant = spec_of(plan.grids())
    curves = data.metrics[data.metrics.run_id.isin(variant)].assign(variant=lambda f: f.run_id.map(variant))
    runs = run_table(plan, curves, data.rules)
    probes = data.tables["probes"]
    if len(probes):
        probes = probes.assign(variant=probes.run_id.map(variant)).groupby(
            ["variant", "site", "label", "layer"], sort=False).agg(
            accuracy=("accuracy", "mean"), majority=("majority", "mean"), runs=("run_id", "nunique")).reset_index()
    return RecipeTables(runs, variant_table(runs, data.rules), curves, probes)


def run_table(plan: RecipePlan, metrics: pd.DataFrame, rules: RecipeRules) -> pd.DataFrame:
    """One row per run of `plan` (variant, then seed): its steps, the last step logged and whether it is the
    last, final and best validation accuracy, the final accuracy per hop, and the first logged step at which it
    reached `rules.reached` (NaN: never)."""
    rows = []
    for variant, runs in plan.grids().items():
        for run in runs:
            logged = metrics[metrics.run_id == run.run_id].sort_values("step")
            row = {"variant": variant, "seed": run.seed, "run_id": run.run_id, "steps": run.train.steps,
                   "step_reached": np.nan, "complete": False, "val_accuracy": np.nan, "best_val_accuracy": np.nan,
                   "steps_to_reach": np.nan}
            if len(logged):
                last = logged.iloc[-1]
                row.update(step_reached=int(last.step), complete=int(last.step) == run.train.steps,
                           val_accuracy=float(last.val_accuracy), best_val_accuracy=float(logged.val_accuracy.max()))
                row.update({column: float(last[column]) for column in logged.columns
                            if column.startswith("val_acc_hop") and pd.notna(last[column])})
                hit = logged[logged.val_accuracy >= rules.reached]
                if len(hit):
                    row["steps_to_reach"] = int(hit.step.iloc[0])
            rows.append(row)
    return pd.DataFrame(rows)


def variant_table(runs: pd.DataFrame, rules: RecipeRules) -> pd.DataFrame:
    """One row per variant (in the plan's order): seeds, complete runs, steps, final accuracy mean / min / max of
    the complete runs, the best accuracy any run logged, the runs at or above `rules.reached` at the end, and the
    median first step of reaching it among the runs that did."""
    rows = []
    for variant, group in runs.groupby("variant", sort=False):
        done = group[group.complete]
        finals = done.val_accuracy
        rows.append({"variant": variant, "seeds": len(group), "complete": len(done), "steps": int(group.steps.max()),
                     "final_mean": finals.mean() if len(done) else np.nan,
                     "final_min": finals.min() if len(done) else np.nan,
                     "final_max": finals.max() if len(done) else np.nan,
                     "best": group.best_val_accuracy.max(), "reached": int((finals >= rules.reached).sum()),
                     "median_steps_to_reach": group.steps_to_reach.median()})
    return pd.DataFrame(rows)
