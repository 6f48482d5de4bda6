"""SGLD calibration on trained runs: `calibrate_sgld` at chosen checkpoints of an ensemble directory, each
group of instances that share a training pool sampled on that pool with the runs' own loss, loaded as the LLC
trace loads them (`headway.analysis.llc.trace`), so that the setting chosen is checked on the very models and
data whose LLC it will estimate. `headway llc calibrate` runs it."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
import torch

from headway.analysis.llc import SGLDSettings
from headway.analysis.llc.calibration import calibrate_sgld
from headway.analysis.llc.trace import training_pool
from headway.errors import ConfigError
from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.store import load_model, load_runs
from headway.tasks.objective import run_loss

STEP_NAMES = ("first", "middle", "last")  # checkpoints named by their place among the saved ones


def pick_steps(run_dir: Path, wanted: Sequence[str | int]) -> list[int]:
    """The saved steps of the ensemble at `run_dir` that `wanted` names ("first", "middle", "last" or step
    numbers), ascending and each once; a step with no checkpoint is refused, naming the saved ones."""
    saved = checkpoint_steps(run_dir)
    if not saved:
        raise ConfigError(f"{run_dir} has no checkpoints yet; train it first")
    named = {"first": saved[0], "middle": saved[len(saved) // 2], "last": saved[-1]}
    steps = [named.get(step, step) for step in wanted]
    missing = [step for step in steps if step not in saved]
    if missing:
        raise ConfigError(f"--steps {missing[0]} has no checkpoint in {run_dir}; saved steps: "
                          f"{', '.join(map(str, saved))} (or first, middle, last)")
    return sorted(set(steps))


def pool_groups(runs: list[RunConfig], instances: Sequence[int]) -> list[list[int]]:
    """`instances` grouped by the training pool and loss they were trained on (task, data seed, pool sizes and
    loss): each group is sampled on one pool, as `llc_trace` requires of the instances it traces."""
    groups: dict[str, list[int]] = {}
    for index in instances:
        run = runs[index]
        key = repr((run.task, run.data_seed, run.train.train_size, run.train.val_size, run.train.loss))
        groups.setdefault(key, []).append(index)
    return list(groups.values())


def check_instances(run_dir: Path, runs: list[RunConfig], instances: Sequence[int] | None) -> list[int]:
    """`instances` of the ensemble at `run_dir` (None: all of them), each in range, or a one-line refusal."""
    if instances is None:
        return list(range(len(runs)))
    bad = [i for i in instances if not 0 <= i < len(runs)]
    if bad:
        raise ConfigError(f"--instances {bad[0]} is not in {run_dir}; it holds instances 0..{len(runs) - 1}")
    return list(instances)


def check_pools(run_dir: Path, runs: list[RunConfig], instances: Sequence[int], batch_size: int) -> None:
    """Refuse a batch larger than the training pool of some of `instances` (SGLD draws batches from the pool
    without replacement), naming the pool's size; the pools are drawn to be measured, once per group."""
    for group in pool_groups(runs, instances):
        size = training_pool(runs[group[0]], 1, "cpu")[0].shape[1]
        if batch_size > size:
            raise ConfigError(f"--batch-size {batch_size} is larger than the training pool of {size} examples of "
                              f"{run_dir}; use at most {size}")


def calibrate_ensemble(run_dir: Path, instances: Sequence[int], steps: Sequence[int], base: SGLDSettings,
                       lrs: Sequence[float], batch_sizes: Sequence[int], localizations: Sequence[float],
                       device: torch.device | str = "cpu", progress: bool = False) -> pd.DataFrame:
    """`calibrate_sgld` over lrs × batch_sizes × localizations (each ε for base's sampling time) of the
    `instances` of the ensemble at `run_dir` at each of `steps` (saved checkpoints: `pick_steps`), every group of
    `pool_groups` on its own training pool with its own loss. Rows: ensemble (the folder's name), step,
    instance (in the ensemble), run_id, seed, then calibrate_sgld's columns after its instance."""
    runs = load_runs(run_dir)
    parts = []
    for group in pool_groups(runs, instances):
        first = runs[group[0]]
        model = load_model(run_dir, group, device=device)
        tokens, targets = training_pool(first, len(group), device)
        loss = run_loss(first.task, first.train.loss)
        for step in steps:
            model.load_instances(load_checkpoint(run_dir, step, runs, model), group)
            table = calibrate_sgld(model, loss, tokens, targets, base, lrs, batch_sizes, localizations,
                                   progress=progress, desc=f"{run_dir.name} step {step}")
            members = [group[i] for i in table.instance]
            table = table.drop(columns="instance")
            table.insert(0, "seed", [runs[i].seed for i in members])
            table.insert(0, "run_id", [runs[i].run_id for i in members])
            table.insert(0, "instance", members)
            table.insert(0, "step", step)
            table.insert(0, "ensemble", run_dir.name)
            parts.append(table)
    return pd.concat(parts, ignore_index=True)
