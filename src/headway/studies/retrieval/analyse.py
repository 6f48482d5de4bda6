"""Analyse one trained ensemble: head roles and circuit, role scores over checkpoints, depth probes.

Results go to `<analysis>/<ensemble>/` as Parquet files tagged with each run's `run_id`, next to a
`done.json` naming the runs they cover, so an interrupted study analyses only what is missing.
All instances of an ensemble that share a task are measured on the same fixed examples.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.analysis.heads import head_scores, statement_patterns
from headway.analysis.interventions import HeadIntervention, head_effects
from headway.analysis.positions import map_statements
from headway.analysis.probes import depth_probes
from headway.analysis.roles import attention_roles, circuit_check, name_circuit
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_tensors
from headway.runs.config import RunConfig
from headway.runs.store import load_model, load_runs
from headway.studies.ensembles import DONE, by_task
from headway.tasks.retrieval import generate

TABLES = ("heads", "circuit", "head_curves", "probes")
ANALYSIS_SEED = 20_240_601  # the examples analysed; fixed so every model is judged on the same questions
VERSION = 3  # bump when an analysis or rule changes, so cached tables are recomputed


def analyse_ensemble(run_dir: Path, analysis_dir: Path, device: torch.device | str = "cpu",
                     examples: int = 1024, curve_examples: int = 256) -> dict[str, pd.DataFrame]:
    """The analysis tables of the ensemble at `run_dir`, computed once and then read from `analysis_dir`.
    Scores over checkpoints use the first `curve_examples` examples: averages of attention settle on
    far fewer examples than accuracy drops need."""
    target = analysis_dir / run_dir.name
    runs = load_runs(run_dir)
    ids = [run.run_id for run in runs]
    done = target / DONE
    if done.is_file() and {k: v for k, v in layout.read_json(done).items() if k != "seconds"} == {
            "runs": ids, "version": VERSION}:
        return {name: pd.read_parquet(target / f"{name}.parquet") for name in TABLES}
    started = time.perf_counter()
    tables: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    for members in by_task(runs).values():
        for name, frame in _analyse_members(run_dir, runs, members, device, examples, curve_examples).items():
            tables[name].append(frame)
    out = {name: pd.concat(frames, ignore_index=True) for name, frames in tables.items()}
    target.mkdir(parents=True, exist_ok=True)
    for name, frame in out.items():
        frame.to_parquet(target / f"{name}.parquet", index=False)
    layout.write_json(done, {"runs": ids, "version": VERSION, "seconds": round(time.perf_counter() - started, 2)})
    return out


def _tag(frame: pd.DataFrame, runs: list[RunConfig], members: list[int]) -> pd.DataFrame:
    """Replace the sub-ensemble's instance index by the run's id and its position in the ensemble."""
    frame = frame.copy()
    frame["run_id"] = [runs[members[i]].run_id for i in frame.instance]
    frame["instance"] = [members[i] for i in frame.instance]
    return frame


def _analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                     examples: int, curve_examples: int) -> dict[str, pd.DataFrame]:
    """Every analysis of the instances `members` (one task) of the ensemble at `run_dir`."""
    task, model_cfg = runs[members[0]].task, runs[members[0]].model
    causal = model_cfg.attention == "causal"
    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    smap = map_statements(task, batch)
    model = load_model(run_dir, members, device=device)
    scores = attention_roles(head_scores(statement_patterns(model, task, batch.tokens), task, smap, causal))
    intervention = HeadIntervention(model, task, batch, smap)
    heads = name_circuit(scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention)
    circuit = circuit_check(heads, intervention)
    probes = depth_probes(model, task, batch, smap)
    curves = []
    few = batch.subset(slice(0, curve_examples))
    few_map = map_statements(task, few)
    for step in checkpoint_steps(run_dir):  # the final analyses are done: the model takes each checkpoint's weights
        model.load_instances(load_tensors(layout.checkpoint_path(run_dir, step)), members)
        frame = head_scores(statement_patterns(model, task, few.tokens), task, few_map, causal)
        frame.insert(0, "step", step)
        curves.append(frame)
    tables = {"heads": heads, "circuit": circuit, "head_curves": pd.concat(curves, ignore_index=True),
              "probes": probes}
    return {name: _tag(frame, runs, members) for name, frame in tables.items()}
