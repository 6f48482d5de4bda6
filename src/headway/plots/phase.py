"""Figures of the depth phase diagram: accuracy over layers × hops per formulation, with each cell's
mechanism and reachable fraction, and accuracy against training steps for the cells beyond D = L."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from headway.errors import ConfigError



def _panel_name(key: tuple, columns: list[str]) -> str:
    return ", ".join(f"{c} {v}" for c, v in zip(columns, key, strict=True))


def plot_phase_diagram(phase: pd.DataFrame, path: Path | str, by: list[str], threshold: float,
                       title: str = "Depth phase diagram") -> Path:
    """One heat-map panel per formulation (`by` columns of `phase_table` output): mean final-hop accuracy
    per layers × hops, each cell annotated with its accuracy, how many runs were compositional (C) or
    linear (L), and its reachable fraction; cells whose ceiling is below `threshold` are hatched
    (unsolvable), and the dashed diagonal D = L separates what one hop per layer can reach."""
    if phase.empty:
        raise ConfigError("the phase table is empty; train plain IC runs to draw the diagram")
    panels = list(phase.groupby(by))
    hops, layers = sorted(phase.hops.unique()), sorted(phase.layers.unique())
    fig = Figure(figsize=(1.2 + (0.95 * len(hops) + 0.6) * len(panels), 1.6 + 0.95 * len(layers)))
    axes = np.atleast_1d(fig.subplots(1, len(panels), sharey=True, squeeze=False)[0])
    image = None
    for ax, (key, table) in zip(axes, panels, strict=True):
        grid = np.full((len(layers), len(hops)), np.nan)
        for row in table.itertuples():
            i, j = layers.index(row.layers), hops.index(row.hops)
            grid[i, j] = row.accuracy
            colour = "black" if row.accuracy > 0.6 else "white"
            kinds = " ".join(f"{n}{tag}" for n, tag in ((int(row.compositional), "C"), (int(row.linear), "L")) if n)
            ax.text(j, i, f"{row.accuracy:.2f}\n{kinds or '–'}\nreach {row.reachable:.0%}", ha="center",
                    va="center", fontsize=7, color=colour)
            if not row.solvable:
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch="///", edgecolor="grey", lw=0))
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
        xs, ys = [], []  # staircase under the cells with L ≥ D, which one hop per layer reaches
        for j, d in enumerate(hops):
            below = sum(1 for n in layers if n < d) - 0.5
            xs += [j - 0.5, j + 0.5]
            ys += [below, below]
        ax.plot(xs, ys, ls="--", color="red", lw=1.2)
        ax.set_xticks(range(len(hops)), [str(h) for h in hops])
        ax.set_yticks(range(len(layers)), [str(n) for n in layers])
        ax.set_xlabel("hops D")
        ax.set_title(_panel_name(key if isinstance(key, tuple) else (key,), by), fontsize=8)
    axes[0].set_ylabel("layers L")
    fig.suptitle(f"{title}: mean final-hop accuracy; C / L = runs compositional / linear; reach = share of link "
                 f"orders the information flow lets through;\nhatched: unsolvable (ceiling < {threshold}); below the red "
                 "dashes D > L, which one hop per layer cannot reach", fontsize=8, y=1.04)
    fig.colorbar(image, ax=list(axes), label="final-hop accuracy", shrink=0.8)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    return path


def plot_learning_curves(metrics: pd.DataFrame, cells: pd.DataFrame, path: Path | str, by: list[str],
                         threshold: float) -> Path:
    """Validation accuracy against training steps, one panel per (layers, hops) cell of `cells`, one
    colour per formulation (`by`) and one line per seed: a cell still rising at the last step failed for
    want of budget, a flat one for want of a mechanism."""
    if cells.empty:
        raise ConfigError("no cells to draw learning curves for")
    shapes = cells[["layers", "hops"]].drop_duplicates().sort_values(["layers", "hops"])
    formulations = list(cells[by].drop_duplicates().itertuples(index=False, name=None))
    colours = matplotlib.colormaps["tab10"](np.arange(len(formulations)) % 10)
    n_cols = min(4, len(shapes))
    n_rows = -(-len(shapes) // n_cols)
    fig = Figure(figsize=(3.2 * n_cols, 2.6 * n_rows))
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, sharey=True, squeeze=False)).ravel()
    for ax, shape in zip(axes, shapes.itertuples(), strict=False):
        mine = metrics[(metrics.layers == shape.layers) & (metrics.hops == shape.hops)]
        for colour, formulation in zip(colours, formulations, strict=True):
            runs = mine[np.logical_and.reduce([mine[c] == v for c, v in zip(by, formulation, strict=True)])]
            for i, (_, run) in enumerate(runs.groupby("run_id")):
                ax.plot(run.step, run.val_accuracy, color=colour, lw=1, alpha=0.85,
                        label=_panel_name(formulation, by) if i == 0 else None)
        ax.axhline(threshold, color="grey", ls=":", lw=1)
        ax.set_title(f"L = {shape.layers}, D = {shape.hops}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1.02)
    for ax in axes[len(shapes):]:
        ax.set_visible(False)
    axes[0].set_ylabel("final-hop accuracy")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=min(3, len(labels)), fontsize=7, frameon=False,
               bbox_to_anchor=(0.5, -0.02 - 0.03 * (len(labels) // 3)))
    fig.suptitle(f"Accuracy against steps, cells with D > L (dotted: solved at {threshold})", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150, bbox_inches="tight")
    return path
