"""Figure: prompted-LLM accuracy over hops, one panel per formulation, with Wilson intervals and chance."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.errors import ConfigError
from headway.plots.marks import save_figure
from headway.tasks.retrieval.prompts.formulations import FORMULATIONS

if TYPE_CHECKING:
    from matplotlib.axes import Axes

# Colour and marker per metric, fixed so a metric looks the same in every panel and every report.
METRIC_STYLE = {
    "acc": ("tab:blue", "o"),
    "acc_norm": ("tab:orange", "s"),
    "exact_match": ("tab:green", "^"),
}
# Horizontal shift per metric so error bars at the same hop count do not hide each other.
DODGE = 0.08
# Panels side by side at most: five in one row shrink to unreadable type in a 1000-pixel report column.
PANELS_PER_ROW = 3


def formulation_order(keys: Iterable[str]) -> list[str]:
    """The formulation keys among `keys`, in F1..F5 order; an unknown key is an error rather than dropped."""
    return _known_in_order(keys, list(FORMULATIONS), "formulations")


def metric_order(metrics: Iterable[str]) -> list[str]:
    """The metrics among `metrics` in the order acc, acc_norm, exact_match, so colours and rows line up."""
    return _known_in_order(metrics, list(METRIC_STYLE), "metrics")


def _known_in_order(values: Iterable[str], known: list[str], what: str) -> list[str]:
    """The distinct `values` in the order of `known`; raise on a value outside it."""
    present = set(values)
    unknown = present - set(known)
    if unknown:
        raise ConfigError(f"{what} {sorted(map(str, unknown))} unknown; expected some of {', '.join(known)}")
    return [value for value in known if value in present]


def accuracy_vs_hops(results: pd.DataFrame, path: Path, *, title: str | None = None) -> Path:
    """Write accuracy over hops per formulation (rows of `summarise`) to `path` (PNG) and return the path."""
    if results.empty:
        raise ConfigError("results is empty; at least one formulation × hops × metric row is needed to plot")
    keys = formulation_order(results.formulation)
    columns = min(len(keys), PANELS_PER_ROW)
    rows = -(-len(keys) // columns)
    fig = Figure(figsize=(0.8 + 3.4 * columns, 0.9 + 2.9 * rows), layout="constrained")
    axes = fig.subplots(rows, columns, sharey=True, squeeze=False)
    for ax, key in zip(axes.flat, keys):
        _panel(ax, results[results.formulation == key], FORMULATIONS[key].label)
    for ax in list(axes.flat)[len(keys):]:  # an empty slot of the last row
        ax.set_visible(False)
    axes[0, 0].set_ylim(-0.02, 1.02)
    for row in axes:
        row[0].set_ylabel("accuracy")
    legend = {label: handle for ax in axes.flat for handle, label in zip(*ax.get_legend_handles_labels())}
    legend = dict(sorted(legend.items(), key=lambda item: item[0] == "chance"))  # metrics first, chance last
    fig.legend(legend.values(), legend.keys(), loc="outside lower center", ncols=len(legend), frameon=False)
    fig.suptitle(title or "Accuracy over hops (error bars: Wilson 95% interval)")
    return save_figure(fig, path, tight=False)


def _panel(ax: Axes, rows: pd.DataFrame, label: str) -> None:
    """One formulation: a line per metric with its interval, and chance as a dashed step over hops."""
    metrics = metric_order(rows.metric)
    for index, metric in enumerate(metrics):
        cell = rows[rows.metric == metric].sort_values("hops")
        colour, marker = METRIC_STYLE[metric]
        shift = (index - (len(metrics) - 1) / 2) * DODGE
        below = (cell.accuracy - cell.ci_low).clip(lower=0)
        above = (cell.ci_high - cell.accuracy).clip(lower=0)
        ax.errorbar(cell.hops + shift, cell.accuracy, yerr=[below, above], color=colour, marker=marker, ms=4,
                    lw=1.5, capsize=2.5, elinewidth=1, label=metric)
    hops, chance = _chance(rows)
    # Each hop count owns the interval half-way to its neighbours, so the chance step sits under its points.
    edges = np.concatenate([[hops[0] - 0.5], (hops[1:] + hops[:-1]) / 2, [hops[-1] + 0.5]])
    ax.stairs(chance, edges, baseline=None, color="grey", ls="--", lw=1, label="chance")
    ax.set_xlim(edges[0], edges[-1])
    ax.set_xticks(hops, [str(int(h)) for h in hops])
    ax.set_xlabel("hops")
    ax.set_title(label)
    ax.grid(axis="y", alpha=0.3)


def _chance(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Sorted hop counts of one formulation and the chance level at each (the same for every metric)."""
    chance = rows.groupby("hops").chance.mean().sort_index()
    return chance.index.to_numpy(dtype=float), chance.to_numpy(dtype=float)
