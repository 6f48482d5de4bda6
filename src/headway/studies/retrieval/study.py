"""`headway study retrieval`: train the study's grids, analyse every model, write tables, figures,
`summary.json` and an offline HTML report. Everything already in the output folder is reused."""

from __future__ import annotations

import os
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from headway.runs import layout
from headway.runs.store import load_runs
from headway.studies.ensembles import recorded_seconds
from headway.studies.retrieval.analyse import TABLES, analyse_ensemble
from headway.studies.retrieval.plan import StudyPlan
from headway.train.sweep import resolve_device, train_runs

RUNS = "runs"
ANALYSIS = "analysis"


@dataclass
class StudyData:
    """Everything the report is made from: metrics of the plan's runs and the analysis tables."""

    plan: StudyPlan
    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    hardware: dict[str, str]


def run_study(plan: StudyPlan, out: Path | str, device: str = "auto", progress: bool = True) -> Path:
    """Train, analyse and report the study described by `plan` into `out`; return the report's path."""
    from headway.studies.retrieval.report import write_outputs

    out = Path(out)
    target = resolve_device(device)
    runs = plan.runs()
    started = time.perf_counter()
    metrics = train_runs(runs, out / RUNS, device=str(target), progress=progress)
    trained = time.perf_counter()
    wanted = {run.run_id for run in runs}
    ensembles = [d for d in layout.ensemble_dirs(out / RUNS) if {r.run_id for r in load_runs(d)} & wanted]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in TABLES}
    recorded = [0.0, 0.0]
    for run_dir in tqdm(ensembles, desc="analysing", unit="ensemble", disable=not progress):
        for name, frame in analyse_ensemble(run_dir, out / ANALYSIS, target).items():
            parts[name].append(frame[frame.run_id.isin(wanted)])
        recorded = [a + b for a, b in zip(recorded, recorded_seconds(run_dir, out / ANALYSIS))]
    tables = {name: pd.concat(frames, ignore_index=True) for name, frames in parts.items()}
    analysed = time.perf_counter()
    seconds = {"training_s": trained - started, "analysis_s": analysed - trained,
               "training_recorded_s": recorded[0], "analysis_recorded_s": recorded[1]}
    data = StudyData(plan, metrics, tables, seconds, hardware_description(target))
    return write_outputs(data, out, out / RUNS)


def hardware_description(device: torch.device) -> dict[str, str]:
    """What the study ran on, for the report (device name, CPU count, torch version)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device": f"{device.type}: {name}", "cpu_count": str(os.cpu_count()),
            "torch": torch.__version__, "python": platform.python_version()}
