"""Read a run directory (one ensemble) or a sweep directory (many) back as pandas and models."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from headway.errors import ConfigError
from headway.model.single import SingleModel
from headway.model.transformer import EnsembleTransformer
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.metrics import metrics_schema, read_metrics
from headway.settings import is_integer


def _ensembles(path: Path | str) -> list[Path]:
    dirs = layout.ensemble_dirs(Path(path))
    if not dirs:
        raise ConfigError(f"{path} holds no runs (no {layout.CONFIG} in it or below it)")
    return dirs


def load_runs(path: Path | str) -> list[RunConfig]:
    """The run configs at `path`, ensemble by ensemble, in instance order; a config.json that does not hold
    valid runs (edited by hand, even with its checksum recomputed) is refused, naming it."""
    return [run for d in _ensembles(path) for run in _configs(d / layout.CONFIG)]


def _configs(path: Path) -> list[RunConfig]:
    """The runs an ensemble's config.json lists, each checked as a run, and together as one ensemble: of one
    shape (`RunConfig.ensemble_key`), none repeated."""
    flats = _records(path, layout.read_json(path))
    try:
        runs = [RunConfig.from_flat(flat) for flat in flats]
    except (ConfigError, TypeError, ValueError) as err:
        raise layout.damaged(path, f"it does not hold valid runs: {err}") from None
    shape = runs[0].ensemble_key()
    other = next((e for e, run in enumerate(runs) if run.ensemble_key() != shape), None)
    if other is not None:
        raise layout.damaged(path, f"its run {other} differs in shape from run 0, so they cannot be one ensemble")
    ids = [run.run_id for run in runs]
    if len(set(ids)) != len(ids):
        raise layout.damaged(path, "it lists one run twice")
    return runs


def _records(path: Path, data: dict) -> list[dict]:
    """The non-empty list of objects under "runs" in the JSON `data` read from `path`."""
    runs = data.get("runs")
    if not isinstance(runs, list) or not runs or not all(isinstance(run, dict) for run in runs):
        raise layout.damaged(path, 'no list of runs under "runs"')
    return runs


def finished_metrics(run_dir: Path) -> pd.DataFrame:
    """The metrics of an ensemble whose summary says training finished; refused, naming the file, when gone."""
    metrics = run_dir / layout.METRICS
    if not metrics.is_file():
        raise ConfigError(f"{metrics} is missing although {layout.SUMMARY} beside it says training finished; "
                          f"restore it, or delete {run_dir} to train that ensemble again")
    runs = load_runs(run_dir)
    return read_metrics(metrics, runs, upto=runs[0].train.steps)


def load_metrics(path: Path | str) -> pd.DataFrame:
    """Every logged metric of every run at `path`, one row per run per logged step, with the run's
    flat config as columns (so `df.groupby(["layers", "hops"])` works directly)."""
    frames = []
    for d in _ensembles(path):
        if (d / layout.SUMMARY).is_file():
            metrics = finished_metrics(d)
        elif (d / layout.METRICS).is_file():
            metrics = read_metrics(d / layout.METRICS, load_runs(d))
        else:  # nothing logged yet
            continue
        configs = pd.DataFrame([run.flat() for run in load_runs(d)])
        configs["instance"] = range(len(configs))
        configs["ensemble"] = d.name
        frames.append(metrics.merge(configs, on="instance", how="left"))
    if not frames:
        return pd.DataFrame()
    return pd.concat(frames, ignore_index=True)


def final_metrics(metrics: pd.DataFrame) -> pd.DataFrame:
    """One row per run of a metrics table: the row of its last logged step."""
    last = metrics.groupby("run_id").step.transform("max")
    return metrics[metrics.step == last].reset_index(drop=True)


def load_summary(path: Path | str) -> list[dict]:
    """Per run: `config` (flat), `final` metrics (last logged step) and whether training completed."""
    out = []
    for d in _ensembles(path):
        runs = load_runs(d)
        summary_file = d / layout.SUMMARY
        if summary_file.is_file():
            finals, complete = _finals(summary_file, runs), True
        else:
            finals, complete = _last_rows(d, runs), False
        for e, (run, final) in enumerate(zip(runs, finals)):
            out.append({"ensemble": d.name, "instance": e, "complete": complete,
                        "config": run.flat(), "final": final})
    return out


def _finals(path: Path, runs: list[RunConfig]) -> list[dict]:
    """The final metrics a summary.json holds for each of `runs`, checked against what the trainer writes there:
    each record's run id, and the columns of its metrics (`metrics_schema`, less instance and run id) with
    diverged_step, each value of its column's kind (a float, or null for NaN; diverged_step an integer or null)."""
    records = _records(path, layout.read_json(path))
    kinds = {name: kind for name, kind in metrics_schema(runs).columns if name not in ("instance", "run_id")}
    kinds["diverged_step"] = "int?"
    if len(records) != len(runs):
        raise layout.damaged(path, f"it holds {len(records)} runs; its {layout.CONFIG} lists {len(runs)}")
    for e, (record, run) in enumerate(zip(records, runs)):
        final = record.get("final")
        if record.get("run_id") != run.run_id or not isinstance(final, dict) or set(final) != set(kinds):
            raise layout.damaged(path, f"its run {e} does not hold the final metrics of run {run.run_id} "
                                       f"({', '.join(kinds)})")
        wrong = next((name for name, kind in kinds.items() if not _of_kind(final[name], kind)), None)
        if wrong is not None:
            raise layout.damaged(path, f"its run {e} holds {wrong} = {final[wrong]!r}, not a {kinds[wrong]}")
    return [record["final"] for record in records]


