"""Figures: per-seed score curves of head roles or hops over training, with their emergence steps marked."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.errors import ConfigError
from headway.plots.marks import save_figure

MAX_COLUMNS = 4


def plot_emergence(curves: pd.DataFrame, table: pd.DataFrame, path: Path | str) -> Path:
    """Write one panel per seed of each head role's score over training, emergence dashed, to `path`."""
    return _plot_panels(curves, table, path, "Head role scores over training (dashed: emergence)", "role score")


def plot_hop_accuracy(curves: pd.DataFrame, table: pd.DataFrame, path: Path | str,
                      chance: float | None = None) -> Path:
    """Write one panel per seed of each hop's accuracy over training, emergence dashed and chance dotted."""
    return _plot_panels(curves, table, path, "Per-hop accuracy over training (dashed: emergence)", "accuracy",
                        chance)


def _plot_panels(curves: pd.DataFrame, table: pd.DataFrame, path: Path | str, title: str, ylabel: str,
                 chance: float | None = None) -> Path:
    """Shared layout: a grid of per-seed panels (≤ 4 columns, shared axes), one coloured curve per unit
    with its emergence step as a dashed line and a dot; steps on a linear axis, because emergence
    happens mid-training, which a log axis would squeeze."""
    if curves.empty:
        raise ConfigError("curves is empty; at least one (seed, unit) curve is needed to plot")
    seeds = sorted(curves.seed.unique())
    units = sorted(curves.unit.unique(), key=str)
    colours = dict(zip(units, matplotlib.colormaps["tab10" if len(units) <= 10 else "tab20"](np.arange(len(units)))))
    emergence = table.set_index(["seed", "unit"]).emergence_step
    n_cols = min(MAX_COLUMNS, len(seeds))
    n_rows = -(-len(seeds) // n_cols)
    fig = Figure(figsize=(1.0 + 3.2 * n_cols, 0.8 + 2.6 * n_rows), layout="constrained")
    axes = fig.subplots(n_rows, n_cols, sharex=True, sharey=True, squeeze=False)
    for index, seed in enumerate(seeds):
        ax = axes.flat[index]
        for unit, curve in curves[curves.seed == seed].sort_values("step").groupby("unit", sort=True):
            colour = colours[unit]
            ax.plot(curve.step, curve.score, color=colour, lw=1.5, label=str(unit))
            step = emergence.get((seed, unit), np.nan)
            if not np.isnan(step):
                ax.axvline(step, color=colour, ls="--", lw=1)
                ax.plot([step], [np.interp(step, curve.step, curve.score)], "o", color=colour, ms=5)
        if chance is not None:
            ax.axhline(chance, color="grey", ls=":", lw=1, label="chance")
        ax.set_title(f"seed {seed}", fontsize=9)
    for ax in axes.flat[len(seeds):]:
        ax.set_visible(False)
    for column in range(n_cols):  # the lowest visible panel of each column carries the x tick labels
        lowest = axes[(len(seeds) - 1 - column) // n_cols, column]
        lowest.xaxis.set_tick_params(labelbottom=True)
        lowest.set_xlabel("step")
    axes[0, 0].set_xlim(curves.step.min(), curves.step.max())
    axes[0, 0].set_ylim(-0.02, 1.02)
    for ax in axes[:, 0]:
        ax.set_ylabel(ylabel)
    legend = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels())}
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=min(len(legend), 4), fontsize=8,
               frameon=False)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, tight=False)
