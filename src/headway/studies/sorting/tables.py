"""Study-level tables of the sorting study (`summarise`): one row per run with its mode, the mode
fractions per data value and weight decay, the gap-effect test, and each traced run's development;
and the machine-readable summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.development import Development, development
from headway.analysis.statistics import fisher_exact
from headway.runs.store import final_metrics
from headway.studies.base import StudyData
from headway.studies.sorting.plan import data_label_of
from headway.studies.verdict import Verdict
from headway.tasks.sorting.modes import MODES

LEARNED = 0.95  # per-token validation accuracy a run must reach to count as having learned to sort
LLC_FALL = 0.1  # the final LLC must sit this fraction of the peak below it for "rises, then falls"


@dataclass
class SortingTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    final: pd.DataFrame  # one row per run: grid coordinates, accuracies, mode and its quantities, LLC
    fractions: pd.DataFrame  # learned runs per (data, weight decay) in each mode
    gap_test: dict[str, Any] | None  # the largest change of a mode's fraction across δ̄ and its p-value
    development: list[Development]  # the traced runs, in trace order
    weight_decays: tuple[float, ...]  # the plan's weight decays, in plan order
    ablation: pd.DataFrame
    dla: pd.DataFrame


def summarise(data: StudyData) -> SortingTables:
    """The study's tables from the gathered metrics and analysis tables."""
    final = final_table(data.metrics, data.tables)
    final = final.merge(mode_settled(data.tables["mode_curve"]), on="run_id", how="left")
    fractions = mode_fractions(final)
    curve = data.tables["llc_curve"]
    traced = [development(run_id, data.metrics, curve, LLC_FALL) for run_id in curve.run_id.unique()] \
        if len(curve) else []
    return SortingTables(final=final, fractions=fractions, gap_test=gap_effect(fractions), development=traced,
                         weight_decays=tuple(data.plan.weight_decays), ablation=data.tables["ablation"],
                         dla=data.tables["dla"])


def final_table(metrics: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per run: grid coordinates, measured δ̄, final accuracies, mode and its quantities, final LLC."""
    last = final_metrics(metrics)
    keep = ["run_id", "seed", "weight_decay", "val_loss", "val_accuracy", "val_list_accuracy"]
    final = tables["final"].merge(last[keep], on="run_id", how="left")
    llc = tables["llc_final"][["run_id", "llc_mean", "llc_std", "warnings"]].rename(
        columns={"llc_mean": "llc", "warnings": "llc_warnings"})
    final = final.merge(llc, on="run_id", how="left")
    front = ["run_id", "data", "mean_gap", "weight_decay", "seed", "val_accuracy", "val_list_accuracy", "mode"]
    rest = [c for c in final.columns if c not in front and c not in ("instance", "ensemble")]
    return final[front + rest].sort_values(["data", "weight_decay", "seed"], ascending=[True, False, True],
                                            ignore_index=True)


def mode_fractions(final: pd.DataFrame) -> pd.DataFrame:
    """Fraction of seeds in each mode per (data, weight decay), learned runs only."""
    learned = final[final.val_accuracy >= LEARNED]
    rows = []
    for (data, gap, wd), group in learned.groupby(["data", "mean_gap", "weight_decay"]):
        for mode in MODES:
            rows.append({"data": data, "mean_gap": gap, "weight_decay": wd, "mode": mode,
                         "count": int((group["mode"] == mode).sum()), "n": len(group),
                         "fraction": float((group["mode"] == mode).mean())})
    return pd.DataFrame(rows)


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


def gap_effect(fractions: pd.DataFrame) -> dict[str, Any] | None:
    """The largest change of one mode's fraction across data values at one weight decay, with the
    p-value of Fisher's exact test between the two data values that differ most."""
    best = None
    for (wd, mode), group in fractions.groupby(["weight_decay", "mode"]):
        if group.data.nunique() < 2:
            continue
        low, high = group.loc[group.fraction.idxmin()], group.loc[group.fraction.idxmax()]
        change = high.fraction - low.fraction
        if best is None or change > best["change"]:
            p = fisher_exact(int(high["count"]), int(high.n - high["count"]), int(low["count"]),
                             int(low.n - low["count"]))
            best = {"weight_decay": float(wd), "mode": mode, "change": float(change), "p_value": p,
                    "low": f"{int(low['count'])}/{int(low.n)} at {low.data}",
                    "high": f"{int(high['count'])}/{int(high.n)} at {high.data}"}
    return best


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
        "development": [traced.summary(run_title(traced)) for traced in tables.development],
        "sgld": plan.sgld.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts],
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
        "run_ids": final.run_id.tolist(),
    }
