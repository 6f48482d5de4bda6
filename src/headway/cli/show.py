"""`headway show DIR`: each run's configuration and final metrics."""

from __future__ import annotations

import json
from pathlib import Path

import click

KEY_CONFIG = ("layers", "hops", "seed", "curriculum", "layout")
KEY_FINAL = ("step", "val_loss", "val_accuracy", "train_loss")


@click.command()
@click.argument("path", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of {config, final} objects.")
def show(path: Path, as_json: bool) -> None:
    """Print every run found in PATH (a run or sweep directory)."""
    from headway.runs.store import load_summary

    runs = load_summary(path)
    if as_json:
        click.echo(json.dumps(runs, indent=2))
        return
    click.echo(summary_table(runs))


def summary_table(runs: list[dict]) -> str:
    """A text table: the key config columns, any other column that varies, and the final metrics."""
    import pandas as pd

    configs = pd.DataFrame([r["config"] for r in runs])
    varying = [c for c in configs.columns if c not in KEY_CONFIG and configs[c].astype(str).nunique() > 1]
    table = configs[[c for c in KEY_CONFIG if c in configs] + varying].copy()
    finals = pd.DataFrame([r["final"] for r in runs])
    for column in KEY_FINAL:
        if column in finals:
            table[column] = finals[column]
    table.insert(0, "ensemble", [r["ensemble"] for r in runs])
    table["complete"] = [r["complete"] for r in runs]
    with pd.option_context("display.width", 200, "display.max_columns", 50):
        return table.to_string(index=False, float_format=lambda v: f"{v:.4g}")
