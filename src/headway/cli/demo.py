"""`headway demo`: the quickstart — a small depth sweep at CPU scale, a table and a figure."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import parse_values, renamed_options


@click.command()
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("runs/demo"),
              show_default=True, help="Sweep directory; re-running reuses finished runs.")
@click.option("--layers", default="1,2", show_default=True, help="Layer counts to train.")
@click.option("--hops", default="1,2", show_default=True, help="Hop counts D to train on.")
@click.option("--seed", default="0,1", show_default=True, help="Seeds per cell.")
@click.option("--vocab", type=int, default=None, help="Symbols V (CPU scale: 16; need V >= K·(D+1)).")
@click.option("--chains", type=int, default=None, help="Chains K (CPU scale: 4).")
@click.option("--device", default="auto", show_default=True)
@renamed_options({"--seeds": "--seed"})
def demo(out: Path, layers: str, hops: str, seed: str, vocab: int | None, chains: int | None, device: str) -> None:
    """Train layers × hops × seeds on the retrieval task (CPU scale) and report the depth law."""
    from headway.plots.depth import plot_depth
    from headway.runs.config import expand_grid
    from headway.studies.retrieval.depth import depth_table, measured_min_layers
    from headway.tasks.registry import scale_settings
    from headway.train.sweep import train_runs

    axes = {"layers": parse_values("layers", layers, int), "hops": parse_values("hops", hops, int),
            "seed": parse_values("seed", seed, int)}
    base = scale_settings("cpu", "retrieval")
    base.update({k: v for k, v in (("vocab", vocab), ("chains", chains)) if v is not None})
    runs = expand_grid(base, axes)
    click.echo(f"training {len(runs)} runs (layers {axes['layers']} × hops {axes['hops']} × "
               f"seeds {axes['seed']}) into {out}", err=True)
    metrics = train_runs(runs, out, device=device)
    table = depth_table(metrics)
    figure = plot_depth(table, out / "depth_accuracy.png")
    table.to_csv(out / "depth_table.csv", index=False)
    click.echo("\nFinal-hop validation accuracy (mean over seeds, min–max):")
    for row in table.itertuples():
        click.echo(f"  D={row.hops}  layers={row.layers}  acc={row.accuracy:.3f} "
                   f"({row.accuracy_min:.3f}–{row.accuracy_max:.3f})  bound ⌈log₃(2D)⌉={row.bound}  "
                   f"{'solved' if row.solved else 'not solved'}")
    click.echo(f"  baselines: 1/V = {table.chance_vocab.iloc[0]:.3f}, root guess 1/K = {table.chance_roots.iloc[0]:.3f}")
    click.echo("\nMinimum depth per D (measured vs bound):")
    for row in measured_min_layers(table).itertuples():
        measured = "none of the trained depths" if row.measured_min_layers != row.measured_min_layers else int(row.measured_min_layers)
        click.echo(f"  D={row.hops}: measured {measured}, bound {row.bound}")
    click.echo(f"\nfigure: {figure}\ntable: {out / 'depth_table.csv'}")
