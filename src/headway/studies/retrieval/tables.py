"""Study-level tables from the trained runs and their analyses (`summarise`): final accuracies, the
depth law, the per-run mechanism and results tables, emergence units and their consistency, probe
reach; the tables under other rules, for the threshold sensitivity (`tables_at`); and the machine-readable
summary (numbers kept, never hidden when a claim fails)."""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.emergence import emergence_orders, emergence_table, order_consistency
from headway.runs.store import final_metrics, plain_value
from headway.studies.base import StudyData
from headway.studies.retrieval.depth import depth_table, measured_min_layers
from headway.studies.retrieval.factors import factor_table
from headway.studies.retrieval.phase import phase_table, run_mechanisms
from headway.studies.retrieval.rules import RetrievalRules, carries_answer
from headway.studies.verdict import Verdict
from headway.analysis.retrieval.faithfulness import faithfulness
from headway.analysis.retrieval.orders import run_order_summary
from headway.analysis.retrieval.probes import probe_reach
from headway.analysis.retrieval.roles import role_columns

FACETS = ("part", "curriculum", "layout", "attention", "order", "supervision")
CIRCUIT_COLUMNS = ("clean_accuracy", "circuit_heads", "circuit_ablated_accuracy", "circuit_resample_accuracy", "rest_ablated_accuracy",
                   "rest_resample_accuracy", "all_ablated_accuracy", "faithfulness", "minimal_heads", "minimal_circuit",
                   "minimal_faithfulness", "random_sets", "random_ablated_accuracy", "random_rest_accuracy", "p_necessary",
                   "p_sufficient", "random_minimal_rest_accuracy", "p_minimal_sufficient")
# The rules the summarised tables read; the other summary rules are read by the verdicts alone, so a
# sensitivity sweep of those judges the same tables again.
TABLE_RULES = ("solved_accuracy", "reach_accuracy", "read_level", "probe_gap", "composition_margin",
               "emergence_fraction", "emergence_rise")
# Rules of the circuit's naming: the analysis names the circuit at every value of their sweep (its
# circuit_sensitivity table) but measures the random-set null at the study's values only.
NAMING_RULES = ("role_score", "circuit_drop")
# What the circuit_sensitivity table measures of a renamed circuit; its other circuit columns are not measured.
RENAMED = ("circuit_heads", "circuit_ablated_accuracy", "rest_ablated_accuracy", "max_other_head_drop")
MODEL_COLUMNS = ("clean_accuracy", "all_ablated_accuracy", "random_sets")  # of the model, whatever its circuit


@dataclass
class RetrievalTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    final: pd.DataFrame  # one row per run (final_runs)
    depth: pd.DataFrame  # accuracy per facet × hops × layers (depth_table)
    minimal: pd.DataFrame  # measured minimum depth per facet × hops
    mechanism: pd.DataFrame  # per run: circuit, ablations, faithfulness, random-set null, whether it carries the answer
    paths: pd.DataFrame  # path patching between consecutive circuit layers, per run and channel
    reach: pd.DataFrame  # probe reach per run, site and layer
    curves: pd.DataFrame  # role scores of the circuit groups over checkpoints
    hops: pd.DataFrame  # per-hop validation accuracy over training
    emergence: pd.DataFrame  # emergence order of circuit groups per cell
    hop_emergence: pd.DataFrame  # emergence order of hops per cell
    results: pd.DataFrame  # one row per run, everything above
    heads: pd.DataFrame  # every head of every model, with its role and effects
    probes: pd.DataFrame  # probe accuracy per run, site, layer and hop
    mechanism_class: pd.DataFrame  # per plain run: its mechanism (MECHANISMS), why, and the evidence
    phase: pd.DataFrame  # the depth phase diagram: per formulation, hops and layers (phase_table)
    factors: pd.DataFrame  # composing runs per level of one factor with the others fixed (factors.factor_table)
    orders: pd.DataFrame  # accuracy per run and link order (or order class), beside the flow (analysis.retrieval.orders)
    order_runs: pd.DataFrame  # per run: accuracy in the orders its depth lets through and in the others
    probe_orders: pd.DataFrame  # gated link probes per run, order class and link number (analysis.retrieval.probes)


def summarise(data: StudyData) -> RetrievalTables:
    """The study's tables from the gathered metrics and analysis tables, by `data.rules`."""
    return derive(data, data.rules)


