"""What the studies share: train a grid, analyse each ensemble once, gather the tables; grouping
instances by task, and the recorded times."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch
from tqdm.auto import tqdm

from headway.runs import layout
from headway.runs.config import RunConfig
from headway.runs.store import load_runs
from headway.train.sweep import resolve_device, train_runs

DONE = "done.json"  # written next to an ensemble's analysis tables when they are complete
RUNS = "runs"  # a study's trained ensembles, under its output folder
ANALYSIS = "analysis"  # its cached per-ensemble analysis tables


def by_task(runs: list[RunConfig]) -> dict[str, list[int]]:
    """Instance indices grouped by task configuration (one group unless a grid mixed tasks)."""
    groups: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        groups.setdefault(repr(run.task), []).append(index)
    return groups


def recorded_seconds(run_dir: Path, analysis_dir: Path) -> tuple[float, float]:
    """Training seconds (as the ensemble's summary recorded them) and analysis seconds of one ensemble."""
    summary, done = run_dir / layout.SUMMARY, analysis_dir / run_dir.name / DONE
    train = layout.read_json(summary).get("seconds_this_session", 0.0) if summary.is_file() else 0.0
    analyse = layout.read_json(done).get("seconds", 0.0) if done.is_file() else 0.0
    return float(train), float(analyse)


@dataclass
class GridOutcome:
    """A trained and analysed grid: metrics of its runs, the analysis tables, timings, ensembles."""

    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    ensembles: list[Path]
    device: torch.device


def train_and_analyse(runs: list[RunConfig], out: Path, tables: tuple[str, ...],
                      analyse: Callable[[Path, torch.device], dict[str, pd.DataFrame]], device: str = "auto",
                      progress: bool = True) -> GridOutcome:
    """Train `runs` under `out/runs`, call `analyse(run_dir, device)` on every ensemble holding one
    of them (it caches its own tables under `out/analysis`), and gather the tables of those runs."""
    target = resolve_device(device)
    started = time.perf_counter()
    metrics = train_runs(runs, out / RUNS, device=str(target), progress=progress)
    trained = time.perf_counter()
    wanted = {run.run_id for run in runs}
    ensembles = [d for d in layout.ensemble_dirs(out / RUNS) if {r.run_id for r in load_runs(d)} & wanted]
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in tables}
    recorded = [0.0, 0.0]
    for run_dir in tqdm(ensembles, desc="analysing", unit="ensemble", disable=not progress):
        for name, frame in analyse(run_dir, target).items():
            if len(frame):
                parts[name].append(frame[frame.run_id.isin(wanted)])
        recorded = [a + b for a, b in zip(recorded, recorded_seconds(run_dir, out / ANALYSIS))]
    gathered = {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()
                for name, frames in parts.items()}
    seconds = {"training_s": trained - started, "analysis_s": time.perf_counter() - trained,
               "training_recorded_s": recorded[0], "analysis_recorded_s": recorded[1]}
    return GridOutcome(metrics, gathered, seconds, ensembles, target)


def hardware_description(device: torch.device) -> dict[str, str]:
    """What the study ran on, for the report (device name, CPU count, torch version)."""
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    return {"device": f"{device.type}: {name}", "cpu_count": str(os.cpu_count()),
            "torch": torch.__version__, "python": platform.python_version()}
