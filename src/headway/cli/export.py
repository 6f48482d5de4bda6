"""`headway export`: hand a trained run to another interpretability library."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import OutputPath
from headway.runs.owner import EXPORT_TL, claim


@click.group()
def export() -> None:
    """Write a trained run in another library's format."""


@export.command("tl")
@click.argument("run", type=click.Path(path_type=Path))
@click.option("--out", type=OutputPath(folder=True, kind=EXPORT_TL), required=True,
              help="Folder for config.json, model.safetensors and headway.json.")
@click.option("--instance", type=int, default=None, help="Instance of the ensemble at RUN [default: 0].")
@click.option("--run-id", default=None, help="The run to export, found anywhere under RUN (a sweep).")
@click.option("--step", type=int, default=None, help="Checkpoint step [default: the last].")
def tl(run: Path, out: Path, instance: int | None, run_id: str | None, step: int | None) -> None:
    """One run as a TransformerLens 4.x model (TransformerBridge) whose outputs are headway's."""
    from headway.errors import ConfigError
    from headway.export.transformer_lens import EXPORT_FILES, to_transformer_lens, write_export

    if out.exists() and any(p.name not in EXPORT_FILES and not p.name.startswith(".") for p in out.iterdir()):
        raise ConfigError(f"{out} holds other files; choose an empty or new folder for the export")
    export = to_transformer_lens(run, instance, step, run_id)
    claim(out, EXPORT_TL)
    exported = write_export(export, out)
    click.echo(f"wrote {out}: run {exported.run_id} at step {exported.step}. Load it with "
               f"headway.export.transformer_lens.load_export('{out}') or TransformerLens alone "
               "(docs/api.md#transformerlens-export)", err=True)