def tables_at(data: StudyData, tables: RetrievalTables, rules: RetrievalRules) -> RetrievalTables | None:
    """The study's `tables` as `rules` (the study's with a swept rule moved) give them, for the threshold
    sensitivity (`headway.studies.sensitivity`): derived again where a rule the tables read moved (TABLE_RULES);
    with the circuit a naming rule's value names where one of NAMING_RULES moved (`renamed_mechanism`; None
    when the analysis named none); the same tables otherwise (a rule the verdicts alone read)."""
    def moved(names: tuple[str, ...]) -> bool:
        return any(getattr(rules, name) != getattr(data.rules, name) for name in names)

    if moved(TABLE_RULES):
        return derive(data, rules)
    if moved(NAMING_RULES):
        renamed = renamed_mechanism(tables.mechanism, data.tables["circuit_sensitivity"], rules)
        return None if renamed is None else dataclasses.replace(tables, mechanism=renamed)
    return tables


def renamed_mechanism(mechanism: pd.DataFrame, circuits: pd.DataFrame, rules: RetrievalRules) -> pd.DataFrame | None:
    """The mechanism table with the circuit `rules`' naming rules name in each run (the analysis'
    circuit_sensitivity table): its size, ablations and faithfulness; the measures taken of the study's circuit
    only (its random-set null, resampling, minimal subset, roles) are missing, so no run's circuit can beat
    its null there. None when the analysis named no circuit at these values."""
    named = circuits[(circuits.role_threshold == rules.role_score) & (circuits.min_drop == rules.circuit_drop)] \
        if len(circuits) else circuits
    if named.empty:
        return None
    circuit = [c for c in (*CIRCUIT_COLUMNS, *RENAMED, "circuit_roles", "circuit_carries_answer") if c not in MODEL_COLUMNS]
    table = mechanism.drop(columns=circuit, errors="ignore").merge(named[["run_id", *RENAMED]], on="run_id")
    table["faithfulness"] = faithfulness(table.rest_ablated_accuracy.to_numpy(), table.clean_accuracy.to_numpy(),
                                         table.all_ablated_accuracy.to_numpy())
    for column in (*CIRCUIT_COLUMNS, "circuit_roles"):
        if column not in table.columns:
            table[column] = math.nan
    table["circuit_carries_answer"] = carries_answer(table, rules)
    return table[list(mechanism.columns)]


def derive(data: StudyData, rules: RetrievalRules) -> RetrievalTables:
    """Every table, by `rules` (of which it reads TABLE_RULES)."""
    metrics = data.metrics.assign(part=np.where(data.metrics.conditional.astype(bool), "conditional", "plain"))
    final = final_runs(metrics, rules.solved_accuracy)
    heads, circuit = data.tables["heads"], data.tables["circuit"]
    mechanism = mechanism_table(final, heads, circuit, rules)
    facets = tuple(f for f in FACETS if f in final.columns)
    depth = depth_table(metrics, threshold=rules.solved_accuracy, by=facets)
    paths = data.tables["paths"].merge(final[["run_id", "hops", "layers", "solved"]], on="run_id") \
        if len(data.tables["paths"]) else pd.DataFrame()
    emerge = {"fraction": rules.emergence_fraction, "min_rise": rules.emergence_rise}
    curves = role_curves(heads, data.tables["head_curves"], final)
    hops = hop_curves(metrics)
    cells = ic_cells(final)
    minimal = measured_min_layers(depth, by=facets)
    reach = probe_reach_table(data.tables["probes"], final, rules.reach_accuracy)
    orders = order_rows(data.tables.get("orders", pd.DataFrame()), final)
    probe_orders = order_rows(data.tables.get("probe_orders", pd.DataFrame()), final)
    order_runs = run_order_summary(orders, rules.solved_accuracy)
    mechanism_class = run_mechanisms(final, data.tables["probes"], heads, data.tables["composition"],
                                     rules.mechanism_rule())
    return RetrievalTables(final=final, depth=depth, minimal=minimal, mechanism=mechanism, paths=paths,
                           reach=reach, curves=curves, hops=hops,
                           emergence=emergence_summary(curves, cells, **emerge),
                           hop_emergence=emergence_summary(hops, cells, expected=hop_order, **emerge),
                           results=results_table(mechanism, reach, curves, mechanism_class, **emerge)
                           .merge(link_reads(heads), on="run_id", how="left").merge(order_runs, on="run_id", how="left"),
                           heads=heads, probes=data.tables["probes"], mechanism_class=mechanism_class,
                           phase=phase_table(final, metrics, mechanism_class, rules.solved_accuracy, order_runs),
                           factors=factor_table(final, mechanism_class, rules), orders=orders, order_runs=order_runs,
                           probe_orders=probe_orders)


