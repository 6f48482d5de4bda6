"""Study-level tables from the trained runs and their analyses: final accuracies, the per-run
mechanism and results tables, emergence units and their consistency, probe reach, and the
machine-readable summary (numbers kept, never hidden when a claim fails)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from headway.analysis.emergence import emergence_table, order_consistency
from headway.analysis.probes import probe_reach
from headway.analysis.roles import role_columns
from headway.runs.store import plain_value
from headway.studies.depth import final_accuracy

if TYPE_CHECKING:
    from headway.studies.retrieval.study import StudyData

FACETS = ("part", "curriculum", "layout", "attention", "order")
SOLVED = 0.9
NEAR_BASELINE = 0.1  # a circuit "carries the answer" when ablating it leaves at most baseline + this
OTHER_HEAD_LIMIT = 0.05  # ... and ablating any single head outside it costs less than this


def final_runs(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run: config, final accuracy, whether it is solved, and the chance levels."""
    final = final_accuracy(metrics).copy()
    final["part"] = np.where(final.conditional.astype(bool), "conditional", "plain")
    final["solved"] = final.val_accuracy >= SOLVED
    final["chance"] = np.maximum(1.0 / final.vocab, 1.0 / final.chains)
    return final


def mechanism_table(final: pd.DataFrame, heads: pd.DataFrame, circuit: pd.DataFrame) -> pd.DataFrame:
    """Per run: the circuit's heads and roles, accuracy with it ablated, and the costliest other head."""
    inside = heads[heads.in_circuit]
    signature = (inside.assign(name=lambda f: "L" + (f.layer + 1).astype(str) + " " + f.role)
                 .groupby("run_id").name.agg(lambda names: ", ".join(sorted(set(names)))))
    outside = heads[~heads.in_circuit]
    worst_other = outside.groupby("run_id")[["mean_drop", "zero_drop"]].max().max(axis=1)
    table = final[["run_id", *FACETS, "hops", "layers", "seed", "val_accuracy", "solved", "chance"]].merge(
        circuit[["run_id", "circuit_heads", "circuit_ablated_accuracy", "rest_ablated_accuracy"]], on="run_id")
    table["circuit_roles"] = table.run_id.map(signature).fillna("")
    table["max_other_head_drop"] = table.run_id.map(worst_other).fillna(0.0)
    table["circuit_carries_answer"] = (
        (table.circuit_ablated_accuracy <= table.chance + NEAR_BASELINE)
        & (table.max_other_head_drop < OTHER_HEAD_LIMIT))
    return table


