"""Train a list of runs: pack them into ensembles by shape and train each, skipping finished ones."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import torch

from headway.runs import layout
from headway.runs.config import RunConfig, group_runs
from headway.runs.store import load_metrics
from headway.train.trainer import EnsembleTrainer


def resolve_device(device: str) -> torch.device:
    """`auto` picks the GPU when there is one, else the CPU."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def train_runs(runs: list[RunConfig], out: Path | str, device: str = "auto", progress: bool = True) -> pd.DataFrame:
    """Train every run under `out` (one sub-directory per ensemble) and return all metrics."""
    out = Path(out)
    groups = group_runs(runs)
    index_path = out / "sweep.json"
    index = layout.read_json(index_path) if index_path.is_file() else {"ensembles": {}}
    index["ensembles"].update({name: [r.run_id for r in members] for name, members in groups.items()})
    layout.write_json(index_path, index)
    target = resolve_device(device)
    for name, members in groups.items():
        EnsembleTrainer(members, out / name, target, progress).fit()
    return load_metrics(out)
