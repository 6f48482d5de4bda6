"""Where things live in an ensemble's run directory, and atomic writes to it.

    <ensemble>/config.json                     runs (flat configs) trained together, in instance order
    <ensemble>/metrics.parquet                 one row per instance per logged step
    <ensemble>/checkpoints/step_0000100.safetensors   weights of every instance (leading axis E)
    <ensemble>/resume/latest.json              -> the newest complete resume state
    <ensemble>/resume/step_0000100/            weights, optimiser moments, trainer counters, metrics
    <ensemble>/summary.json                    final metrics per run; written when training completes
    <ensemble>/.lock                           held (flock) by the process training it; names that process
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from headway.errors import ConfigError

CONFIG = "config.json"
METRICS = "metrics.parquet"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
RESUME = "resume"
LATEST = "latest.json"
LOCK = ".lock"


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step_{step:07d}.safetensors"


def resume_dir(run_dir: Path, step: int) -> Path:
    return run_dir / RESUME / f"step_{step:07d}"


def write_json(path: Path, data: Any) -> None:
    """Write JSON through a temporary file and an atomic rename, so a kill never leaves half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True))
    os.replace(tmp, path)


def read_json(path: Path) -> Any:
    return json.loads(Path(path).read_text())


def ensemble_dirs(path: Path) -> list[Path]:
    """The ensemble directories at `path`: itself if it is one, else those below it, sorted."""
    path = Path(path)
    if (path / CONFIG).is_file():
        return [path]
    return sorted(p.parent for p in path.glob(f"**/{CONFIG}"))


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock while the block runs, so that two processes never train one ensemble at
    once (the second is refused, naming the first); the system drops the lock when its process dies."""
    path = Path(run_dir) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConfigError(f"{run_dir} is being trained by {holder}; wait for it to finish, or stop it "
                              "(its next run resumes), or choose another output directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
