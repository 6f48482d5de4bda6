"""What the studies' per-ensemble analyses share: grouping instances by task, and recorded times."""

from __future__ import annotations

from pathlib import Path

from headway.runs import layout
from headway.runs.config import RunConfig

DONE = "done.json"  # written next to an ensemble's analysis tables when they are complete


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
