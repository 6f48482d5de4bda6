"""Figure: validation accuracy over training for each variant of a recipe sweep (a thin line per seed, a thick
mean)."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import pandas as pd
from matplotlib.figure import Figure

from headway.plots.marks import save_figure
from headway.plots.style import OUTSIDE


def recipes_figure(curves: pd.DataFrame, variants: list[str], reached: float, title: str) -> Figure:
    """`curves` (variant, run_id, step, val_accuracy) as one colour per variant, in the order of `variants` (those
    with no curve left out); a dotted line at the level `reached`."""
    fig = Figure(figsize=(8.5, 5), layout="constrained")
    ax = fig.subplots()
    palette = matplotlib.colormaps["tab10"]
    for i, variant in enumerate(variants):
        group = curves[curves.variant == variant]
        if group.empty:
            continue
        colour = palette(i % 10)
        for _, run in group.groupby("run_id"):
            run = run.sort_values("step")
            ax.plot(run.step, run.val_accuracy, color=colour, lw=0.6, alpha=0.5)
        mean = group.groupby("step").val_accuracy.mean()
        ax.plot(mean.index, mean.to_numpy(), color=colour, lw=2, label=variant)
    ax.axhline(reached, color="black", ls=":", lw=1, label=f"reached ({reached:g})")
    ax.set_xlabel("training step")
    ax.set_ylabel("validation accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title(title, fontsize=9)
    ax.legend(**OUTSIDE)
    return fig


def plot_recipes(curves: pd.DataFrame, variants: list[str], reached: float, title: str, path: Path | str) -> Path:
    """Write `recipes_figure` to `path` and return the path."""
    return save_figure(recipes_figure(curves, variants, reached, title), Path(path))
