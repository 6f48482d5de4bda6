"""Figures of the sorting study: training curves, the mode map, mode fractions against the mean
gap δ̄, and ablations by gap size (the LLC figures are in `headway.plots.development`)."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.colors import ListedColormap
from matplotlib.figure import Figure
from matplotlib.patches import Patch

from headway.plots.style import OUTSIDE
from headway.analysis.sorting.effects import GAP_BINS
from headway.analysis.sorting.modes import MODES

MODE_COLOURS = {"splitting": "#1b9e77", "copy_suppression": "#d95f02", "overlapping": "#7570b3", "other": "#bbbbbb"}


def _decay_label(value: float) -> str:
    return f"weight decay {value:g}" if value else "no weight decay"


def plot_training(metrics: pd.DataFrame) -> Figure:
    """Validation loss and per-token accuracy of every run over training (log steps), by weight decay."""
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2)
    colours = {wd: matplotlib.colormaps["tab10"](i) for i, wd in enumerate(sorted(metrics.weight_decay.unique(), reverse=True))}
    for (run_id, wd), frame in metrics.groupby(["run_id", "weight_decay"]):
        frame = frame[frame.step > 0]
        axes[0].plot(frame.step, frame.val_loss, color=colours[wd], alpha=0.5, lw=1)
        axes[1].plot(frame.step, frame.val_accuracy, color=colours[wd], alpha=0.5, lw=1)
    axes[0].set(xscale="log", yscale="log", xlabel="step", ylabel="validation loss")
    axes[1].set(xscale="log", xlabel="step", ylabel="per-token accuracy (teacher forced)", ylim=(0, 1.02))
    axes[1].axhline(0.95, color="k", ls=":", lw=1)
    axes[0].legend(handles=[Patch(color=c, label=_decay_label(wd)) for wd, c in colours.items()], fontsize=8)
    fig.suptitle("Training: every run")
    fig.tight_layout()
    return fig


def plot_mode_map(final: pd.DataFrame, data_order: list[str]) -> Figure:
    """Each trained model's mode: seeds × data, one panel per weight decay."""
    decays = sorted(final.weight_decay.unique(), reverse=True)
    seeds = sorted(final.seed.unique())
    cmap = ListedColormap([MODE_COLOURS[m] for m in MODES])
    fig = Figure(figsize=(1.2 + 1.1 * len(data_order) * len(decays), 1.5 + 0.3 * len(seeds)))
    axes = fig.subplots(1, len(decays), squeeze=False)
    for ax, wd in zip(axes[0], decays):
        grid = np.full((len(seeds), len(data_order)), np.nan)
        for row in final[final.weight_decay == wd].itertuples():
            grid[seeds.index(row.seed), data_order.index(row.data)] = MODES.index(row.mode)
        ax.imshow(grid, cmap=cmap, vmin=-0.5, vmax=len(MODES) - 0.5, aspect="auto")
        ax.set_xticks(range(len(data_order)), data_order, rotation=30, ha="right", fontsize=8)
        ax.set_yticks(range(len(seeds)), [str(s) for s in seeds], fontsize=7)
        ax.set(xlabel="training data", ylabel="seed", title=_decay_label(wd))
    fig.legend(handles=[Patch(color=MODE_COLOURS[m], label=m.replace("_", "-")) for m in MODES],
               loc="upper center", ncol=len(MODES), fontsize=8, bbox_to_anchor=(0.5, 1.0))
    fig.tight_layout(rect=(0, 0, 1, 0.88))
    return fig


def plot_mode_fractions(fractions: pd.DataFrame) -> Figure:
    """Fraction of seeds in each mode against the realised mean gap δ̄; solid with weight decay,
    dashed without, with the Wilson intervals as error bars. `fractions` has columns weight_decay, mean_gap,
    mode, fraction, ci_low, ci_high."""
    fig = Figure(figsize=(8.5, 4), layout="constrained")
    ax = fig.subplots()
    for (wd, mode), frame in fractions.groupby(["weight_decay", "mode"]):
        frame = frame.sort_values("mean_gap")
        error = [frame.fraction - frame.ci_low, frame.ci_high - frame.fraction]
        ax.errorbar(frame.mean_gap, frame.fraction, yerr=error, marker="o", color=MODE_COLOURS[mode],
                    ls="-" if wd else "--", capsize=2, elinewidth=0.8, alpha=0.85,
                    label=f"{mode.replace('_', '-')}, {_decay_label(wd)}")
    ax.set(xlabel="mean gap δ̄ between adjacent sorted numbers (measured)", ylabel="fraction of seeds",
           ylim=(-0.03, 1.03), title="Which mode the heads settle into, by training data")
    ax.legend(**OUTSIDE)
    return fig


def plot_ablation(ablation: pd.DataFrame, title: str) -> Figure:
    """Change in loss and in output entropy when each head is ablated, by gap size of the target."""
    frame = ablation[(ablation["head"] >= 0) & (ablation.gap_bin != "all")]
    bins = [b for b in GAP_BINS if b in set(frame.gap_bin)]
    fig = Figure(figsize=(11, 3.8))
    axes = fig.subplots(1, 2)
    for (head, kind), group in frame.groupby(["head", "ablation"]):
        group = group.set_index("gap_bin").reindex(bins)
        style = {"marker": "o", "ls": "-" if kind == "zero" else "--", "color": matplotlib.colormaps["tab10"](int(head)),
                     "label": f"head {head}, {kind}"}
        axes[0].plot(bins, group.d_loss, **style)
        axes[1].plot(bins, group.d_entropy, **style)
    axes[0].set(xlabel="gap to the previous sorted number", ylabel="Δ loss (ablated − clean)")
    axes[1].set(xlabel="gap to the previous sorted number", ylabel="Δ output entropy (nats)")
    axes[1].axhline(0, color="k", lw=0.5)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    return fig