def link_reads(heads: pd.DataFrame) -> pd.DataFrame:
    """Per run, the strongest head's attention from links to their root-ward neighbour (`rootward_read_per_layer`)
    and to their leaf-ward one (`leafward_read_per_layer`) in each layer, first layer first ("0.98 0.16 0.37"; "–"
    where no link has such a neighbour)."""
    if heads.empty:
        return pd.DataFrame(columns=["run_id", "rootward_read_per_layer", "leafward_read_per_layer"])

    def shares(values: pd.Series) -> str:
        return " ".join("–" if math.isnan(x) else f"{x:.2f}" for x in values)  # –: no link has that neighbour (D = 1)

    strongest = heads.groupby(["run_id", "layer"])[["link_next", "link_prev"]].max().reset_index().sort_values("layer")
    text = strongest.groupby("run_id").agg(rootward_read_per_layer=("link_next", shares),
                                           leafward_read_per_layer=("link_prev", shares))
    return text.reset_index()


def order_rows(orders: pd.DataFrame, final: pd.DataFrame) -> pd.DataFrame:
    """An analysis table per order (or order class) of the study's runs, each row with its run's cell and seed in
    front (empty for results analysed before the table existed)."""
    if orders.empty:
        return pd.DataFrame()
    facets = [f for f in FACETS if f in final.columns]
    cells = final[["run_id", *facets, "hops", "layers", "seed"]]
    return cells.merge(orders.drop(columns=["instance"], errors="ignore"), on="run_id")


def final_runs(metrics: pd.DataFrame, solved: float) -> pd.DataFrame:
    """One row per run: config, final accuracy, whether it is solved (accuracy ≥ `solved`), and the chance levels."""
    final = final_metrics(metrics).copy()
    final["part"] = np.where(final.conditional.astype(bool), "conditional", "plain")
    final["solved"] = final.val_accuracy >= solved
    final["chance"] = np.maximum(1.0 / final.vocab, 1.0 / final.chains)
    return final


def mechanism_table(final: pd.DataFrame, heads: pd.DataFrame, circuit: pd.DataFrame,
                    rules: RetrievalRules) -> pd.DataFrame:
    """Per run: the circuit's heads and roles, its necessity, sufficiency and random-set null, the
    costliest other head, the model's head count, and whether the circuit carries the answer (`carries_answer`)."""
    inside = heads[heads.in_circuit]
    signature = (inside.assign(name=lambda f: "L" + (f.layer + 1).astype(str) + " " + f.role)
                 .groupby("run_id").name.agg(lambda names: ", ".join(sorted(set(names)))))
    outside = heads[~heads.in_circuit]
    worst_other = outside.groupby("run_id")[["mean_drop", "zero_drop"]].max().max(axis=1)
    table = final[["run_id", *FACETS, "hops", "layers", "seed", "val_accuracy", "solved", "chance"]].merge(
        circuit[["run_id", *CIRCUIT_COLUMNS]], on="run_id")
    table["model_heads"] = table.run_id.map(final.set_index("run_id").eval("layers * heads")).astype(int)
    table["circuit_roles"] = table.run_id.map(signature).astype(object).fillna("")
    table["max_other_head_drop"] = table.run_id.map(worst_other).fillna(0.0)
    table["circuit_carries_answer"] = carries_answer(table, rules)
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


def emergence_summary(curves: pd.DataFrame, cells: pd.DataFrame, fraction: float, min_rise: float,
                      expected: Callable[[Any], tuple[str, ...]] | None = None) -> pd.DataFrame:
    """Per cell (rows of `cells` with run_ids): emergence consistency across its seeds (emergence at
    `fraction` of the rise, none below `min_rise`), and what its order test counts (`order_agreement`):
    against `expected(cell)` when given, else against the cell's most common order."""
    rows = []
    for cell in cells.itertuples():
        mine = curves[curves.run_id.isin(cell.run_ids)]
        if mine.empty:
            continue
        table = emergence_table(mine, fraction, min_rise)
        consistency = order_consistency(table)
        orders = emergence_orders(table)
        untied = [tuple(order) for order in orders[~orders.ties].order]
        rows.append({**{k: getattr(cell, k) for k in cells.columns if k != "run_ids"}, **consistency,
                     "most_common_order": " → ".join(consistency["most_common_order"]),
                     **order_agreement(untied, expected(cell) if expected else None)})
    return pd.DataFrame(rows)


