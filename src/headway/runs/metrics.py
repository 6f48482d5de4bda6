"""An ensemble's metrics table: the columns its trainer logs, the steps it logs them at, and reading one back
checked against the ensemble's runs (metrics.parquet, and the copy in each resume state)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from headway.runs import layout
from headway.runs.schema import TableSchema

if TYPE_CHECKING:
    import pandas as pd

    from headway.recipe import TrainConfig
    from headway.runs.config import RunConfig


# The float columns of a metrics table that are not accuracies: never negative.
_NON_NEGATIVE = ("train_loss", "val_loss", "grad_norm")


def metrics_schema(runs: list[RunConfig]) -> TableSchema:
    """The columns, in order, of the metrics the trainer logs for `runs` (one ensemble: one task): the step, the
    instance and its run id, the losses, the task's accuracy columns on the validation set (and on the training
    pool where the task evaluates it), the gradient norm and whether the instance diverged."""
    task = runs[0].task
    zeros = [0.0] * task.n_targets
    accuracies = [*task.accuracy_columns(zeros, 0.0, "val")]
    if task.evaluates_training_pool:
        accuracies += [*task.accuracy_columns(zeros, 0.0, "train")]
    return TableSchema.of({"step": "int", "instance": "int", "run_id": "str", "train_loss": "float",
                           "val_loss": "float", **dict.fromkeys(accuracies, "float"), "grad_norm": "float",
                           "diverged": "bool"}, ordered=True)


def is_logged(train: TrainConfig, step: int) -> bool:
    """Whether the trainer logs metrics at `step`: step 0, every `eval_every` steps, and the last."""
    return step % train.eval_every == 0 or step == train.steps


def logged_count(train: TrainConfig, step: int) -> int:
    """How many steps up to `step` (included) the trainer logs at (`is_logged`)."""
    return step // train.eval_every + 1 + int(step == train.steps and step % train.eval_every != 0)


def read_metrics(path: Path, runs: list[RunConfig], upto: int | None = None) -> pd.DataFrame:
    """The metrics table at `path` of the ensemble of `runs`, checked against them: its columns (`metrics_schema`),
    at most the rows they log before decoding, then every row an instance's and a logged step's, with the
    instance's run id, each once, and every logged step up to the last (`upto`, for a resume state: up to that
    step) present for every instance. Anything else is refused, naming the file."""
    train, n = runs[0].train, len(runs)
    limit = train.steps if upto is None else upto
    most = n * logged_count(train, limit)
    schema = metrics_schema(runs)
    frame = layout.read_table(path, schema, max_rows=most)
    if len(frame) == 0:
        if upto is not None:
            raise layout.damaged(path, f"no rows; a resume state at step {upto} holds {most}")
        return frame
    steps, instances = frame.step.to_numpy(), frame.instance.to_numpy()
    bad = frame[(instances < 0) | (instances >= n) | (steps < 0) | (steps > limit)]
    if len(bad):
        row = bad.iloc[0]
        raise layout.damaged(path, f"a row of step {row.step}, instance {row.instance}; it holds steps 0..{limit} of "
                                   f"instances 0..{n - 1}")
    unlogged = sorted({int(step) for step in steps if not is_logged(train, int(step))})
    if unlogged:
        raise layout.damaged(path, f"rows of step(s) {unlogged[:5]}, which its runs do not log (every "
                                   f"{train.eval_every} steps and step {train.steps})")
    # Values the trainer can log: accuracies are shares in [0, 1], losses and gradient norms are >= 0 (a diverged
    # instance's may be NaN or infinite); a forged table with a recomputed digest holds anything else.
    shares = [name for name, kind in schema.columns if kind == "float" and name not in _NON_NEGATIVE]
    for name, low, high in [(name, 0.0, 1.0) for name in shares] + [(name, 0.0, math.inf) for name in _NON_NEGATIVE]:
        values = frame[name].to_numpy(dtype=float)
        outside = ~np.isnan(values) & ((values < low) | (values > high))
        if outside.any():
            raise layout.damaged(path, f"{name} = {float(values[outside][0])!r}, outside {low:g}..{high:g}, which its "
                                       "trainer logs")
    ids = [runs[int(i)].run_id for i in instances]
    if (frame.run_id.to_numpy() != ids).any():
        raise layout.damaged(path, "a row whose run_id is not its instance's")
    if frame.duplicated(["step", "instance"]).any():
        raise layout.damaged(path, "a step of an instance logged twice")
    last = int(steps.max()) if upto is None else upto
    if len(frame) != n * logged_count(train, last):
        raise layout.damaged(path, f"{len(frame)} rows; its {n} runs log {n * logged_count(train, last)} up to "
                                   f"step {last}")
    return frame
