"""Figures for linear probes: measured reach per layer against the 3^t bound, and accuracy heat-maps."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.plots.marks import save_figure
from headway.analysis.retrieval.probes import SITES

_MARKERS = {"query": "o", "link": "s"}


def plot_probe_reach(reach: pd.DataFrame, path: Path | str) -> Path:
    """Write reach per layer and site (`probe_reach` output; mean, min–max bars) with the bounds; return path."""
    fig = Figure(figsize=(5.2, 3.8))
    ax = fig.subplots()
    layers = np.arange(int(reach.layer.max()) + 1)
    for offset, site in zip((-0.06, 0.06), SITES):
        part = reach[reach.site == site].groupby("layer").reach.agg(["mean", "min", "max"])
        if part.empty:
            continue
        errors = [part["mean"] - part["min"], part["max"] - part["mean"]]
        ax.errorbar(part.index + offset, part["mean"], yerr=errors, marker=_MARKERS[site], capsize=3,
                    label=f"{site} site (measured)")
    ax.step(layers, 3**layers // 2, where="mid", color="red", lw=2, label="⌊3ᵗ/2⌋ (query bound)")
    ax.plot(layers, 3.0**layers, color="grey", ls=":", label="3ᵗ (tripling)")
    ax.axhline(reach.max_hops.max(), color="black", lw=0.8, ls="--", label="largest hop probed")
    if max(reach.reach.max(), 3 ** layers[-1]) > 20:
        ax.set_yscale("symlog", linthresh=10)
    ax.set_xticks(layers)
    ax.set_xlabel("layer t (0 = embedding)")
    ax.set_ylabel("hop distance")
    ax.set_title("Linear-probe reach per layer vs the 3^t bound", fontsize=10)
    ax.legend(fontsize=7, frameon=False)
    return save_figure(fig, path)


def plot_probe_accuracy(table: pd.DataFrame, path: Path | str) -> Path:
    """Write per-site heat-maps of probe accuracy (layer × hops, mean over instances; `depth_probes`
    output) to `path` and return the path."""
    sites = [site for site in SITES if (table.site == site).any()]
    layers, hops = sorted(table.layer.unique()), sorted(table.hops.unique())
    fig = Figure(figsize=(1.6 + 1.4 * len(hops) * len(sites), 1.6 + 0.7 * len(layers)))
    axes = fig.subplots(1, len(sites), squeeze=False)
    for ax, site in zip(axes[0], sites):
        mean = table[table.site == site].groupby(["layer", "hops"]).accuracy.mean()
        grid = np.full((len(layers), len(hops)), np.nan)
        for (layer, k), value in mean.items():
            grid[layers.index(layer), hops.index(k)] = value
        image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
        for i in range(len(layers)):
            for j in range(len(hops)):
                if not np.isnan(grid[i, j]):
                    ax.text(j, i, f"{grid[i, j]:.2f}", ha="center", va="center", fontsize=8,
                            color="black" if grid[i, j] > 0.6 else "white")
        ax.set_xticks(range(len(hops)), [str(k) for k in hops])
        ax.set_yticks(range(len(layers)), [str(t) for t in layers])
        ax.set_xlabel("hop distance k")
        ax.set_ylabel("layer t")
        ax.set_title(f"{site} site", fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), label="probe accuracy\n(mean over instances)")
    fig.suptitle(f"Linear-probe accuracy (chance {table.chance.iloc[0]:.2f})", fontsize=10)
    return save_figure(fig, path)
