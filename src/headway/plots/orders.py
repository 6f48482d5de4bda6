"""Accuracy per link order: one heat-map per cell (formulation, layers, hops), a row per seed and a column per
order of the queried chain's links, grouped by the layers the information flow needs in that order, so a
class of orders a model fails stands out beside the orders its depth lets through."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.errors import ConfigError
from headway.plots.marks import describe_formulation, hatch_cell, save_figure, split_formulation, unreachable_handle

MAX_PANELS = 8  # cells drawn; the table holds every cell
_CELL = ["hops", "layers"]


def varied_cells(orders: pd.DataFrame) -> pd.DataFrame:
    """The rows of `orders` (`tables.order_rows`) in cells (formulation, layers, hops) with more than one order
    row: the ones a panel can show."""
    if orders.empty:
        return orders
    return orders.groupby([*split_formulation(orders)[1], *_CELL]).filter(
        lambda cell: cell.order_class.nunique() > 1 or cell.link_order.nunique() > 1)


def order_figure(orders: pd.DataFrame, title: str = "Final-hop accuracy per link order") -> Figure:
    """Panels of `orders` (`tables.order_rows`: per run and order, with its cell and seed) for its `varied_cells`,
    at most MAX_PANELS; an order the flow cannot bring to the answer at the cell's depth is hatched."""
    varied = varied_cells(orders)
    if varied.empty:
        raise ConfigError("no cell of the order table has more than one link order; nothing to draw")
    _, varying = split_formulation(varied)
    cells = list(varied.groupby([*varying, *_CELL], sort=True))[:MAX_PANELS]
    figure = Figure(figsize=(9.0, 1.2 + 1.6 * len(cells)), layout="constrained")
    axes = figure.subplots(len(cells), 1, squeeze=False)[:, 0]
    image = None
    for ax, (key, cell) in zip(axes, cells, strict=True):
        label = np.where(cell.link_order != "", cell.link_order, cell.order_class)
        cell = cell.assign(label=label)
        columns = cell.drop_duplicates("label").sort_values(["layers_needed", "order_class", "label"])
        grid = cell.pivot_table(index="seed", columns="label", values="accuracy").reindex(columns=columns.label)
        image = ax.imshow(grid.to_numpy(), aspect="auto", cmap=matplotlib.colormaps["viridis"], vmin=0.0, vmax=1.0,
                          interpolation="nearest")
        for x, reach in enumerate(columns.reachable):
            if reach < 1.0:
                for y in range(len(grid)):
                    hatch_cell(ax, x, y)
        ax.set_yticks(range(len(grid)), [f"seed {s}" for s in grid.index], fontsize=6)
        few = len(columns) <= 24
        ax.set_xticks(range(len(columns)), list(columns.label) if few else [], rotation=90, fontsize=6)
        values = dict(zip([*varying, *_CELL], key if isinstance(key, tuple) else (key,), strict=True))
        words = describe_formulation(values, varying) if varying else ""
        ax.set_title(f"{words + ', ' if words else ''}{values['layers']} layers, D = {values['hops']} "
                     f"({len(columns)} {'orders' if (cell.link_order != '').any() else 'order classes'}, by layers "
                     "the flow needs)", fontsize=8)
    shared, _ = split_formulation(orders)
    figure.suptitle(f"{title} ({describe_formulation(orders.iloc[0], shared)})" if shared else title, fontsize=9)
    figure.colorbar(image, ax=list(axes), label="final-hop accuracy", shrink=0.8)
    figure.legend(handles=[unreachable_handle("no path of the information flow brings x₀ to the query in this order")],
                  loc="outside lower center", fontsize=7, frameon=False)
    return figure


def plot_order_accuracy(orders: pd.DataFrame, path: Path | str) -> Path:
    """Save `order_figure(orders)` to `path`."""
    return save_figure(order_figure(orders), path)
