"""The depth phase diagram: per formulation, layers and hops, the accuracy reached beside the share of
link orders the information flow lets through, and the mechanism of every solved model.

A cell with D > L cannot be solved one hop per layer; it is solvable at all only when its accuracy
ceiling (`reach.accuracy_ceiling`: reachable fraction, plus a root guess elsewhere) reaches the
solved threshold. So an unsolved cell is told apart from an unsolvable one, and a solved D > L cell
is evidence of composition, which the mechanism classifier (`tasks.retrieval.mechanism`) must
confirm from the model's link-site probes and the ablation of its link-composing heads, or else call
the model not classifiable.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from headway.studies.retrieval.rules import FORMULATION
from headway.runs import layout
from headway.runs.store import load_model, load_runs
from headway.analysis.retrieval.composition import composition_check
from headway.analysis.retrieval.heads import head_scores, statement_patterns, uniform_link_mass
from headway.analysis.retrieval.interventions import HeadIntervention
from headway.analysis.retrieval.mechanism import MECHANISM_COLUMNS, MECHANISMS, MechanismRule, mechanism_table
from headway.tasks.retrieval.positions import map_statements
from headway.analysis.retrieval.probes import depth_probes, probe_examples
from headway.analysis.retrieval.reach import accuracy_ceiling, reachable_fraction
from headway.tasks.retrieval.generator import generate

# what a cell's row takes from its runs' per-order summaries (`orders.run_order_summary`), as means over seeds
ORDER_COLUMNS = ("run_id", "reachable_accuracy", "unreachable_accuracy", "reachable_orders_solved")


def run_mechanisms(final: pd.DataFrame, probes: pd.DataFrame, heads: pd.DataFrame, composition: pd.DataFrame,
                   rule: MechanismRule) -> pd.DataFrame:
    """Per plain-task run: its mechanism (one of MECHANISMS) and the evidence (MECHANISM_COLUMNS) by `rule`,
    from its probes, head scores and composition check (`composition.composition_check`)."""
    plain = final[final.part == "plain"]
    if plain.empty or probes.empty:
        return pd.DataFrame(columns=["run_id", *MECHANISM_COLUMNS])
    models = plain[["run_id", "layers", "hops", "solved", "val_accuracy"]].rename(columns={"val_accuracy": "accuracy"})
    return mechanism_table(probes, heads, models, rule, composition)


def mechanism_evidence(sweep: Path | str, run_ids: set[str], read_level: float, examples: int = 1024,
                       seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Depth probes (on at least `probe_examples` examples), head scores and the composition check (each with
    `run_id`) of the plain retrieval runs `run_ids` trained under `sweep`, the composing heads read at
    `read_level` (`RetrievalRules.read_level`): what `run_mechanisms` needs, without the study's full circuit
    analysis (for a quick sweep such as `headway demo`)."""
    probes, heads, checks = [], [], []
    for run_dir in layout.ensemble_dirs(Path(sweep)):
        runs = load_runs(run_dir)
        for index, run in enumerate(runs):
            if run.run_id not in run_ids:
                continue
            task, causal = run.task, run.model.attention == "causal"
            batch = generate(task, examples, np.random.default_rng(seed))
            smap = map_statements(task, batch)
            model = load_model(run_dir, index)
            probed = generate(task, max(examples, probe_examples(run.model.d_model, task.vocab)),
                              np.random.default_rng(seed))
            probes.append(depth_probes(model, task, probed, map_statements(task, probed)).assign(run_id=run.run_id))
            scores = head_scores(statement_patterns(model, task, batch.tokens), task, smap, causal)
            heads.append(scores.assign(run_id=run.run_id))
            checks.append(composition_check(scores, HeadIntervention(model, task, batch, smap),
                                            uniform_link_mass(smap, causal), read_level).assign(run_id=run.run_id))
    if not probes:
        return pd.DataFrame(), pd.DataFrame(), pd.DataFrame()
    return tuple(pd.concat(frames, ignore_index=True) for frames in (probes, heads, checks))


