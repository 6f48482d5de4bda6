"""`headway study sorting`: train the grid, analyse every model, write tables, figures,
`summary.json` and an offline HTML report. Everything already in the output folder is reused."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
from tqdm.auto import tqdm

from headway.runs import layout
from headway.runs.store import load_runs
from headway.studies.ensembles import recorded_seconds
from headway.studies.retrieval.study import hardware_description
from headway.studies.sorting.analyse import TABLES, analyse_ensemble
from headway.studies.sorting.plan import SortingPlan
from headway.train.sweep import resolve_device, train_runs

RUNS = "runs"
ANALYSIS = "analysis"


@dataclass
class SortingStudyData:
    """What the report is made from: the plan, training metrics, analysis tables and timings."""

    plan: SortingPlan
    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    hardware: dict[str, str]
    ensembles: list[str]


def run_sorting_study(plan: SortingPlan, out: Path | str, device: str = "auto", progress: bool = True) -> Path:
    """Train, analyse and report the sorting study described by `plan` into `out`; return the report's path."""
    from headway.studies.sorting.report import write_outputs

    out = Path(out)
    target = resolve_device(device)
    runs = plan.runs()
    started = time.perf_counter()
    metrics = train_runs(runs, out / RUNS, device=str(target), progress=progress)
    trained = time.perf_counter()
    wanted = {run.run_id for run in runs}
    development = {run.run_id for run in plan.development_runs()}
    ensembles = [d for d in layout.ensemble_dirs(out / RUNS) if {r.run_id for r in load_runs(d)} & wanted]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    recorded = [0.0, 0.0]
    for run_dir in tqdm(ensembles, desc="analysing", unit="ensemble", disable=not progress):
        tables = analyse_ensemble(run_dir, out / ANALYSIS, plan.sgld, development, plan.llc_checkpoints,
                                  plan.examples, target, progress)
        for name, frame in tables.items():
            if len(frame):
                frame = frame.assign(ensemble=run_dir.name)
                parts[name].append(frame[frame.run_id.isin(wanted)])
        recorded = [a + b for a, b in zip(recorded, recorded_seconds(run_dir, out / ANALYSIS))]
    tables = {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
              for name, frames in parts.items()}
    analysed = time.perf_counter()
    seconds = {"training_s": trained - started, "analysis_s": analysed - trained,
               "training_recorded_s": recorded[0], "analysis_recorded_s": recorded[1]}
    data = SortingStudyData(plan, metrics, tables, seconds, hardware_description(target),
                            [d.name for d in ensembles])
    return write_outputs(data, out)
