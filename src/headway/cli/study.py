"""`headway study retrieval`: one command from nothing to the stacked-heads report."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import parse_values

_AXES = {  # option name -> (plan field, value type)
    "layers": ("layers", int), "hops": ("hops", int), "seeds": ("seeds", int), "curricula": ("curricula", str),
    "contrast_hops": ("contrast_hops", int),
    "layouts": ("layouts", str), "attentions": ("attentions", str), "orders": ("orders", str),
    "conditional_layers": ("conditional_layers", int), "conditional_hops": ("conditional_hops", int),
    "conditional_seeds": ("conditional_seeds", int),
}


@click.group()
def study() -> None:
    """Reproduce a study end to end: train its grid, analyse every model, write a report."""


@study.command()
@click.option("--scale", type=click.Choice(["cpu", "gpu", "paper"]), default="cpu", show_default=True,
              help="cpu: < 20 min on 2 cores; paper: the paper's recipe and grid (GPU); gpu: in between.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Study folder; re-running reuses trained runs and finished analyses.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--layers", default=None, help="Override the depth grid's layer counts (e.g. 1..4).")
@click.option("--hops", default=None, help="Override the depth grid's hop counts D.")
@click.option("--seeds", default=None, help="Override the seeds per cell.")
@click.option("--curricula", default=None, help="ic, none, mixture (comma list).")
@click.option("--contrast-hops", default=None,
              help="Hops at which curricula other than ic are trained ('all' for every D > 1).")
@click.option("--layouts", default=None, help="Variants to add: packed, flat.")
@click.option("--attentions", default=None, help="Variants to add: causal, bidirectional.")
@click.option("--orders", default=None, help="Variants to add: shuffled, chain.")
@click.option("--conditional-layers", default=None, help="Conditional grid: layer counts.")
@click.option("--conditional-hops", default=None, help="Conditional grid: hop counts ('none' skips it).")
@click.option("--conditional-seeds", default=None, help="Conditional grid: seeds.")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Override the training steps of every run.")
@click.option("--vocab", type=click.IntRange(min=1), default=None,
              help="Override the symbols V of every task (an example needs V >= K·(D+1)).")
@click.option("--dry-run", is_flag=True, help="Print the grid, its ensembles and its training cost; train nothing.")
@click.option("--progress/--no-progress", default=True, help="Progress bars on a terminal.")
def retrieval(scale: str, out: Path, device: str, steps: int | None, vocab: int | None, dry_run: bool,
              progress: bool, **axes: str | None) -> None:
    """The stacked-heads study: depth law, head roles, emergence, depth probes, conditional retrieval."""
    from headway.studies.retrieval.plan import study_plan
    from headway.studies.retrieval.study import run_study

    overrides = {}
    for option, text in axes.items():
        if text is None:
            continue
        field, kind = _AXES[option]
        empty = (option, text.strip().lower()) in (("conditional_hops", "none"), ("contrast_hops", "all"))
        overrides[field] = () if empty else tuple(parse_values(option.replace("_", "-"), text, kind))
    plan = study_plan(scale).with_overrides(**overrides)
    if steps is not None or vocab is not None:
        plan = plan.with_settings(steps=steps, vocab=vocab)
    runs = plan.runs()
    if dry_run:
        _describe(plan)
        return
    click.echo(f"study retrieval, scale {scale}: {len(runs)} runs into {out}", err=True)
    report = run_study(plan, out, device=device, progress=progress)
    click.echo(f"report: {report}\nsummary: {out / 'summary.json'}\nresults: {out / 'results.csv'}")


def _describe(plan) -> None:
    """Runs, ensembles and approximate training FLOPs of each grid of `plan`."""
    from headway.runs.config import group_runs
    from headway.studies.retrieval.plan import training_flops

    for name, runs in (("depth", plan.depth_runs()), ("conditional", plan.conditional_runs())):
        if not runs:
            click.echo(f"{name}: not run")
            continue
        flops = sum(training_flops(run) for run in runs)
        click.echo(f"{name}: {len(runs)} runs in {len(group_runs(runs))} ensembles, "
                   f"about {flops:.2e} training FLOPs ({flops / 1e14 / 3600:.2f} h at 100 TFLOP/s sustained)")


@study.command()
@click.option("--scale", type=click.Choice(["cpu", "gpu"]), default="cpu", show_default=True,
              help="cpu: < 30 min on 2 cores; gpu: the recipe's batch and steps, 16 seeds, 8 data values.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Study folder; re-running reuses trained runs and finished analyses.")
@click.option("--device", default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …")
@click.option("--mean-gaps", default=None,
              help="Training data: 'uniform' (the default lists) and/or mean gaps δ̄ of geometric gaps, comma list.")
@click.option("--weight-decays", default=None, help="Weight decay values, comma list (e.g. 0.005,0).")
@click.option("--seeds", default=None, help="Seeds per cell (e.g. 0..7).")
@click.option("--steps", type=click.IntRange(min=1), default=None, help="Override the training steps of every run.")
@click.option("--development-seeds", default=None,
              help="Seeds whose LLC is traced over training (first data value, every weight decay).")
@click.option("--dry-run", is_flag=True, help="Print the grid and its ensembles; train nothing.")
@click.option("--progress/--no-progress", default=True, help="Progress bars on a terminal.")
def sorting(scale: str, out: Path, device: str, mean_gaps: str | None, weight_decays: str | None,
            seeds: str | None, steps: int | None, development_seeds: str | None, dry_run: bool,
            progress: bool) -> None:
    """The list-sorting study: head modes, copy suppression, the LLC over training, data features."""
    from headway.runs.config import group_runs
    from headway.studies.sorting.plan import UNIFORM, study_plan
    from headway.studies.sorting.study import run_sorting_study

    changes: dict = {}
    if mean_gaps is not None:
        changes["data"] = tuple(UNIFORM if part.strip().lower() == UNIFORM else parse_values("mean-gaps", part, float)[0]
                                for part in mean_gaps.split(","))
    if weight_decays is not None:
        changes["weight_decays"] = tuple(parse_values("weight-decays", weight_decays, float))
    if seeds is not None:
        changes["seeds"] = tuple(parse_values("seeds", seeds, int))
    if development_seeds is not None:
        changes["development_seeds"] = tuple(parse_values("development-seeds", development_seeds, int))
    plan = study_plan(scale)
    if steps is not None:
        changes["settings"] = {**plan.settings, "steps": steps}
    plan = plan.with_overrides(**changes)
    runs = plan.runs()
    if dry_run:
        click.echo(f"{len(runs)} runs in {len(group_runs(runs))} ensemble(s); "
                   f"LLC traced over training for {len(plan.development_runs())} of them")
        return
    click.echo(f"study sorting, scale {scale}: {len(runs)} runs into {out}", err=True)
    report = run_sorting_study(plan, out, device=device, progress=progress)
    click.echo(f"report: {report}\nsummary: {out / 'summary.json'}\nresults: {out / 'results.csv'}")
