"""Train a list of runs: pack them into ensembles by shape and train each, reusing what is done."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from headway.errors import ConfigError
from headway.runs import layout
from headway.runs.config import RunConfig, group_runs
from headway.runs.store import load_metrics, load_runs
from headway.train.trainer import EnsembleTrainer


def resolve_device(device: str) -> torch.device:
    """`auto` picks the GPU when there is one, else the CPU; anything unusable is refused."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        target = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device = {device!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if target.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device = {device!r} but no CUDA GPU is available here; use auto or cpu")
    if target.type == "cuda" and (target.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"device = {device!r} but this machine has {torch.cuda.device_count()} GPU(s); "
                          f"use cuda:0 … cuda:{torch.cuda.device_count() - 1}")
    if target.type not in ("cpu", "cuda"):
        raise ConfigError(f"device = {device!r} is not supported; use auto, cpu, cuda or cuda:N")
    return target


def train_runs(runs: list[RunConfig], out: Path | str, device: str = "auto", progress: bool = True) -> pd.DataFrame:
    """Train every run under `out` (one sub-directory per ensemble); return the metrics of `runs`.

    A run already in `out` is not trained again: finished, it is reused; unfinished, its ensemble
    resumes. The remaining runs are packed into new ensembles by shape.
    """
    out = Path(out)
    target = resolve_device(device)
    group_runs(runs)  # refuses a grid that repeats a run before anything is written
    present = {run.run_id: d for d in (layout.ensemble_dirs(out) if out.is_dir() else []) for run in load_runs(d)}
    wanted = [run.run_id for run in runs]
    for run_dir in sorted({present[i] for i in wanted if i in present}):
        if not (run_dir / layout.SUMMARY).is_file():
            EnsembleTrainer(load_runs(run_dir), run_dir, target, progress).fit()
    for name, members in group_runs([r for r in runs if r.run_id not in present]).items():
        EnsembleTrainer(members, out / name, target, progress).fit()
    metrics = load_metrics(out)
    return metrics[metrics.run_id.isin(wanted)].reset_index(drop=True)
