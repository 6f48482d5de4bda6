"""`headway train …`: train one configuration or a grid; same-shaped runs share an ensemble.

Its options come from the task registry and the model and training configs: every setting of every
registered task is an option, and `--task` / `--scale` read the registry."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import (OutputPath, check_compute, check_training_memory, compute_options,
                                 executor_options, memory_check_options, parse_values, pop_compute, pop_deadline,
                                 pop_executor, renamed_options, sweep_options, time_limit_options)
from headway.runs.config import flat_setting_types
from headway.runs.owner import TRAIN, claim
from headway.tasks.registry import DEFAULT_TASK, TASKS, scale_settings

SETTINGS = flat_setting_types()


def _help(name: str) -> str:
    return f"{name.replace('_', ' ')}; comma-separated values (or A..B) sweep it"


def _task_help() -> str:
    return "; ".join(f"{cls.name}: {cls.summary}" for cls in TASKS.classes())


def _scale_help() -> str:
    """Every registered task's named scales, a new task's included."""
    scales = "; ".join(f"{cls.name}: {', '.join(cls.scales)}" for cls in TASKS.classes())
    return f"Defaults to start from: a named scale of the task ({scales}; default: the task's first)."


@click.command()
@click.option("--out", type=OutputPath(folder=True, kind=TRAIN), required=True,
              help="Sweep directory (one sub-directory per ensemble); re-running resumes.")
@click.option("--task", type=click.Choice(TASKS.names()), default=DEFAULT_TASK, show_default=True, help=_task_help())
@click.option("--scale", default=None, help=_scale_help())
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--progress/--no-progress", default=True, help="Progress bar on a terminal.")
@click.option("--max-ensemble", type=int, default=None, metavar="N",
              help="At most N runs per new ensemble [default: as many as the device is measured to hold].")
@executor_options
@compute_options
@time_limit_options
@memory_check_options
@sweep_options(SETTINGS, _help)
@renamed_options({"--seeds": "--seed (a comma list or A..B sweeps it)"})
def train(out: Path, task: str, scale: str | None, device: str, progress: bool, max_ensemble: int | None,
          memory_check: bool, **settings: str | None) -> None:
    """Train a task. Every setting takes a comma list; the grid is their product.

    Example: headway train --scale cpu --layers 1,2 --hops 1,2 --seed 0..3 --out runs/depth

    Example: headway train --task sorting --scale cpu --weight-decay 0.005,0 --seed 0..3 --out runs/sort

    Example: headway train --scale cpu --hops 1..4 --executor ray --ray-address 10.0.0.5:6379 --out /shared/runs
    """
    from headway.cli.show import summary_table
    from headway.runs.config import expand_grid
    from headway.runs.store import load_summary
    from headway.train.capacity import check_max_ensemble
    from headway.train.sweep import train_runs

    check_max_ensemble(max_ensemble)
    executor = pop_executor(settings)
    compute = pop_compute(settings)
    deadline = pop_deadline(settings)
    executor.prepare(device)
    check_compute(compute, executor, device)
    base = scale_settings(scale, task)
    axes = {name: parse_values(name, text, SETTINGS[name]) for name, text in settings.items() if text is not None}
    runs = expand_grid(base, axes)
    check_training_memory(runs, executor, device, memory_check)

    def start() -> None:  # the command is accepted: its folder is claimed, and the work announced
        claim(out, TRAIN)
        click.echo(f"{len(runs)} run(s) → {out}", err=True)

    train_runs(runs, out, device=device, progress=progress, executor=executor, compute=compute,
               deadline=deadline, max_ensemble=max_ensemble, on_start=start)
    click.echo(summary_table(load_summary(out)))
