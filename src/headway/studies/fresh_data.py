"""Confirmations on fresh data: a plan option giving each seed its own training pool and validation set.

Without it every run of a study draws from `data_seed` 0, so two seeds differ in their initialisation and batch
order only; with it `data_seed` is the run's seed, so a confirmation on fresh seeds is one on fresh data too (the
run ids change with it). One field and one rule, shared by every study that offers `--fresh-data`.
"""

from __future__ import annotations

from dataclasses import field, replace
from typing import Any

from headway.runs.config import RunConfig
from headway.studies.base import axis

FRESH_DATA_HELP = ("Each seed trains and validates on data of its own (data_seed = seed), so a confirmation varies the "
                   "data as well as the initialisation; off: every run draws from data_seed 0 (alone: true).")


def fresh_data_field() -> Any:
    """The plan field behind `--fresh-data` (off by default, as every committed result was trained)."""
    return field(default=False, metadata=axis(FRESH_DATA_HELP))


def on_fresh_data(runs: list[RunConfig], fresh: bool) -> list[RunConfig]:
    """`runs` each on its seed's own data when `fresh`, else as they are (data_seed 0)."""
    return [replace(run, data_seed=run.seed) for run in runs] if fresh else runs


def data_line(fresh: bool) -> str:
    """What `--dry-run` says about the runs' data."""
    return ("data: each seed its own (data_seed = seed)" if fresh
            else "data: every run draws from data_seed 0 (--fresh-data gives each seed its own)")