def role_curves(heads: pd.DataFrame, curves: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """Long table (run_id, seed, unit, step, score): each circuit (layer, role) group's score over
    checkpoints, the best head of the group at every step."""
    column_of = {role: column for column, role in role_columns(curves).items()}
    frames = []
    for (run_id, layer, role), group in heads[heads.in_circuit & (heads.role != "none")].groupby(
            ["run_id", "layer", "role"]):
        mine = curves[(curves.run_id == run_id) & (curves.layer == layer) & curves["head"].isin(group["head"])]
        score = mine.groupby("step")[column_of[role]].max()
        frames.append(pd.DataFrame({"run_id": run_id, "unit": f"L{layer + 1} {role}", "step": score.index,
                                    "score": score.to_numpy()}))
    if not frames:
        return pd.DataFrame(columns=["run_id", "seed", "unit", "step", "score"])
    out = pd.concat(frames, ignore_index=True)
    return out.merge(final[["run_id", "seed"]], on="run_id")


def hop_curves(metrics: pd.DataFrame) -> pd.DataFrame:
    """Long table (run_id, seed, unit, step, score) of per-hop validation accuracy (IC runs)."""
    hop_columns = sorted((c for c in metrics.columns if c.startswith("val_acc_hop")),
                         key=lambda c: int(c.removeprefix("val_acc_hop")))
    if not hop_columns:
        return pd.DataFrame(columns=["run_id", "seed", "unit", "step", "score"])
    long = metrics.melt(id_vars=["run_id", "seed", "step"], value_vars=hop_columns, var_name="unit",
                        value_name="score").dropna(subset=["score"])
    long["unit"] = "hop " + long.unit.str.removeprefix("val_acc_hop")
    return long


def ic_cells(final: pd.DataFrame) -> pd.DataFrame:
    """Solved IC runs grouped into cells (every facet, hops, layers) with their run ids."""
    solved = final[(final.curriculum == "ic") & final.solved]
    keys = [f for f in FACETS if f in final.columns] + ["hops", "layers"]
    return solved.groupby(keys).run_id.agg(list).rename("run_ids").reset_index()


def emergence_summary(curves: pd.DataFrame, cells: pd.DataFrame) -> pd.DataFrame:
    """Per cell (rows of `cells` with run_ids): emergence consistency across its seeds."""
    rows = []
    for cell in cells.itertuples():
        mine = curves[curves.run_id.isin(cell.run_ids)]
        if mine.empty:
            continue
        table = emergence_table(mine)
        consistency = order_consistency(table)
        rows.append({**{k: getattr(cell, k) for k in cells.columns if k != "run_ids"}, **consistency,
                     "most_common_order": " → ".join(consistency["most_common_order"])})
    return pd.DataFrame(rows)


def order_verdict(cells: pd.DataFrame, expected: Callable[[Any], str] | None = None) -> tuple[str, str]:
    """Verdict and numbers for "units emerge in a fixed order" over `cells` (rows of emergence_summary):
    `not reproduced` when seeds disagree (or differ from `expected(cell)`), `partly reproduced` when
    the only agreement comes from seeds whose units emerged at the same checkpoint, else `reproduced`."""
    disagree = tied = False
    parts = []
    for cell in cells.itertuples():
        wrong = expected is not None and cell.most_common_order != expected(cell)
        disagree |= cell.share_most_common < 1 or wrong
        tied |= cell.tied_seeds > 0
        parts.append(f"D={cell.hops}, {cell.layers} layers: {cell.most_common_order} in {cell.share_most_common:.0%} "
                     f"of {cell.seeds} seeds, {cell.tied_seeds} with ties, τ mean {cell.kendall_tau_mean:.2f}")
    verdict = "not reproduced" if disagree else "partly reproduced" if tied else "reproduced"
    return verdict, "; ".join(parts) + ("." if not tied else
                                        ". Ties: two units emerged at the same checkpoint, so their order is "
                                        "not resolved at this checkpoint spacing.")


def probe_reach_table(probes: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """Probe reach per run, site and layer."""
    if probes.empty:
        return pd.DataFrame(columns=["run_id", "site", "layer", "reach", "bound_theorem", "tripling"])
    frames = [probe_reach(group).assign(run_id=run_id) for run_id, group in probes.groupby("run_id")]
    return pd.concat(frames, ignore_index=True).merge(final[["run_id"]], on="run_id")


def results_table(mechanism: pd.DataFrame, reach: pd.DataFrame, curves: pd.DataFrame) -> pd.DataFrame:
    """One row per run: mechanism columns, the query reach after each layer and the emergence order."""
    table = mechanism.copy()
    query = reach[reach.site == "query"]
    if not query.empty:
        text = query.sort_values("layer").groupby("run_id").reach.agg(lambda r: " ".join(str(int(v)) for v in r))
        table["query_reach_per_layer"] = table.run_id.map(text).fillna("")
    if not curves.empty:
        orders = emergence_table(curves.assign(seed=curves.run_id))
        order = (orders.dropna(subset=["emergence_step"]).sort_values(["emergence_step", "unit"])
                 .groupby("seed").unit.agg(" → ".join))
        table["emergence_order"] = table.run_id.map(order).fillna("")
    return table


def summary_json(data: StudyData, final: pd.DataFrame, minimal: pd.DataFrame, mechanism: pd.DataFrame,
                 emergence: pd.DataFrame, hop_emergence: pd.DataFrame, reach: pd.DataFrame,
                 verdicts: list[dict[str, Any]]) -> dict[str, Any]:
    """The machine-readable summary: settings, hardware, timings, the tables that back each verdict."""
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict("records")]

    return {
        "scale": data.plan.scale, "runs": len(final), "hardware": data.hardware,
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "verdicts": verdicts, "minimum_depth": records(minimal),
        "mechanism": records(mechanism.drop(columns=["run_id"])),
        "emergence": records(emergence), "hop_emergence": records(hop_emergence),
        "probe_reach": records(reach),
    }


def _json_value(value: Any) -> Any:
    value = plain_value(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_value(v) for v in value]
    return value