def hop_order(cell: Any) -> tuple[str, ...]:
    """The order the implicit curriculum predicts for a cell's hops: hop 1 → hop 2 → … → hop D."""
    return tuple(f"hop {k}" for k in range(1, int(cell.hops) + 1))


def order_agreement(orders: Sequence[tuple[str, ...]], expected: tuple[str, ...] | None = None) -> dict[str, Any]:
    """What an order test counts among the seeds whose units emerged at distinct checkpoints (`orders`): the
    unit set (`order_units` units) — `expected`'s, else the set most seeds emerged, ties to the larger set
    (which units emerge says nothing of their order) —, the seeds whose emerged units are exactly that set
    (`order_seeds`), and how many of them follow the tested order (`agreeing_seeds`): `expected`, else
    their most common order (`tested_order`)."""
    sets = Counter(frozenset(order) for order in orders)
    if expected is not None:
        units = frozenset(expected)
    else:
        units = max(sets, key=lambda s: (sets[s], len(s), sorted(s)), default=frozenset())
    held = [order for order in orders if frozenset(order) == units]
    tested = expected if expected is not None else Counter(held).most_common(1)[0][0] if held else ()
    return {"order_units": len(units), "order_seeds": len(held),
            "agreeing_seeds": sum(order == tested for order in held), "tested_order": " → ".join(tested)}


def probe_reach_table(probes: pd.DataFrame, final: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Probe reach per run, site and layer (a hop counts as decoded at probe accuracy ≥ `threshold`)."""
    if probes.empty:
        return pd.DataFrame(columns=["run_id", "site", "layer", "reach", "bound_theorem", "tripling"])
    frames = [probe_reach(group, threshold).assign(run_id=run_id) for run_id, group in probes.groupby("run_id")]
    return pd.concat(frames, ignore_index=True).merge(final[["run_id"]], on="run_id")


def results_table(mechanism: pd.DataFrame, reach: pd.DataFrame, curves: pd.DataFrame,
                  mechanism_class: pd.DataFrame, fraction: float, min_rise: float) -> pd.DataFrame:
    """One row per run: circuit columns, its mechanism class, the query reach after each layer and the
    emergence order (emergence at `fraction` of the rise, none below `min_rise`)."""
    table = mechanism.merge(mechanism_class, on="run_id", how="left")
    query = reach[reach.site == "query"]
    if not query.empty:
        text = query.sort_values("layer").groupby("run_id").reach.agg(lambda r: " ".join(str(int(v)) for v in r))
        table["query_reach_per_layer"] = table.run_id.map(text).fillna("")
    if not curves.empty:
        orders = emergence_table(curves.assign(seed=curves.run_id), fraction, min_rise)
        order = (orders.dropna(subset=["emergence_step"]).sort_values(["emergence_step", "unit"])
                 .groupby("seed").unit.agg(" → ".join))
        table["emergence_order"] = table.run_id.map(order).fillna("")
    return table


def summary_json(data: StudyData, tables: RetrievalTables, verdicts: list[Verdict], sensitivity: pd.DataFrame,
                 unrun: list[dict[str, str]]) -> dict[str, Any]:
    """The machine-readable summary: settings, hardware, timings, the rules, the verdicts (each with its p-value,
    level, power and reason), the claims not run (`unrun`: `verdict.not_run`), the tables that back them and the
    threshold sensitivity (`headway.studies.sensitivity`)."""
    def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
        return [{k: _json_value(v) for k, v in row.items()} for row in frame.to_dict("records")]

    return {
        "scale": data.plan.scale, "runs": len(tables.final), "hardware": data.hardware,
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()}, "rules": data.rules.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts], "not_run": unrun, "minimum_depth": records(tables.minimal),
        "mechanism": records(tables.mechanism.drop(columns=["run_id"])),
        "path_patching": records(tables.paths.drop(columns=["run_id"], errors="ignore")),
        "threshold_sensitivity": records(sensitivity),
        "emergence": records(tables.emergence), "hop_emergence": records(tables.hop_emergence),
        "probe_reach": records(tables.reach), "phase": records(tables.phase), "factors": records(tables.factors),
    }


def _json_value(value: Any) -> Any:
    value = plain_value(value)
    if isinstance(value, float) and math.isinf(value):
        return None
    if isinstance(value, (list, tuple, np.ndarray)):
        return [_json_value(v) for v in value]
    return value
