"""`headway train …`: train one configuration or a grid; same-shaped runs share an ensemble."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import parse_values, setting_fields, sweep_options
from headway.model.config import ModelConfig
from headway.presets import scale_settings
from headway.runs.config import TASKS
from headway.tasks.retrieval import RetrievalConfig
from headway.tasks.sorting import SortingConfig
from headway.train.config import TrainConfig

SETTINGS = setting_fields(RetrievalConfig, SortingConfig, ModelConfig, TrainConfig)
SETTINGS.update(seed=int, data_seed=int)


def _help(name: str) -> str:
    return f"{name.replace('_', ' ')}; comma-separated values (or A..B) sweep it"


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Sweep directory (one sub-directory per ensemble); re-running resumes.")
@click.option("--task", type=click.Choice(list(TASKS)), default="retrieval", show_default=True,
              help="retrieval (docs/retrieval-task.md) or sorting (docs/sorting-task.md).")
@click.option("--scale", type=click.Choice(["paper", "cpu"]), default="paper", show_default=True,
              help="Defaults to start from: the task's paper recipe, or a CPU-sized one.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--progress/--no-progress", default=True, help="Progress bar on a terminal.")
@sweep_options(SETTINGS, _help)
def train(out: Path, task: str, scale: str, device: str, progress: bool, **settings: str | None) -> None:
    """Train a task. Every setting takes a comma list; the grid is their product.

    Example: headway train --scale cpu --layers 1,2 --hops 1,2 --seed 0..3 --out runs/depth

    Example: headway train --task sorting --scale cpu --weight-decay 0.005,0 --seed 0..3 --out runs/sort
    """
    from headway.cli.show import summary_table
    from headway.runs.config import expand_grid
    from headway.runs.store import load_summary
    from headway.train.sweep import resolve_device, train_runs

    resolve_device(device)
    base = {**scale_settings(scale, task), "task": task}
    axes = {name: parse_values(name, text, SETTINGS[name]) for name, text in settings.items() if text is not None}
    runs = expand_grid(base, axes)
    click.echo(f"{len(runs)} run(s) → {out}", err=True)
    train_runs(runs, out, device=device, progress=progress)
    click.echo(summary_table(load_summary(out)))
