"""Figure: accuracy heat-map over layers × hops with the ⌈log₃(2D)⌉ boundary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from headway.plots.marks import (
    NOT_TRAINED_COLOUR,
    SETTING_COLUMNS,
    describe_formulation,
    hatch_cell,
    mark_root_guess,
    not_trained_handle,
    save_figure,
    title_lines,
    unreachable_handle,
)
from headway.tasks.retrieval.theory import min_layers

_REACH_COLUMNS = ("attention", "order", "layout")  # the columns by which `depth_table` applies the reach bound


def depth_figure(table: pd.DataFrame, title: str = "Retrieval: accuracy vs depth") -> Figure:
    """The heat-map of `depth_table` output: mean accuracy ± half range per layers × hops, Theorem 1's bound
    as a red staircase, cells with fewer layers than the table's `bound` (the fewest whose accuracy ceiling
    reaches the solved threshold) hatched as unreachable, untrained cells grey, and the root-guess level 1/K
    marked on the colour bar. The title names the formulation when the table has its columns."""
    hops = sorted(table.hops.unique())
    layers = sorted(table.layers.unique())
    grid = np.full((len(layers), len(hops)), np.nan)
    fig = Figure(figsize=(max(5.6, 2.8 + 1.1 * len(hops)), 2.6 + 0.9 * len(layers)), layout="constrained")
    ax = fig.subplots()
    for row in table.itertuples():
        i, j = layers.index(row.layers), hops.index(row.hops)
        grid[i, j] = row.accuracy
        ax.text(j, i, f"{row.accuracy:.2f}\n±{(row.accuracy_max - row.accuracy_min) / 2:.2f}", ha="center",
                va="center", fontsize=8, color="black" if row.accuracy > 0.6 else "white")
        if row.layers < row.bound:
            hatch_cell(ax, j, i)
    ax.set_facecolor(NOT_TRAINED_COLOUR)
    image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
    # The bound as a staircase under the cells with as many layers as Theorem 1 asks (all of them when it
    # asks for fewer than were trained): the cells below cannot solve the task.
    xs, ys = [], []
    for j, d in enumerate(hops):
        y = sum(1 for n in layers if n < min_layers(d)) - 0.5
        xs += [j - 0.5, j + 0.5]
        ys += [y, y]
    ax.plot(xs, ys, color="red", lw=2)
    ax.set_xticks(range(len(hops)), [str(h) for h in hops])
    ax.set_yticks(range(len(layers)), [str(n) for n in layers])
    ax.set_xlabel("hops D")
    ax.set_ylabel("layers L")
    colorbar = fig.colorbar(image, ax=ax, label="final-hop accuracy\n(mean over seeds ± half range)")
    mark_root_guess(colorbar, float(table.chance_roots.iloc[0]))
    _depth_legend(fig, untrained=np.isnan(grid).any(), unreachable=bool((table.layers < table.bound).any()),
                  reach_bound=set(_REACH_COLUMNS) <= set(table.columns))
    named = (describe_formulation(table.iloc[0], SETTING_COLUMNS), _masking(table))
    formulation = ", ".join(words for words in named if words)
    heading = f"{title}\n{formulation}" if formulation else title
    fig.suptitle(title_lines(f"{heading}\nchance 1/V = {table.chance_vocab.iloc[0]:.2f}, root guess 1/K = "
                             f"{table.chance_roots.iloc[0]:.2f}", fig, 9), fontsize=9)
    return fig


def plot_depth(table: pd.DataFrame, path: Path | str, title: str = "Retrieval: accuracy vs depth") -> Path:
    """Write `depth_figure` of `depth_table` output to `path` (PNG or SVG) and return the path."""
    return save_figure(depth_figure(table, title), path)


def _masking(table: pd.DataFrame) -> str:
    """How many link targets the table's runs left out of the loss as unreachable (`masked_fraction`, which
    tables older than mask_unreachable lack), or '' when none."""
    share = float(table["masked_fraction"].max()) if "masked_fraction" in table.columns else 0.0
    return f"unreachable targets masked ({share:.0%} of link targets)" if share > 0 else ""


def _depth_legend(fig: Figure, untrained: bool, unreachable: bool, reach_bound: bool) -> None:
    """The key under the heat-map: the bound, and the grey and hatched cells where the figure has them
    (hatched by the reach bound of the table's attention, order and layout when it has them, else Theorem 1's)."""
    theorem = "Theorem 1's bound ⌈log₃(2D)⌉: cells below it cannot solve"
    handles = [Line2D([], [], color="red", lw=2, label=theorem)]
    if unreachable:
        bound = "the reach bound of this attention, order and layout" if reach_bound else "Theorem 1's bound"
        handles.append(unreachable_handle(f"fewer layers than {bound}"))
    if untrained:
        handles.append(not_trained_handle())
    fig.legend(handles=handles, loc="outside lower center", fontsize=8, frameon=False)
