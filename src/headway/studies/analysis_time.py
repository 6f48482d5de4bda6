"""The seconds an ensemble's analysis took over all its legs. A study stopped during an analysis (a time limit, a
kill) and run again resumes from the parts it saved; each leg notes when it started in `LEGS`, and the next leg
counts the stopped one up to its newest saved file, so done.json's seconds are the whole analysis, not its last leg."""

from __future__ import annotations

import math
import time
from pathlib import Path

from headway.runs import layout

LEGS = "legs.json"  # in an ensemble's analysis folder while its analysis is unfinished


def recorded_seconds(path: Path, key: str) -> float:
    """The seconds a checked JSON file records under `key` (0 when absent): a number ≥ 0, else it is refused."""
    value = layout.read_json(path).get(key, 0.0)
    if not isinstance(value, int | float) or isinstance(value, bool) or not (math.isfinite(value) and value >= 0):
        raise layout.damaged(path, f"{key} = {value!r}; headway writes a number of seconds there")
    return float(value)


def begin_leg(folder: Path) -> float:
    """Start a leg of the analysis in `folder`: the seconds its earlier, unfinished legs took (0 for a first leg),
    each counted from its start to the newest file it saved there (work after that was lost and is redone)."""
    path, earlier = folder / LEGS, 0.0
    if path.is_file():
        started, before = recorded_seconds(path, "started"), recorded_seconds(path, "before")
        newest = max((p.stat().st_mtime for p in folder.rglob("*") if p.is_file() and p.name != LEGS),
                     default=started)
        earlier = before + max(0.0, newest - started)
    layout.write_json(path, {"started": time.time(), "before": round(earlier, 2)})
    return earlier


def end_legs(folder: Path) -> None:
    """The analysis in `folder` finished (its seconds are in done.json): a later analysis there starts afresh."""
    (folder / LEGS).unlink(missing_ok=True)
