"""Figures of the depth phase diagram: accuracy over layers × hops per formulation, with each cell's
mechanism and reachable fraction; accuracy against training steps for the cells beyond D = L; and the
order × supervision contrast at one cell, each seed's accuracy beside its mechanism."""

from __future__ import annotations

from pathlib import Path

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.image import AxesImage
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from headway.errors import ConfigError
from headway.plots.marks import (
    MECHANISM_MARKS,
    MECHANISM_MEANINGS,
    NOT_TRAINED,
    NOT_TRAINED_COLOUR,
    ROOT_GUESS,
    UNREACHABLE_HATCH,
    describe_formulation,
    hatch_cell,
    mark_root_guess,
    mechanism_counts,
    mechanism_key,
    not_trained_handle,
    save_figure,
    split_formulation,
    title_lines,
    unreachable_handle,
)
from headway.analysis.retrieval.reach import accuracy_ceiling, reachable_fraction

_D_EQUALS_L = "D = L: cells below it have more hops than layers, beyond one hop per layer"
_REACH_KEY = "reach p: share of link orders from which the information flow brings the answer to the query"
_LEGEND = {"loc": "outside lower center", "fontsize": 7, "frameon": False}
# How each run's mechanism is drawn in the contrast figure (scatter style, legend marker size, legend text).
_MARKERS = {"linear": ({"marker": "o", "color": "tab:blue", "s": 30}, 6,
                       f"lin: {MECHANISM_MEANINGS['linear']}"),
            "compositional": ({"marker": "*", "color": "tab:orange", "s": 90}, 11,
                              f"comp: {MECHANISM_MEANINGS['compositional']}"),
            "not classifiable": ({"marker": "$?$", "color": "tab:purple", "s": 50}, 8,
                                 f"?: {MECHANISM_MEANINGS['not classifiable']}"),
            "unsolved": ({"marker": "o", "facecolor": "none", "edgecolor": "0.35", "s": 30}, 6, "run not solved")}


def phase_figure(phase: pd.DataFrame, threshold: float, title: str = "Depth phase diagram") -> Figure:
    """One heat-map panel per formulation of `phase_table` output (the formulation settings that vary;
    the shared ones are named in the title): mean final-hop accuracy per layers × hops, each cell with the
    runs per mechanism and its reachable fraction; cells whose ceiling is below `threshold` are hatched
    (unreachable at this depth), untrained cells grey, and the dashed staircase D = L bounds what one hop
    per layer reaches. The colour bar marks the root-guess level 1/K and the threshold."""
    if phase.empty:
        raise ConfigError("the phase table is empty; train plain IC runs to draw the diagram")
    shared, varying = split_formulation(phase)
    panels = list(phase.groupby(varying)) if varying else [((), phase)]
    hops, layers = sorted(phase.hops.unique()), sorted(phase.layers.unique())
    panel_width = 0.95 * len(hops) + 0.6
    fig = Figure(figsize=(max(6.4, 1.8 + panel_width * len(panels)), 2.4 + 0.95 * len(layers)), layout="constrained")
    axes = fig.subplots(1, len(panels), sharey=True, squeeze=False)[0]
    for ax, (key, table) in zip(axes, panels, strict=True):
        image = _phase_panel(ax, table, hops, layers)
        ax.set_title(describe_formulation(dict(zip(varying, key, strict=True)), varying, contrasted=True), fontsize=8)
    axes[0].set_ylabel("layers L")
    colorbar = fig.colorbar(image, ax=list(axes), label="final-hop accuracy", shrink=0.9)
    mark_root_guess(colorbar, float(phase.chance_roots.iloc[0]), threshold)
    untrained = len(panels) * len(hops) * len(layers) > len(phase)
    _phase_legend(fig, untrained, not phase.solvable.all(), threshold)
    fig.suptitle(title_lines(f"{title}: {describe_formulation(phase.iloc[0], shared)}\nper cell: mean final-hop "
                             "accuracy over seeds, runs per mechanism, reach", fig, 9), fontsize=9)
    return fig


def plot_phase_diagram(phase: pd.DataFrame, path: Path | str, threshold: float,
                       title: str = "Depth phase diagram") -> Path:
    """Write `phase_figure` to `path` and return the path."""
    return save_figure(phase_figure(phase, threshold, title), path)