def phase_table(final: pd.DataFrame, metrics: pd.DataFrame, mechanism_class: pd.DataFrame,
                threshold: float, order_runs: pd.DataFrame | None = None) -> pd.DataFrame:
    """One row per plain IC cell (formulation, hops, layers): accuracy over seeds, the reachable
    fraction and ceiling, whether it is solvable and solved, mechanism counts among its runs, and the
    median step at which its solved runs first reached `threshold`; with `order_runs`
    (`orders.run_order_summary`), the accuracy in the link orders the flow lets through at the cell's depth
    and in the others, the share of reachable orders solved, and `solved_in_reachable` (reachable-order
    accuracy ≥ `threshold`; missing, never False, where the runs have no per-order table)."""
    runs = final[(final.part == "plain") & (final.curriculum == "ic")].merge(mechanism_class, on="run_id", how="left")
    if order_runs is None or order_runs.empty:
        order_runs = pd.DataFrame({"run_id": pd.Series(dtype=object),
                                   **{column: pd.Series(dtype=float) for column in ORDER_COLUMNS[1:]}})
    runs = runs.merge(order_runs[list(ORDER_COLUMNS)], on="run_id", how="left")
    if runs.empty:
        return pd.DataFrame()
    first = _first_solved_step(metrics[metrics.run_id.isin(runs.run_id)], threshold)
    runs = runs.assign(solved_step=runs.run_id.map(first))
    keys = [*_formulation_columns(runs), "hops", "layers"]
    table = (runs.groupby(keys)
             .agg(accuracy=("val_accuracy", "mean"), accuracy_min=("val_accuracy", "min"),
                  accuracy_max=("val_accuracy", "max"), seeds=("seed", "nunique"), chains=("chains", "first"),
                  steps=("step", "max"), solved_runs=("solved", "sum"),
                  **{_count_column(kind): ("mechanism", _counter(kind)) for kind in MECHANISMS},
                  median_solved_step=("solved_step", "median"),
                  **{column: (column, "mean") for column in ORDER_COLUMNS[1:]})
             .reset_index())
    bounds = [reachable_fraction(int(r.hops), int(r.layers), r.attention, r.order, r.layout)
              for r in table.itertuples()]
    table["reachable"] = [b.fraction for b in bounds]
    table["ceiling"] = [accuracy_ceiling(b.fraction, int(k)) for b, k in zip(bounds, table.chains, strict=True)]
    table["solvable"] = table.ceiling >= threshold
    table["solved"] = table.accuracy >= threshold
    table["solved_in_reachable"] = pd.array([pd.NA if np.isnan(a) else bool(a >= threshold)
                                             for a in table.reachable_accuracy.astype(float)], dtype="boolean")
    table["beyond_linear"] = table.hops > table.layers
    table["chance_roots"] = 1.0 / table.chains
    return table


def _formulation_columns(runs: pd.DataFrame) -> list[str]:
    """What tells one phase diagram panel from another: the formulation, and whether unreachable targets
    were masked when the runs carry that setting (results older than it do not)."""
    masked = "mask_unreachable" in runs.columns and "mask_unreachable" not in FORMULATION
    return [*FORMULATION, *(["mask_unreachable"] if masked else [])]


def cheapest_compositional(final: pd.DataFrame, mechanism_class: pd.DataFrame) -> pd.Series | None:
    """The solved compositional run with the fewest layers, then the fewest hops beyond them, then the
    lowest seed: the smallest model that shows composition."""
    runs = final.merge(mechanism_class, on="run_id")
    runs = runs[runs.mechanism == "compositional"]
    if runs.empty:
        return None
    return runs.sort_values(["layers", "hops", "seed"]).iloc[0]


def _count_column(mechanism: str) -> str:
    """The phase table's column counting the runs of one mechanism: its name, spaces as underscores."""
    return mechanism.replace(" ", "_")


def _counter(mechanism: str):
    """How many runs of a cell have `mechanism`."""
    return lambda column: int((column == mechanism).sum())


def _first_solved_step(metrics: pd.DataFrame, threshold: float) -> pd.Series:
    """Per run, the first logged step with validation accuracy ≥ `threshold` (absent if never)."""
    reached = metrics[metrics.val_accuracy >= threshold]
    return reached.groupby("run_id").step.min()
