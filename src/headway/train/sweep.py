"""Train a list of runs: pack them into ensembles by shape and train each, reusing what is done."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pandas as pd

from headway.compute import ComputeSettings
from headway.errors import TimeLimitReached
from headway.execution import Executor, Job, LocalExecutor
from headway.execution.devices import resolve_device
from headway.runs import layout
from headway.runs.config import RunConfig, group_runs
from headway.runs.cost import training_memory
from headway.runs.store import load_metrics, load_runs
from headway.train.capacity import ensemble_limit
from headway.train.trainer import EnsembleTrainer


def train_ensemble(runs: list[RunConfig], run_dir: Path, device: str, progress: bool,
                   compute: ComputeSettings | None = None, deadline: float | None = None) -> None:
    """One ensemble's job: train `runs` in `run_dir`, resuming from its latest state, on `device` as the
    machine running it resolves it (see `EnsembleTrainer` for `compute` and `deadline`). Past `deadline`
    it does not start (TimeLimitReached), so the jobs after a stopped one stay untouched."""
    TimeLimitReached.check(deadline, f"before training {run_dir.name}")
    EnsembleTrainer(runs, run_dir, resolve_device(device), progress, compute, deadline).fit()


def training_jobs(runs: list[RunConfig], out: Path, device: str, progress: bool,
                  compute: ComputeSettings | None = None, deadline: float | None = None,
                  max_ensemble: int | None = None, sized: bool = False) -> list[Job]:
    """The jobs that bring every run of `runs` to its last step under `out`: ensembles already there
    and unfinished resume as they are (finished ones are skipped); the other runs are packed into new
    ensembles of at most `max_ensemble` runs, or, when `sized`, of at most what `device` (resolved on this
    machine) is measured to hold (`headway.train.capacity`)."""
    limit = ensemble_limit(resolve_device(device) if sized and max_ensemble is None else None, max_ensemble, compute)
    group_runs(runs)  # refuses a grid that repeats a run before anything is written
    present = {run.run_id: d for d in (layout.ensemble_dirs(out) if out.is_dir() else []) for run in load_runs(d)}
    ensembles = {run_dir: load_runs(run_dir) for run_dir in sorted({present[r.run_id] for r in runs
                                                                    if r.run_id in present})
                 if not (run_dir / layout.SUMMARY).is_file()}
    new = group_runs([run for run in runs if run.run_id not in present], limit)
    ensembles |= {out / name: members for name, members in new.items()}
    return [Job(run_dir.name, train_ensemble, (members, run_dir, device, progress, compute, deadline),
                training_memory(members))
            for run_dir, members in ensembles.items()]


def train_runs(runs: list[RunConfig], out: Path | str, device: str = "auto", progress: bool = True,
               executor: Executor | None = None, compute: ComputeSettings | None = None,
               deadline: float | None = None, max_ensemble: int | None = None,
               on_start: Callable[[], None] | None = None) -> pd.DataFrame:
    """Train every run under `out` (one sub-directory per ensemble); return the metrics of `runs`.

    A run already in `out` is not trained again: finished, it is reused; unfinished, its ensemble
    resumes. The remaining runs are packed into new ensembles by shape. `executor` runs the
    ensembles (default: one after another in this process; see `headway.execution`); `compute` and
    `deadline` are handed to every ensemble's trainer. A new ensemble holds at most `max_ensemble` runs;
    left None, with the local executor, a shape whose runs might not fit the device together is split
    into ensembles of the measured capacity (`headway.train.capacity`; on a cluster only `max_ensemble`
    splits, as the machines that train are not this one). `on_start` is called once the jobs are known, before the
    first starts: what is checked before any training (the grid, the ensembles already in `out`) has passed.
    """
    out, executor = Path(out), executor or LocalExecutor()
    job_device = executor.prepare(device)
    jobs = training_jobs(runs, out.resolve(), job_device, progress and executor.jobs_show_progress, compute, deadline,
                         max_ensemble, sized=isinstance(executor, LocalExecutor))
    if on_start is not None:
        on_start()
    executor.run(jobs, "training", out, job_device, progress)
    metrics = load_metrics(out)
    wanted = [run.run_id for run in runs]
    return metrics[metrics.run_id.isin(wanted)].reset_index(drop=True)