def _phase_panel(ax: Axes, table: pd.DataFrame, hops: list[int], layers: list[int]) -> AxesImage:
    """Draw one formulation's cells on `ax` (untrained ones show the grey background) and return the image."""
    grid = np.full((len(layers), len(hops)), np.nan)
    for row in table.itertuples():
        i, j = layers.index(row.layers), hops.index(row.hops)
        grid[i, j] = row.accuracy
        ax.text(j, i, _cell_text(row), ha="center", va="center", fontsize=7,
                color="black" if row.accuracy > 0.6 else "white")
        if not row.solvable:
            hatch_cell(ax, j, i)
    ax.set_facecolor(NOT_TRAINED_COLOUR)
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
    return image


def _cell_text(row) -> str:
    """A phase cell's accuracy, its runs per mechanism (word marks, never a letter beside a count that
    reads as layers) and its reachable fraction; tables older than the 'not classifiable' class lack its column."""
    counts = {kind: int(getattr(row, kind.replace(" ", "_"), 0)) for kind in MECHANISM_MARKS}
    return f"{row.accuracy:.2f}\n{mechanism_counts(counts, int(row.seeds))}\nreach {row.reachable:.0%}"


def _phase_legend(fig: Figure, untrained: bool, unreachable: bool, threshold: float) -> None:
    """The key under the panels: grey and hatched cells (where the diagram has them), the D = L staircase,
    the mechanism marks and what reach means."""
    handles = [not_trained_handle()] if untrained else []
    if unreachable:
        handles.append(unreachable_handle(f"accuracy ceiling < {threshold:g}"))
    handles.append(Line2D([], [], ls="--", color="red", lw=1.2, label=_D_EQUALS_L))
    handles += [Line2D([], [], ls="none", label=text) for text in [*mechanism_key(), _REACH_KEY]]
    fig.legend(handles=handles, ncol=2 if fig.get_figwidth() >= 9 else 1, handlelength=1.6, **_LEGEND)


