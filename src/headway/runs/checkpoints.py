"""Save and load ensemble weights and resume states as safetensors, each file with a checksum.

Every file carries a BLAKE2b digest of its tensors (names, dtypes, shapes, bytes) and its other
metadata in the safetensors header; reading recomputes it, so a truncated or altered file is refused
with its name instead of loading wrong weights (so is a file without one).
"""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pandas as pd
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from headway.errors import ConfigError
from headway.runs import layout

RESUME_FILES = ("weights.safetensors", "trainer.safetensors", "metrics.parquet")  # a resume state's folder


def tensor_digest(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> str:
    """BLAKE2b over every CPU tensor (name, dtype, shape, bytes) and metadata entry, in name order."""
    digest = hashlib.blake2b(digest_size=16)
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}|".encode())
        digest.update(tensor.contiguous().reshape(-1).view(torch.uint8).numpy())
    for key in sorted(metadata):
        digest.update(f"{key}={metadata[key]}|".encode())
    return digest.hexdigest()


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write tensors (copied to contiguous CPU memory) and their digest atomically (`read_tensors` checks it).
    The file is serialised in memory and written by Python, so a full disk is an OSError naming the file."""
    cpu = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    metadata = dict(metadata or {})
    data = save(cpu, metadata={**metadata, layout.DIGEST_KEY: tensor_digest(cpu, metadata)})
    with layout.atomic(path) as tmp:
        tmp.write_bytes(data)


def read_tensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(CPU tensors, metadata without the digest) of a file from `save_tensors`, its digest verified: a file
    that is gone, truncated, altered or written otherwise is refused with one line naming it. Every tensor
    file headway reads back (weights, resume states, a study's analysis tensors) is read through here."""
    if not Path(path).is_file():
        raise layout.missing(path)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as file:
            metadata = dict(file.metadata() or {})
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise layout.damaged(path, f"not a readable safetensors file: {err}") from None
    expected = metadata.pop(layout.DIGEST_KEY, None)
    if expected is None:
        raise layout.damaged(path, f"no checksum ({layout.DIGEST_KEY}): written by an older headway, or altered")
    if tensor_digest(tensors, metadata) != expected:
        raise layout.damaged(path, "its checksum does not match its contents")
    return tensors, metadata


def load_tensors(path: Path, device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a file from `save_tensors`, checked, on `device`."""
    tensors, _ = read_tensors(path)
    return {name: tensor.to(device) for name, tensor in tensors.items()}


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps at which weights were saved, ascending."""
    folder = Path(run_dir) / layout.CHECKPOINTS
    return sorted(int(p.stem.split("_")[1]) for p in folder.glob("step_*.safetensors"))


def save_resume_state(run_dir: Path, step: int, weights: dict[str, torch.Tensor],
                      trainer: dict[str, torch.Tensor], counters: dict, metrics: pd.DataFrame) -> None:
    """Write a complete resume state in its own folder, then point `latest.json` at it. The counters
    ride in the trainer file's checked metadata."""
    folder = layout.resume_dir(run_dir, step)
    if folder.exists():
        shutil.rmtree(folder)
    save_tensors(folder / "weights.safetensors", weights)
    save_tensors(folder / "trainer.safetensors", trainer, {"counters": json.dumps(counters, sort_keys=True)})
    layout.write_table(folder / "metrics.parquet", metrics)
    layout.write_json(run_dir / layout.RESUME / layout.LATEST, {"step": step, "dir": folder.name})
    for old in (run_dir / layout.RESUME).glob("step_*"):
        if old.name != folder.name:
            shutil.rmtree(old, ignore_errors=True)


def load_resume_state(run_dir: Path, device: torch.device | str = "cpu"):
    """(weights, trainer tensors, counters, metrics) of the latest resume state, or None."""
    pointer = run_dir / layout.RESUME / layout.LATEST
    if not pointer.is_file():
        return None
    folder = run_dir / layout.RESUME / str(layout.read_json(pointer).get("dir"))
    pieces = [folder / name for name in RESUME_FILES]
    gone = next((piece for piece in pieces if not piece.is_file()), None)
    if gone is not None:
        raise ConfigError(f"{gone} is missing from the resume state {pointer} points to; restore it, or delete "
                          f"{run_dir / layout.RESUME} to train this ensemble again from its start")
    trainer, metadata = read_tensors(folder / "trainer.safetensors")
    if "counters" not in metadata:
        raise layout.damaged(folder / "trainer.safetensors", "no step counters in its metadata")
    return (load_tensors(folder / "weights.safetensors", device),
            {name: tensor.to(device) for name, tensor in trainer.items()},
            json.loads(metadata["counters"]),
            layout.read_table(folder / "metrics.parquet"))