def _of_kind(value: object, kind: str) -> bool:
    """Whether a JSON value is of a metrics column's kind ("int?": an integer or null)."""
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "float":
        return value is None or (isinstance(value, int | float) and not isinstance(value, bool))
    return is_integer(value) or (kind == "int?" and value is None)


def _last_rows(run_dir: Path, runs: list[RunConfig]) -> list[dict]:
    """Per run of `runs`, its row at the last step logged so far ({} before any)."""
    n = len(runs)
    metrics_file = run_dir / layout.METRICS
    if not metrics_file.is_file():
        return [{} for _ in range(n)]
    metrics = read_metrics(metrics_file, runs)
    if not len(metrics):
        return [{} for _ in range(n)]
    last = metrics[metrics.step == metrics.step.max()].set_index("instance")
    return [{k: plain_value(v) for k, v in last.loc[e].items() if k != "run_id"}
            if e in last.index else {} for e in range(n)]


def plain_value(value):
    """A numpy scalar as the Python value JSON expects; NaN as None."""
    value = value.item() if hasattr(value, "item") else value
    return None if isinstance(value, float) and math.isnan(value) else value


def find_run(path: Path | str, run_id: str) -> tuple[Path, int]:
    """(ensemble directory, instance) of the run `run_id` anywhere at `path` (a sweep or one ensemble)."""
    for d in _ensembles(path):
        ids = [run.run_id for run in load_runs(d)]
        if run_id in ids:
            return d, ids.index(run_id)
    raise ConfigError(f"run_id {run_id!r} is not in {path}; `headway show {path}` lists its runs")


def load_model(run_dir: Path | str, instances: int | Sequence[int] | None = None, step: int | None = None,
               device: torch.device | str = "cpu", run_id: str | None = None) -> EnsembleTransformer:
    """The weights saved at `step` (default: the last) of one ensemble directory, for all its
    instances or a selection (an int, numpy ints included, gives a one-instance ensemble); or, with
    `run_id`, the one-instance ensemble of that run, found anywhere under `run_dir` (a sweep)."""
    if run_id is not None:
        if instances is not None:
            raise ConfigError("give instances or run_id, not both")
        run_dir, instances = find_run(run_dir, run_id)
    run_dir = Path(run_dir)
    if not (run_dir / layout.CONFIG).is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no {layout.CONFIG})")
    runs = load_runs(run_dir)
    step = _saved_step(run_dir, step)
    selection = list(range(len(runs))) if instances is None else (
        [instances] if is_integer(instances) else list(instances))
    bad = [i for i in selection if not is_integer(i) or not 0 <= i < len(runs)]
    if bad:
        raise ConfigError(f"instance(s) {[plain_value(i) for i in bad]} out of range; this run directory has "
                          f"{len(runs)} instances")
    task, model_cfg = runs[0].task, runs[0].model
    model = EnsembleTransformer(model_cfg, task.d_vocab, task.n_ctx, task.d_out, len(selection), device,
                                task.n_slots)
    model.load_instances(load_checkpoint(run_dir, step, runs, model), [int(i) for i in selection])
    return model


def load_weights(run_dir: Path | str, step: int | None = None) -> dict[str, torch.Tensor]:
    """Every instance's weights saved at `step` (default: the last) in the ensemble directory `run_dir`, by
    parameter name with the instance axis first, checked against its runs' config (`load_checkpoint`)."""
    run_dir = Path(run_dir)
    runs = load_runs(run_dir)
    task = runs[0].task
    one = EnsembleTransformer(runs[0].model, task.d_vocab, task.n_ctx, task.d_out, 1)  # the shapes, per instance
    return load_checkpoint(run_dir, _saved_step(run_dir, step), runs, one)


def _saved_step(run_dir: Path, step: int | None) -> int:
    """`step` (default: the last) if the ensemble at `run_dir` saved its weights then; refused otherwise."""
    steps = checkpoint_steps(run_dir)
    if not steps:
        raise ConfigError(f"{run_dir} has no checkpoints yet")
    step = steps[-1] if step is None else step
    if step not in steps:
        raise ConfigError(f"no checkpoint at step {step} in {run_dir}; saved steps: {steps}")
    return step


def load_single(path: Path | str, instance: int | None = None, step: int | None = None, run_id: str | None = None,
                device: torch.device | str = "cpu") -> SingleModel:
    """One run as a single model without the instance axis (`headway.model.single`, TransformerLens' habits):
    instance `instance` (default 0) of the ensemble directory `path`, or the run `run_id` anywhere under `path`,
    at checkpoint `step` (default: the last); its `run` is the RunConfig."""
    if run_id is not None:
        if instance is not None:
            raise ConfigError("give instance or run_id, not both")
        path, instance = find_run(path, run_id)
    instance = 0 if instance is None else instance
    model = load_model(path, instances=instance, step=step, device=device)
    return SingleModel(model, load_runs(path)[int(instance)])
