"""Figures of development over training, for any task: loss and LLC with stage boundaries, and the
SGLD chains behind one LLC estimate."""

from __future__ import annotations

import textwrap

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.plots.style import OUTSIDE


def plot_development(loss: pd.DataFrame, llc: pd.DataFrame, boundaries: pd.DataFrame, title: str) -> Figure:
    """Loss (top: validation loss, and the training-pool loss at each traced checkpoint) and the
    LLC of the whole model and of each head (bottom, ± its standard error: chains and L(w*)) over training, with the
    stage boundaries as vertical lines. Checkpoints with λ̂ ≤ 0 (w* not a local minimum) are
    shaded and left out of the LLC lines."""
    fig = Figure(figsize=(8.5, 5.5), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    loss = loss[loss.step > 0]
    top.plot(loss.step, loss.val_loss, color="k", label="validation")
    whole = llc[(llc.weights == "all") & (llc.step > 0)].sort_values("step")
    top.plot(whole.step, whole.init_loss, "o", ms=3, color="tab:gray", label="training pool, at w*")
    top.set(yscale="log", ylabel="loss")
    top.set_title(textwrap.fill(title, 80))
    top.legend(**OUTSIDE)
    local = whole[whole.llc_mean > 0]
    for weights, frame in llc[llc.step.isin(local.step)].groupby("weights", sort=False):
        frame = frame.sort_values("step")
        bottom.errorbar(frame.step, frame.llc_mean, yerr=frame.llc_se, marker="o", ms=3, capsize=2,
                        lw=2 if weights == "all" else 1, label="whole model" if weights == "all" else weights)
    if len(local) < len(whole):
        edge = local.step.min() if len(local) else whole.step.max()
        for ax in (top, bottom):
            ax.axvspan(whole.step.min(), edge, color="0.9", zorder=0)
        bottom.text(whole.step.min(), 0.02, " λ̂ ≤ 0: w* not a local minimum", transform=bottom.get_xaxis_transform(),
                    fontsize=7, color="0.4")
    bottom.set(xscale="log", xlabel="step", ylabel="LLC λ̂")
    bottom.legend(**OUTSIDE)
    for row in boundaries.itertuples():
        for ax in (top, bottom):
            ax.axvline(row.step, color="tab:red" if row.source == "llc" else "tab:blue", ls="--", lw=1, alpha=0.7)
    return fig


def plot_sgld_traces(llc: pd.DataFrame, title: str) -> Figure:
    """SGLD diagnostics at one checkpoint: each chain's draw losses (rows `llc` of one run and step,
    one panel per weight subset), with the loss at w* dashed; chains should level off together."""
    width = max(6.0, 3.6 * len(llc))
    fig = Figure(figsize=(width, 3.4), layout="constrained")
    axes = fig.subplots(1, len(llc), squeeze=False)
    for ax, row in zip(axes[0], llc.itertuples()):
        for chain in row.loss_trace:
            ax.plot(np.asarray(chain, dtype=float), lw=0.8)
        ax.axhline(row.init_loss, color="k", ls="--", lw=1)
        which = "whole model" if row.weights == "all" else row.weights
        ax.set(title=f"{which}: λ̂ {row.llc_mean:.3g} ± {row.llc_se:.2g}", xlabel="draw", ylabel="minibatch loss")
    fig.suptitle(textwrap.fill(title, int(width * 10)))  # about ten characters an inch: never wider than the figure
    return fig
