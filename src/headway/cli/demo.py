"""`headway demo`: the quickstart — a small depth sweep at CPU scale, a table and a figure; with it,
the cheapest cell where two layers solve more hops than one hop per layer allows."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import (OutputPath, check_training_memory, memory_check_options, parse_values,
                                 renamed_options)
from headway.runs import layout
from headway.runs.owner import DEMO, claim


@click.command()
@click.option("--out", type=OutputPath(folder=True, kind=DEMO), default=Path("runs/demo"),
              show_default=True, help="Sweep directory; re-running reuses finished runs.")
@click.option("--layers", default="1,2", show_default=True, help="Layer counts to train.")
@click.option("--hops", default="1,2", show_default=True, help="Hop counts D to train on.")
@click.option("--seed", default="0,1", show_default=True, help="Seeds per cell.")
@click.option("--vocab", type=int, default=None, help="Symbols V (CPU scale: 16; need V >= K·(D+1)).")
@click.option("--chains", type=int, default=None, help="Chains K (CPU scale: 4).")
@click.option("--compose/--no-compose", default=True, show_default=True,
              help="Also train 2 layers on 3 hops with links in chain order (V = 24, 1000 steps).")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="Training steps of every run, for a quick look [default: the CPU scale's; 1000 for the composing "
                   "cell].")
@click.option("--device", default="auto", show_default=True)
@memory_check_options
@renamed_options({"--seeds": "--seed"})
def demo(out: Path, layers: str, hops: str, seed: str, vocab: int | None, chains: int | None, compose: bool,
         steps: int | None, device: str, memory_check: bool) -> None:
    """Train layers × hops × seeds on the retrieval task (CPU scale) and report the depth law; with
    --compose, also the cell where two layers solve three hops by composing links."""
    from headway.plots.depth import plot_depth
    from headway.plots.marks import describe_formulation
    from headway.runs.config import expand_grid
    from headway.studies.retrieval.depth import depth_table, measured_min_layers
    from headway.tasks.registry import scale_settings
    from headway.execution import LocalExecutor
    from headway.train.sweep import train_runs

    axes = {"layers": parse_values("layers", layers, int), "hops": parse_values("hops", hops, int),
            "seed": parse_values("seed", seed, int)}
    base = scale_settings("cpu", "retrieval")
    given = {k: v for k, v in (("vocab", vocab), ("chains", chains), ("steps", steps)) if v is not None}
    runs = expand_grid({**base, **given}, axes)
    composing = expand_grid({**base, **COMPOSE_CELL, **given}, {"seed": axes["seed"]}) if compose else []
    check_training_memory(runs + composing, LocalExecutor(), device, memory_check)

    def start() -> None:  # the command is accepted: its folder is claimed, and the work announced
        claim(out, DEMO)
        click.echo(f"training {len(runs)} runs (layers {axes['layers']} × hops {axes['hops']} × "
                   f"seeds {axes['seed']}){f' and {len(composing)} composing runs' if composing else ''} into {out}",
                   err=True)

    trained = train_runs(runs + composing, out, device=device, on_start=start)
    metrics = trained[trained.run_id.isin({run.run_id for run in runs})]
    table = depth_table(metrics)
    figure = plot_depth(table, out / "depth_accuracy.png",
                        title=f"headway demo: accuracy vs depth\n{describe_formulation(metrics.iloc[0])}")
    layout.write_text(out / "depth_table.csv", table.to_csv(index=False))
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
    if composing:
        _report_composition(out, trained, {run.run_id for run in composing})


# The cheapest cell where L layers solve D > L hops by composing links: links in chain order, the paper's query-only
# supervision (results/order-supervision-cpu: every seed by step 750 at V = 24); dense supervision solves it sooner but
# makes every layer-1 head compose, which leaves the causal check without control heads (docs/study-retrieval.md).
COMPOSE_CELL = {"layers": 2, "hops": 3, "order": "chain", "supervision": "query", "vocab": 24, "steps": 1000}


def _report_composition(out: Path, metrics, run_ids: set[str]) -> None:
    """Print the composing runs' accuracy and mechanism class, and draw the phase diagram of every
    trained cell (one panel per formulation, every run classified)."""
    from headway.plots.phase import plot_phase_diagram
    from headway.studies.retrieval.phase import mechanism_evidence, phase_table, run_mechanisms
    from headway.studies.retrieval.rules import RetrievalRules
    from headway.studies.retrieval.tables import final_runs

    rules = RetrievalRules()
    metrics = metrics.assign(part="plain")
    final = final_runs(metrics, rules.solved_accuracy)
    probes, heads, composition = mechanism_evidence(out, set(final.run_id), rules.read_level)
    classes = run_mechanisms(final, probes, heads, composition, rules.mechanism_rule())
    phase = phase_table(final, metrics, classes, rules.solved_accuracy)
    figure = plot_phase_diagram(phase, out / "depth_phase.png", rules.solved_accuracy, title="headway demo")
    cell = final[final.run_id.isin(run_ids)].merge(classes, on="run_id")
    click.echo("\nTwo layers, three hops (links in chain order, query supervision): more hops than layers,")
    click.echo("which one hop per layer cannot reach:")
    for row in cell.itertuples():
        click.echo(f"  seed {row.seed}: acc={row.val_accuracy:.3f}  {row.mechanism} (links decode hops "
                   f"{row.link_farthest} and the query {row.farthest} after layers 1, 2; links read {row.reads}; "
                   f"ablating the composing heads at links costs {row.composing_drop:.2f}, as many others "
                   f"{row.control_drop:.2f})")
    click.echo(f"figure (every cell, with its mechanism): {figure}")