def learning_curves_figure(metrics: pd.DataFrame, cells: pd.DataFrame, threshold: float) -> Figure:
    """Validation accuracy against training steps, one panel per (layers, hops) cell of `cells` (phase rows),
    one colour per formulation that varies among them and one line per seed, with the solved `threshold` and
    the root-guess level 1/K: a cell still rising at the last step failed for want of budget, a flat one for
    want of a mechanism."""
    if cells.empty:
        raise ConfigError("no cells to draw learning curves for")
    shared, varying = split_formulation(cells)
    shapes = cells[["layers", "hops"]].drop_duplicates().sort_values(["layers", "hops"])
    formulations = cells[[*shared, *varying]].drop_duplicates().to_dict("records")  # runs picked by every setting
    colours = matplotlib.colormaps["tab10"](np.arange(len(formulations)) % 10)
    root_guess = float(cells.chance_roots.iloc[0])
    n_cols = min(4, len(shapes))
    n_rows = -(-len(shapes) // n_cols)
    fig = Figure(figsize=(max(5.0, 3.2 * n_cols), 1.2 + 2.6 * n_rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(n_rows, n_cols, sharey=True, squeeze=False)).ravel()
    for ax, shape in zip(axes, shapes.itertuples(), strict=False):
        mine = metrics[(metrics.layers == shape.layers) & (metrics.hops == shape.hops)]
        for colour, formulation in zip(colours, formulations, strict=True):
            for _, run in mine[_matching(mine, formulation)].groupby("run_id"):
                ax.plot(run.step, run.val_accuracy, color=colour, lw=1, alpha=0.85)
        ax.axhline(threshold, color="grey", ls=":", lw=1)
        ax.axhline(root_guess, color="black", ls="--", lw=0.8)
        ax.set_title(f"L = {shape.layers}, D = {shape.hops}", fontsize=9)
        ax.set_xlabel("step")
        ax.set_ylim(0, 1.02)
    for ax in axes[len(shapes):]:
        ax.set_visible(False)
    axes[0].set_ylabel("final-hop accuracy")
    handles = [Line2D([], [], color=colour, lw=1,
                      label=describe_formulation(formulation, varying, contrasted=True) or "one line per seed")
               for colour, formulation in zip(colours, formulations, strict=True)]
    handles += [Line2D([], [], color="grey", ls=":", lw=1, label=f"solved ({threshold:g})"),
                Line2D([], [], color="black", ls="--", lw=0.8, label=f"{ROOT_GUESS} = {root_guess:.2f}")]
    fig.legend(handles=handles, ncol=min(3, len(handles)), **_LEGEND)
    fig.suptitle(title_lines("Accuracy against steps in the cells with D > L, one line per seed: "
                             f"{describe_formulation(cells.iloc[0], shared)}", fig, 9), fontsize=9)
    return fig


def plot_learning_curves(metrics: pd.DataFrame, cells: pd.DataFrame, path: Path | str, threshold: float) -> Path:
    """Write `learning_curves_figure` to `path` and return the path."""
    return save_figure(learning_curves_figure(metrics, cells, threshold), path)


def _matching(table: pd.DataFrame, settings: dict) -> pd.Series:
    """Which rows of `table` have every setting of `settings` (all rows for none)."""
    keep = pd.Series(True, index=table.index)
    for column, value in settings.items():
        keep &= table[column] == value
    return keep


def contrast_figure(runs: pd.DataFrame, layers: int, hops: int, threshold: float, root_guess: float,
                    attention: str = "causal", layout: str = "packed") -> Figure:
    """Small multiples of the order × supervision contrast, one panel per link order (rows) × supervision
    (columns) found in `runs` (plain IC rows of a study's results table: order, supervision, attention,
    layout, layers, hops, seed, val_accuracy, mechanism): each seed's final-hop accuracy against hops D
    with `layers` layers of `attention`, marked by its mechanism, the cell D = `hops` shaded as the contrast,
    the hops beyond the reach bound hatched; a combination without runs is drawn as not trained."""
    chosen = runs[(runs.layers == layers) & (runs.attention == attention) & (runs.layout == layout)]
    if chosen.empty:
        raise ConfigError(f"no runs with {layers} layers, {attention} attention and {layout} layout to contrast")
    shared, varying = split_formulation(chosen.drop(columns=["order", "supervision"]))
    if varying:
        raise ConfigError(f"the runs to contrast differ in {', '.join(varying)}; pass runs of one setting of each")
    orders, supervisions = sorted(runs.order.unique()), sorted(runs.supervision.unique())
    hop_axis = sorted({*chosen.hops.unique(), hops})
    fig = Figure(figsize=(1.4 + 2.9 * len(supervisions), 2.4 + 2.2 * len(orders)), layout="constrained")
    axes = fig.subplots(len(orders), len(supervisions), sharex=True, sharey=True, squeeze=False)
    unreachable = {order: _unreachable_hops(hop_axis, layers, attention, order, layout, threshold, root_guess)
                   for order in orders}
    untrained = False
    for (i, order), (j, supervision) in ((o, s) for o in enumerate(orders) for s in enumerate(supervisions)):
        ax = axes[i, j]
        mine = chosen[(chosen.order == order) & (chosen.supervision == supervision)]
        untrained |= mine.empty
        if mine.empty:
            _not_trained_panel(ax)
        else:
            _contrast_panel(ax, mine, unreachable[order], hops, threshold, root_guess)
        ax.set_title(_contrast_title(order, supervision, mine, hops), fontsize=8)
        ax.set_xticks(hop_axis)
        ax.set_xlim(min(hop_axis) - 0.5, max(hop_axis) + 0.5)
    for ax in axes[-1]:
        ax.set_xlabel("hops D")
    for ax in axes[:, 0]:
        ax.set_ylabel("final-hop accuracy")
    _contrast_legend(fig, layers, hops, threshold, root_guess, untrained, any(unreachable.values()))
    setting = describe_formulation(chosen.iloc[0], shared)
    fig.suptitle(title_lines(f"Link order × supervision with {layers} layers, {setting}: final-hop accuracy of "
                             "each seed", fig, 9), fontsize=9)
    return fig


def plot_order_supervision_contrast(runs: pd.DataFrame, path: Path | str, layers: int, hops: int, threshold: float,
                                    root_guess: float, attention: str = "causal", layout: str = "packed") -> Path:
    """Write `contrast_figure` to `path` and return the path."""
    return save_figure(contrast_figure(runs, layers, hops, threshold, root_guess, attention, layout), path)


def _unreachable_hops(hop_axis: list[int], layers: int, attention: str, order: str, layout: str, threshold: float,
                      root_guess: float) -> list[int]:
    """The hops whose accuracy ceiling with `layers` layers stays below `threshold` (K = 1 / `root_guess`
    chains): the rule that hatches the phase diagram's cells."""
    chains = round(1 / root_guess)
    return [d for d in hop_axis
            if accuracy_ceiling(reachable_fraction(d, layers, attention, order, layout).fraction, chains) < threshold]


def _not_trained_panel(ax: Axes) -> None:
    """A grey panel that says no run of its combination was trained."""
    ax.set_facecolor(NOT_TRAINED_COLOUR)
    ax.text(0.5, 0.5, NOT_TRAINED, transform=ax.transAxes, ha="center", va="center", fontsize=9, color="0.3")
    ax.set_ylim(-0.03, 1.05)


def _contrast_panel(ax: Axes, runs: pd.DataFrame, unreachable: list[int], hops: int, threshold: float,
                    root_guess: float) -> None:
    """One order × supervision panel: hatched unreachable hops, the contrast column, the solved and root-guess
    levels and every run as a point (seeds side by side within a hop)."""
    for d in unreachable:
        ax.axvspan(d - 0.5, d + 0.5, fill=False, hatch=UNREACHABLE_HATCH, edgecolor="0.7", lw=0)
    ax.axvspan(hops - 0.5, hops + 0.5, color="gold", alpha=0.25, lw=0)
    ax.axhline(threshold, color="grey", ls=":", lw=1)
    ax.axhline(root_guess, color="black", ls="--", lw=0.8)
    seeds = sorted(runs.seed.unique())
    step = min(0.12, 0.7 / len(seeds))
    offset = {seed: (k - (len(seeds) - 1) / 2) * step for k, seed in enumerate(seeds)}
    for mechanism, group in runs.groupby("mechanism"):
        ax.scatter(group.hops + group.seed.map(offset), group.val_accuracy, zorder=3, **_MARKERS[mechanism][0])
    ax.set_ylim(-0.03, 1.05)


def _contrast_title(order: str, supervision: str, runs: pd.DataFrame, hops: int) -> str:
    """A panel's formulation and what its runs did at the contrast cell D = `hops`."""
    cell = runs[runs.hops == hops]
    if cell.empty:
        outcome = "not trained"
    else:
        counts = {kind: int((cell.mechanism == kind).sum()) for kind in MECHANISM_MARKS}
        outcome = f"mean {cell.val_accuracy.mean():.2f}, {mechanism_counts(counts, len(cell)) or 'no run solved'}"
    return f"{order} order, {supervision} supervision\nD = {hops}: {outcome}"


def _contrast_legend(fig: Figure, layers: int, hops: int, threshold: float, root_guess: float, untrained: bool,
                     unreachable: bool) -> None:
    """The key under the panels: a marker per mechanism, the levels, the contrast column, and the hatched
    hops and grey panels where the figure has them."""
    handles = [Line2D([], [], ls="none", marker=style["marker"], markersize=size, color=style.get("color", "0.35"),
                      markerfacecolor=style.get("facecolor", style.get("color")), label=text)
               for style, size, text in _MARKERS.values()]
    handles += [Line2D([], [], color="grey", ls=":", lw=1, label=f"solved ({threshold:g})"),
                Line2D([], [], color="black", ls="--", lw=0.8, label=f"{ROOT_GUESS} = {root_guess:.2f}"),
                Patch(facecolor="gold", alpha=0.25, label=f"the contrast: D = {hops} with {layers} layers")]
    if unreachable:
        handles.append(unreachable_handle(f"accuracy ceiling < {threshold:g}"))
    if untrained:
        handles.append(not_trained_handle())
    fig.legend(handles=handles, ncol=2, handlelength=1.6, **_LEGEND)
