"""`headway train …`: train one configuration or a grid; same-shaped runs share an ensemble."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import parse_values, setting_fields, sweep_options
from headway.model.config import ModelConfig
from headway.presets import SCALES, scale_settings
from headway.tasks.retrieval import RetrievalConfig
from headway.train.config import TrainConfig

SETTINGS = setting_fields(RetrievalConfig, ModelConfig, TrainConfig)
SETTINGS.update(seed=int, data_seed=int)


def _help(name: str) -> str:
    return f"{name.replace('_', ' ')}; comma-separated values (or A..B) sweep it"


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Sweep directory (one sub-directory per ensemble); re-running resumes.")
@click.option("--scale", type=click.Choice(list(SCALES)), default="paper", show_default=True,
              help="Defaults to start from: the paper's recipe, or a CPU-sized one.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--progress/--no-progress", default=True, help="Progress bar on a terminal.")
@sweep_options(SETTINGS, _help)
def train(out: Path, scale: str, device: str, progress: bool, **settings: str | None) -> None:
    """Train the retrieval task. Every setting takes a comma list; the grid is their product.

    Example: headway train --scale cpu --layers 1,2 --hops 1,2 --seed 0..3 --out runs/depth
    """
    from headway.cli.show import summary_table
    from headway.runs.config import expand_grid
    from headway.runs.store import load_summary
    from headway.train.sweep import resolve_device, train_runs

    resolve_device(device)
    base = scale_settings(scale)
    axes = {name: parse_values(name, text, SETTINGS[name]) for name, text in settings.items() if text is not None}
    runs = expand_grid(base, axes)
    click.echo(f"{len(runs)} run(s) → {out}", err=True)
    train_runs(runs, out, device=device, progress=progress)
    click.echo(summary_table(load_summary(out)))
