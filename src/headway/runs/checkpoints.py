"""Save and load ensemble weights and resume states as safetensors."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from headway.runs import layout


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write tensors (copied to contiguous CPU memory) atomically."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    save_file({k: v.detach().contiguous().cpu() for k, v in tensors.items()}, str(tmp), metadata=metadata)
    os.replace(tmp, path)


def load_tensors(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    return load_file(str(path), device=str(device))


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps at which weights were saved, ascending."""
    folder = Path(run_dir) / layout.CHECKPOINTS
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("step_*.safetensors"))


def save_resume_state(run_dir: Path, step: int, weights: dict[str, torch.Tensor],
                      trainer: dict[str, torch.Tensor], counters: dict, metrics: pd.DataFrame) -> None:
    """Write a complete resume state in its own folder, then point `latest.json` at it."""
    folder = layout.resume_dir(run_dir, step)
    if folder.exists():
        shutil.rmtree(folder)
    save_tensors(folder / "weights.safetensors", weights)
    save_tensors(folder / "trainer.safetensors", trainer)
    metrics.to_parquet(folder / "metrics.parquet", index=False)
    layout.write_json(folder / "counters.json", counters)
    layout.write_json(run_dir / layout.RESUME / layout.LATEST, {"step": step, "dir": folder.name})
    for old in (run_dir / layout.RESUME).glob("step_*"):
        if old.name != folder.name:
            shutil.rmtree(old, ignore_errors=True)


def load_resume_state(run_dir: Path, device: torch.device | str = "cpu"):
    """(weights, trainer tensors, counters, metrics) of the latest resume state, or None."""
    pointer = run_dir / layout.RESUME / layout.LATEST
    if not pointer.is_file():
        return None
    folder = run_dir / layout.RESUME / layout.read_json(pointer)["dir"]
    return (load_tensors(folder / "weights.safetensors", device),
            load_tensors(folder / "trainer.safetensors", device),
            layout.read_json(folder / "counters.json"),
            pd.read_parquet(folder / "metrics.parquet"))
