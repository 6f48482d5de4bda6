"""The depth phase diagram: per formulation, layers and hops, the accuracy reached beside the share of
link orders the information flow lets through, and the mechanism of every solved model.

A cell with D > L cannot be solved one hop per layer; it is solvable at all only when its accuracy
ceiling (`reach.accuracy_ceiling`: reachable fraction, plus a root guess elsewhere) reaches the
solved threshold. So an unsolved cell is told apart from an unsolvable one, and a solved D > L cell
is evidence of composition, which the mechanism classifier (`tasks.retrieval.mechanism`) must
confirm from the model's probes and attention.
"""

from __future__ import annotations

import dataclasses
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

from headway.studies.retrieval.rules import FORMULATION
from headway.runs import layout
from headway.runs.store import load_model, load_runs
from headway.tasks.retrieval.heads import head_scores, statement_patterns, uniform_link_mass
from headway.tasks.retrieval.mechanism import mechanism_table
from headway.tasks.retrieval.positions import map_statements
from headway.tasks.retrieval.probes import depth_probes
from headway.tasks.retrieval.reach import accuracy_ceiling, reachable_fraction
from headway.tasks.retrieval.task import RetrievalConfig, generate

_REFERENCE_EXAMPLES = 512  # examples the uniform-attention reference of a task is measured on


def run_mechanisms(final: pd.DataFrame, probes: pd.DataFrame, heads: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per plain-task run: its mechanism (linear, compositional, unsolved) and the evidence, a hop counting
    as decoded at probe accuracy ≥ `threshold`."""
    plain = final[final.part == "plain"]
    if plain.empty or probes.empty:
        return pd.DataFrame(columns=["run_id", "mechanism", "farthest", "excess", "reads", "link_next", "link_prev"])
    models = plain[["run_id", "layers", "solved"]].copy()
    references = [_uniform_reference(_task_of(row), row.attention == "causal") for row in plain.itertuples()]
    models["uniform_next"], models["uniform_prev"] = zip(*references, strict=True)
    return mechanism_table(probes, heads, models, threshold=threshold)


def mechanism_evidence(sweep: Path | str, run_ids: set[str], examples: int = 1024,
                       seed: int = 1) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Depth probes and head scores (with `run_id`) of the plain retrieval runs `run_ids` trained under
    `sweep`: what `run_mechanisms` needs, without the study's full circuit analysis (for a quick sweep
    such as `headway demo`)."""
    probes, heads = [], []
    for run_dir in layout.ensemble_dirs(Path(sweep)):
        runs = load_runs(run_dir)
        for index, run in enumerate(runs):
            if run.run_id not in run_ids:
                continue
            task = run.task
            batch = generate(task, examples, np.random.default_rng(seed))
            smap = map_statements(task, batch)
            model = load_model(run_dir, index)
            probes.append(depth_probes(model, task, batch, smap).assign(run_id=run.run_id))
            heads.append(head_scores(statement_patterns(model, task, batch.tokens), task, smap,
                                     run.model.attention == "causal").assign(run_id=run.run_id))
    if not probes:
        return pd.DataFrame(), pd.DataFrame()
    return pd.concat(probes, ignore_index=True), pd.concat(heads, ignore_index=True)


def phase_table(final: pd.DataFrame, metrics: pd.DataFrame, mechanism_class: pd.DataFrame,
                threshold: float) -> pd.DataFrame:
    """One row per plain IC cell (formulation, hops, layers): accuracy over seeds, the reachable
    fraction and ceiling, whether it is solvable and solved, mechanism counts among its runs, and the
    median step at which its solved runs first reached `threshold`."""
    runs = final[(final.part == "plain") & (final.curriculum == "ic")].merge(mechanism_class, on="run_id", how="left")
    if runs.empty:
        return pd.DataFrame()
    first = _first_solved_step(metrics[metrics.run_id.isin(runs.run_id)], threshold)
    runs = runs.assign(solved_step=runs.run_id.map(first))
    keys = [*FORMULATION, "hops", "layers"]
    table = (runs.groupby(keys)
             .agg(accuracy=("val_accuracy", "mean"), accuracy_min=("val_accuracy", "min"),
                  accuracy_max=("val_accuracy", "max"), seeds=("seed", "nunique"), chains=("chains", "first"),
                  steps=("step", "max"), solved_runs=("solved", "sum"),
                  compositional=("mechanism", lambda m: int((m == "compositional").sum())),
                  linear=("mechanism", lambda m: int((m == "linear").sum())),
                  median_solved_step=("solved_step", "median"))
             .reset_index())
    bounds = [reachable_fraction(int(r.hops), int(r.layers), r.attention, r.order, r.layout)
              for r in table.itertuples()]
    table["reachable"] = [b.fraction for b in bounds]
    table["ceiling"] = [accuracy_ceiling(b.fraction, int(k)) for b, k in zip(bounds, table.chains, strict=True)]
    table["solvable"] = table.ceiling >= threshold
    table["solved"] = table.accuracy >= threshold
    table["beyond_linear"] = table.hops > table.layers
    table["chance_roots"] = 1.0 / table.chains
    return table


def cheapest_compositional(final: pd.DataFrame, mechanism_class: pd.DataFrame) -> pd.Series | None:
    """The solved compositional run with the fewest layers, then the fewest hops beyond them, then the
    lowest seed: the smallest model that shows composition."""
    runs = final.merge(mechanism_class, on="run_id")
    runs = runs[runs.mechanism == "compositional"]
    if runs.empty:
        return None
    return runs.sort_values(["layers", "hops", "seed"]).iloc[0]


def _first_solved_step(metrics: pd.DataFrame, threshold: float) -> pd.Series:
    """Per run, the first logged step with validation accuracy ≥ `threshold` (absent if never)."""
    reached = metrics[metrics.val_accuracy >= threshold]
    return reached.groupby("run_id").step.min()


def _task_of(row) -> RetrievalConfig:
    """The retrieval task of one row of the final table (its flat settings)."""
    return RetrievalConfig(**{f.name: getattr(row, f.name) for f in dataclasses.fields(RetrievalConfig)})


@cache
def _uniform_reference(task: RetrievalConfig, causal: bool) -> tuple[float, float]:
    """link_next and link_prev of a uniform-attention head on fixed examples of `task`."""
    batch = generate(task, _REFERENCE_EXAMPLES, 0)
    return uniform_link_mass(map_statements(task, batch), causal)
