"""Save and load ensemble weights and resume states as safetensors, each file with a checksum.

Every file carries a BLAKE2b digest of its tensors (names, dtypes, shapes, bytes) and its other
metadata in the safetensors header; reading recomputes it, so a truncated or altered file is refused
with its name instead of loading wrong weights (so is a file without one). Before that, the header is
checked against the tensors headway expects there (names, dtypes and shapes derived from the runs' config,
`TensorSpec`), so a file of another shape, its checksum recomputed, is refused too and never decoded.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save

from headway.errors import ConfigError
from headway.limits import MAX_SAFETENSORS_HEADER
from headway.runs import layout
from headway.runs.metrics import metrics_schema, read_metrics
from headway.settings import is_integer

if TYPE_CHECKING:
    from headway.runs.config import RunConfig

RESUME_FILES = ("weights.safetensors", "trainer.safetensors", "metrics.parquet")  # a resume state's folder
TensorSpec = tuple[torch.dtype, tuple[int, ...]]  # what a file must hold under one name: dtype and shape
_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.int16: "I16", torch.int8: "I8", torch.uint8: "U8",
           torch.bool: "BOOL"}  # safetensors' names of the dtypes headway saves
_CHECKPOINT_NAME = re.compile(r"step_([0-9]{7,})\.safetensors")


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


def tensor_spec(tensors: Mapping[str, torch.Tensor], instances: int | None = None) -> dict[str, TensorSpec]:
    """The names, dtypes and shapes of `tensors`, as a file of them must hold them; with `instances`, every
    tensor's leading (instance) axis of that size (a model holding a selection of an ensemble's runs)."""
    return {name: (tensor.dtype, tuple(tensor.shape) if instances is None else (instances, *tensor.shape[1:]))
            for name, tensor in tensors.items()}


def save_tensors(path: Path, tensors: dict[str, torch.Tensor], metadata: dict[str, str] | None = None) -> None:
    """Write tensors (copied to contiguous CPU memory) and their digest atomically (`read_tensors` checks it).
    The file is serialised in memory and written by Python, so a full disk is an OSError naming the file."""
    cpu = {k: v.detach().contiguous().cpu() for k, v in tensors.items()}
    metadata = dict(metadata or {})
    data = save(cpu, metadata={**metadata, layout.DIGEST_KEY: tensor_digest(cpu, metadata)})
    with layout.atomic(path) as tmp:
        tmp.write_bytes(data)


def read_tensors(path: Path, expected: Mapping[str, TensorSpec],
                 metadata: Iterable[str] = ()) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """(CPU tensors, metadata without the digest) of a file from `save_tensors`. Before any tensor is read, its
    header is checked against what headway expects there: at most `MAX_SAFETENSORS_HEADER` bytes, exactly the
    tensors of `expected` with their dtypes and shapes, exactly the `metadata` keys, and nothing else in the
    file; then the digest is verified. A file that is gone, truncated, altered, of another shape or written
    otherwise is refused with one line naming it. Every tensor file headway reads back (weights, resume states,
    a study's analysis tensors) is read through here."""
    if not Path(path).is_file():
        raise layout.missing(path)
    _check_header(path, expected, set(metadata) | {layout.DIGEST_KEY})
    try:
        with safe_open(str(path), framework="pt", device="cpu") as file:
            found = dict(file.metadata() or {})
            tensors = {name: file.get_tensor(name) for name in file.keys()}
    except (SafetensorError, OSError, ValueError, RuntimeError) as err:
        raise layout.damaged(path, f"not a readable safetensors file: {err}") from None
    stored = found.pop(layout.DIGEST_KEY)
    if tensor_digest(tensors, found) != stored:
        raise layout.damaged(path, "its checksum does not match its contents")
    return tensors, found


def _check_header(path: Path, expected: Mapping[str, TensorSpec], keys: set[str]) -> None:
    """Refuse, naming the file, a safetensors file whose header (read alone, its length bounded first) is not
    one of exactly the tensors `expected`, with the metadata `keys`, laid out to the file's end."""
    size = Path(path).stat().st_size
    with open(path, "rb") as handle:
        head = handle.read(8)
        length = int.from_bytes(head, "little") if len(head) == 8 else -1
        if length < 0 or length > MAX_SAFETENSORS_HEADER or 8 + length > size:
            raise layout.damaged(path, f"not a safetensors file headway writes: its header length "
                                       f"{length} is not within the file and {MAX_SAFETENSORS_HEADER} bytes")
        raw = handle.read(length)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise layout.damaged(path, f"not a readable safetensors file: {err}") from None
    header = layout.parse_json(path, text)
    if not isinstance(header, dict):
        raise layout.damaged(path, "not a readable safetensors file: its header is not a JSON object")
    found = header.pop("__metadata__", {})
    if not isinstance(found, dict) or set(found) != keys or not all(isinstance(v, str) for v in found.values()):
        names = sorted(found) if isinstance(found, dict) else found
        raise layout.damaged(path, f"its metadata holds {names}; headway writes {sorted(keys)} there")
    if set(header) != set(expected):
        extra, absent = sorted(set(header) - set(expected)), sorted(set(expected) - set(header))
        raise layout.damaged(path, f"not the tensors headway expects there (unexpected: {extra or 'none'}; "
                                   f"missing: {absent or 'none'})")
    end = 0
    for name, (dtype, shape) in expected.items():
        entry = header[name]
        want = {"dtype": _DTYPES[dtype], "shape": list(shape)}
        if not isinstance(entry, dict) or {k: entry.get(k) for k in want} != want:
            got = {k: entry.get(k) for k in want} if isinstance(entry, dict) else entry
            raise layout.damaged(path, f"tensor {name} is {got}; its runs' config makes it {want}")
        offsets = entry.get("data_offsets")
        nbytes = math.prod(shape) * dtype.itemsize
        if (not isinstance(offsets, list) or len(offsets) != 2 or not all(is_integer(o) for o in offsets)
                or offsets[1] - offsets[0] != nbytes):
            raise layout.damaged(path, f"tensor {name} spans bytes {offsets}, not the {nbytes} its dtype and shape take")
        end = max(end, offsets[1])
    if 8 + length + end != size:
        raise layout.damaged(path, f"{size} bytes, not the {8 + length + end} its header lays out")


def checkpoint_steps(run_dir: Path) -> list[int]:
    """Steps at which weights were saved, ascending. A file in the checkpoints folder named like a checkpoint
    (step_….safetensors) but not as headway names one (the step in at least 7 digits, no more zeros) is refused
    with one line naming it: it is never taken for a step, nor silently left out."""
    folder = Path(run_dir) / layout.CHECKPOINTS
    steps = []
    for path in sorted(folder.glob("step_*.safetensors")):
        match = _CHECKPOINT_NAME.fullmatch(path.name)
        if match is None or layout.checkpoint_path(run_dir, int(match[1])).name != path.name or not path.is_file():
            raise ConfigError(f"{path} is not a checkpoint headway writes (a file named step_ and the step in 7 or "
                              "more digits, e.g. step_0000100.safetensors); move it out of that folder")
        steps.append(int(match[1]))
    return sorted(steps)


def weights_spec(model: torch.nn.Module, instances: int) -> dict[str, TensorSpec]:
    """The tensors a checkpoint of an ensemble of `instances` runs holds, from a model of their config (which may
    hold a selection of them): every parameter, its leading axis the ensemble's instances."""
    return tensor_spec(dict(model.named_parameters()), instances)


def load_checkpoint(run_dir: Path, step: int, runs: list[RunConfig], model: torch.nn.Module,
                    device: torch.device | str = "cpu") -> dict[str, torch.Tensor]:
    """The weights saved at `step` in the ensemble `run_dir` of `runs`, checked against `model` (built from their
    config; `weights_spec`) and their steps, on `device`."""
    path = layout.checkpoint_path(Path(run_dir), step)
    if not 0 <= step <= runs[0].train.steps:
        raise ConfigError(f"{path} is a checkpoint beyond the {runs[0].train.steps} steps its runs train; move it "
                          "out of that folder")
    tensors, metadata = read_tensors(path, weights_spec(model, len(runs)), ("step",))
    if metadata["step"] != str(step):
        raise layout.damaged(path, f"it holds the weights of step {metadata['step']!r}, not of step {step}")
    return {name: tensor.to(device) for name, tensor in tensors.items()}


def save_resume_state(run_dir: Path, step: int, weights: dict[str, torch.Tensor], trainer: dict[str, torch.Tensor],
                      counters: dict, metrics: pd.DataFrame, runs: list[RunConfig]) -> None:
    """Write a complete resume state in its own folder, then point `latest.json` at it. The counters
    ride in the trainer file's checked metadata; the metrics are those of `runs` (`metrics_schema`)."""
    folder = layout.resume_dir(run_dir, step)
    if folder.exists():
        shutil.rmtree(folder)
    save_tensors(folder / "weights.safetensors", weights)
    save_tensors(folder / "trainer.safetensors", trainer, {"counters": json.dumps(counters, sort_keys=True)})
    layout.write_table(folder / "metrics.parquet", metrics, metrics_schema(runs))
    layout.write_json(run_dir / layout.RESUME / layout.LATEST, {"step": step, "dir": folder.name})
    for old in (run_dir / layout.RESUME).glob("step_*"):
        if old.name != folder.name:
            shutil.rmtree(old, ignore_errors=True)


def load_resume_state(run_dir: Path, runs: list[RunConfig], weights: Mapping[str, TensorSpec],
                      trainer: Mapping[str, TensorSpec], device: torch.device | str = "cpu"):
    """(weights, trainer tensors, counters, metrics) of the latest resume state of the ensemble `run_dir` of
    `runs`, or None. Each piece is checked against what the trainer of `runs` saves: the tensors of `weights`
    and `trainer` (`TensorSpec`), a step in 0..steps that `latest.json` names with its folder, counters
    {"step", "optimizer_steps"} that are both that step as integers (the trainer updates once a step), and the
    metrics logged up to it."""
    pointer = run_dir / layout.RESUME / layout.LATEST
    if not pointer.is_file():
        return None
    steps = runs[0].train.steps
    latest = layout.read_json(pointer)
    step = latest.get("step")
    if set(latest) != {"step", "dir"} or not _counter(step, 0, steps) or latest["dir"] != layout.resume_dir(
            run_dir, step).name:
        raise layout.damaged(pointer, f"it holds {_plain(latest)}; headway writes the step (0..{steps}) and its "
                                      "folder there, as {\"step\": 60, \"dir\": \"step_0000060\"}")
    folder = layout.resume_dir(run_dir, step)
    pieces = [folder / name for name in RESUME_FILES]
    gone = next((piece for piece in pieces if not piece.is_file()), None)
    if gone is not None:
        raise ConfigError(f"{gone} is missing from the resume state {pointer} points to; restore it, or delete "
                          f"{run_dir / layout.RESUME} to train this ensemble again from its start")
    tensors, metadata = read_tensors(folder / "trainer.safetensors", trainer, ("counters",))
    counters = layout.parse_json(folder / "trainer.safetensors", metadata["counters"])
    if (not isinstance(counters, dict) or set(counters) != {"step", "optimizer_steps"}
            or not all(_counter(counters[key], step, step) for key in counters)):
        raise layout.damaged(folder / "trainer.safetensors",
                             f"its counters are {_plain(counters)}; headway writes the integers "
                             f"{{\"optimizer_steps\": {step}, \"step\": {step}}} there (one update a step)")
    saved, _ = read_tensors(folder / "weights.safetensors", weights)
    return ({name: tensor.to(device) for name, tensor in saved.items()},
            {name: tensor.to(device) for name, tensor in tensors.items()},
            counters, read_metrics(folder / "metrics.parquet", runs, upto=step))


def _counter(value: Any, low: int, high: int) -> bool:
    """Whether `value` is an integer (not a bool, not a float) in low..high."""
    return is_integer(value) and low <= value <= high


def _plain(value: Any) -> str:
    """`value` as one short line of JSON, for a message."""
    text = json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= 200 else text[:200] + "…"
