"""Figures of the modular-addition study: train and test accuracy over training (grokking), the
Fourier spectra of grokked and other models, and their Fourier measures over training."""

from __future__ import annotations

import matplotlib
import numpy as np
import pandas as pd
from matplotlib.figure import Figure


def _decay_label(value: float) -> str:
    return f"weight decay {value:g}" if value else "no weight decay"


def plot_grokking(metrics: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Per weight decay, every run's training-set accuracy (solid) and test accuracy (dashed) over
    training; dotted lines mark each run's grokking step."""
    decays = sorted(runs.weight_decay.unique(), reverse=True)
    fig = Figure(figsize=(5.0 * len(decays), 4.3), layout="constrained")
    axes = fig.subplots(1, len(decays), squeeze=False, sharey=True)[0]
    colours = matplotlib.colormaps["tab10"]
    for ax, wd in zip(axes, decays):
        for i, run in enumerate(runs[runs.weight_decay == wd].itertuples()):
            frame = metrics[(metrics.run_id == run.run_id) & (metrics.step > 0)].sort_values("step")
            label = f"seed {run.seed}, fraction {run.train_fraction:g}"
            ax.plot(frame.step, frame.train_accuracy, color=colours(i % 10), label=label)
            ax.plot(frame.step, frame.val_accuracy, color=colours(i % 10), ls="--")
            if np.isfinite(run.generalised_step):
                ax.axvline(run.generalised_step, color=colours(i % 10), ls=":", lw=1)
        ax.set(xscale="log", xlabel="step", title=_decay_label(wd))
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=2, fontsize=8, frameon=False,
                  title="solid: train, dashed: test", title_fontsize=8)  # below the panel, off the curves
    axes[0].set_ylabel("accuracy")
    return fig


def plot_spectra(spectrum: pd.DataFrame, runs: pd.DataFrame, titles: dict[str, str]) -> Figure:
    """Embedding (top) and logit (bottom) share per frequency of the runs in `titles` (run_id -> label);
    dashed: the share every frequency would hold if the spectrum were flat."""
    fig = Figure(figsize=(1.5 + 3.6 * len(titles), 5.5))
    axes = fig.subplots(2, len(titles), squeeze=False, sharex=True)
    for column, (run_id, title) in enumerate(titles.items()):
        frame = spectrum[spectrum.run_id == run_id].sort_values("frequency")
        for row, (share, label) in enumerate((("embedding_share", "embedding norm share"),
                                              ("logit_share", "logit variance share"))):
            ax = axes[row, column]
            ax.bar(frame.frequency, frame[share], color="tab:blue" if row == 0 else "tab:orange")
            ax.axhline(1 / len(frame), color="k", ls="--", lw=0.8)
            ax.set(ylabel=label if column == 0 else None, ylim=(0, 1))
        axes[0, column].set_title(title, fontsize=9)
        axes[1, column].set_xlabel("frequency k")
    fig.tight_layout()
    return fig


def plot_fourier_curves(curve: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Effective number of embedding frequencies (left) and the logits' share on the final key
    frequencies (right) over training, per run; dotted lines mark grokking steps."""
    fig = Figure(figsize=(10, 3.8))
    left, right = fig.subplots(1, 2)
    colours = {wd: matplotlib.colormaps["tab10"](i) for i, wd in enumerate(sorted(runs.weight_decay.unique(), reverse=True))}
    for run in runs.itertuples():
        frame = curve[(curve.run_id == run.run_id) & (curve.step > 0)].sort_values("step")
        style = {"color": colours[run.weight_decay], "alpha": 0.8}
        left.plot(frame.step, frame.effective_frequencies, **style)
        right.plot(frame.step, frame.key_logit_share, **style)
        if np.isfinite(run.generalised_step):
            for ax in (left, right):
                ax.axvline(run.generalised_step, ls=":", lw=0.8, **style)
    for wd, colour in colours.items():
        left.plot([], [], color=colour, label=_decay_label(wd))
    left.set(xscale="log", xlabel="step", ylabel="effective frequencies (1 / Σ share²)")
    right.set(xscale="log", xlabel="step", ylabel="logit variance on the final key frequencies", ylim=(0, 1))
    left.legend(fontsize=8)
    fig.tight_layout()
    return fig
