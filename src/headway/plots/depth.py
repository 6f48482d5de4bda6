"""Figure: accuracy heat-map over layers × hops with the ⌈log₃(2D)⌉ boundary."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from headway.tasks.retrieval.theory import min_layers


def plot_depth(table: pd.DataFrame, path: Path | str, title: str = "Retrieval: accuracy vs depth") -> Path:
    """Write the heat-map of `depth_table` output to `path` (PNG or SVG) and return the path."""
    hops = sorted(table.hops.unique())
    layers = sorted(table.layers.unique())
    grid = np.full((len(layers), len(hops)), np.nan)
    spread = np.full_like(grid, np.nan)
    for row in table.itertuples():
        i, j = layers.index(row.layers), hops.index(row.hops)
        grid[i, j] = row.accuracy
        spread[i, j] = row.accuracy_max - row.accuracy_min
    fig = Figure(figsize=(2.4 + 1.1 * len(hops), 2.0 + 0.9 * len(layers)))
    ax = fig.subplots()
    image = ax.imshow(grid, origin="lower", cmap="viridis", vmin=0, vmax=1, aspect="auto")
    for i in range(len(layers)):
        for j in range(len(hops)):
            if not np.isnan(grid[i, j]):
                colour = "black" if grid[i, j] > 0.6 else "white"
                ax.text(j, i, f"{grid[i, j]:.2f}\n±{spread[i, j] / 2:.2f}", ha="center", va="center",
                        fontsize=8, color=colour)
    # The bound as a staircase: cells below it cannot solve the task under Theorem 1.
    xs, ys = [], []
    for j, d in enumerate(hops):
        y = layers.index(min_layers(d)) - 0.5 if min_layers(d) in layers else len(layers) - 0.5
        xs += [j - 0.5, j + 0.5]
        ys += [y, y]
    ax.plot(xs, ys, color="red", lw=2, label="⌈log₃(2D)⌉")
    ax.set_xticks(range(len(hops)), [str(h) for h in hops])
    ax.set_yticks(range(len(layers)), [str(n) for n in layers])
    ax.set_xlabel("hops D")
    ax.set_ylabel("layers")
    chance_v, chance_k = table.chance_vocab.iloc[0], table.chance_roots.iloc[0]
    ax.set_title(f"{title}\nchance 1/V = {chance_v:.2f}, root guess 1/K = {chance_k:.2f}", fontsize=9)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.22), fontsize=8, frameon=False)
    fig.colorbar(image, ax=ax, label="final-hop accuracy\n(mean over seeds ± half range)")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=150)
    return path
