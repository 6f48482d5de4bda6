"""Figures of the retrieval circuit: attention maps of key heads and a layers × heads circuit diagram."""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from headway.plots.marks import save_figure

ROLE_COLOURS = {"link→next": "#1b9e77", "link→prev": "#66a61e", "query→class": "#e6ab02",
                "query→rule": "#a6761d", "none": "#bdbdbd"}
_QUERY_COLOURS = ["#d95f02", "#7570b3", "#e7298a", "#e41a1c", "#377eb8", "#984ea3", "#ff7f00", "#a65628"]
# Attention maps side by side at most, and the figure's width: a report column is 1000 pixels (10 inches at the
# figure's 100 dpi), so panels this size are shown unscaled and their 8-point labels stay readable.
MAP_COLUMNS, MAP_WIDTH_IN, MAP_DPI = 3, 10.0, 100


def role_colour(role: str) -> str:
    """One fixed colour per role (query→hop j colours cycle by j)."""
    if role.startswith("query→hop"):
        return _QUERY_COLOURS[(int(role.removeprefix("query→hop")) - 1) % len(_QUERY_COLOURS)]
    return ROLE_COLOURS.get(role, "#636363")


def plot_attention_maps(patterns: np.ndarray, heads: pd.DataFrame, labels: list[str], chain_statements: list[int],
                        path: Path | str, title: str) -> Path:
    """Statement-level attention ([L, H, P, P], one model, one example) of each head in `heads`
    (rows with layer, head, role); statements of the queried chain and the query are labelled in bold red."""
    n = max(len(heads), 1)
    cols = min(n, MAP_COLUMNS)
    rows = -(-n // cols)
    panel = MAP_WIDTH_IN / MAP_COLUMNS
    tick_size = 8 if len(labels) <= 16 else 6.5
    fig = Figure(figsize=(cols * panel, rows * (panel + 0.2) + 0.7), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    for index, (ax, row) in enumerate(zip(axes.ravel(), heads.itertuples())):
        ax.imshow(patterns[row.layer, row.head], cmap="Blues", vmin=0, vmax=1)
        ax.set_title(f"L{row.layer + 1}H{row.head}  {row.role}", fontsize=11,
                     color=role_colour(row.role) if row.role != "none" else "#4d4d4d")
        ticks = range(len(labels))
        ax.set_xticks(ticks, labels, rotation=90, fontsize=tick_size)
        ax.set_yticks(ticks, labels, fontsize=tick_size)
        for tick_labels in (ax.get_xticklabels(), ax.get_yticklabels()):
            for i, tick in enumerate(tick_labels):
                if i in chain_statements or i == len(labels) - 1:
                    tick.set_color("#cb181d")
                    tick.set_fontweight("bold")
        if index // cols == rows - 1 or index + cols >= len(heads):  # the lowest panel of its column
            ax.set_xlabel("attended statement", fontsize=9)
        if index % cols == 0:
            ax.set_ylabel("from statement", fontsize=9)
    for ax in axes.ravel()[len(heads):]:
        ax.set_visible(False)
    fig.suptitle(textwrap.fill(title, width=int(cols * panel * 11)), fontsize=11)
    return save_figure(fig, path, dpi=MAP_DPI, tight=False)


def plot_circuit(heads: pd.DataFrame, path: Path | str, title: str) -> Path:
    """Layers (bottom to top) × heads of one model: each head coloured by role, circuit heads outlined
    with their mean-ablation drop; arrows show how the answer travels: link heads write into the link
    positions, query heads read them and write into the query position, which is read out."""
    layers, n_heads = int(heads.layer.max()) + 1, int(heads["head"].max()) + 1
    fig = Figure(figsize=(2.6 + 1.25 * n_heads, 1.4 + 1.1 * layers))
    ax = fig.subplots()
    link_x, query_x = -1.2, n_heads + 0.2
    for layer in range(layers + 1):
        ax.plot([link_x, link_x], [layer - 0.5, layer + 0.5], color="#1b9e77", lw=3, alpha=0.4)
        ax.plot([query_x, query_x], [layer - 0.5, layer + 0.5], color="#d95f02", lw=3, alpha=0.4)
    ax.text(link_x, -0.95, "link\npositions", ha="center", va="top", fontsize=8, color="#1b9e77")
    ax.text(query_x, -0.95, "query\nposition", ha="center", va="top", fontsize=8, color="#d95f02")
    ax.annotate("", (query_x, layers + 0.6), (query_x, layers + 0.05),
                arrowprops={"arrowstyle": "->", "color": "#d95f02"})
    ax.text(query_x, layers + 0.65, "answer", ha="center", va="bottom", fontsize=9, color="#d95f02")
    for row in heads.itertuples():
        x, y = row.head, row.layer + 0.5
        inside = bool(row.in_circuit)
        ax.add_patch(Rectangle((x - 0.42, y - 0.3), 0.84, 0.6, facecolor=role_colour(row.role),
                               alpha=0.95 if inside else 0.25, edgecolor="black" if inside else "none", lw=1.5))
        label = row.role if row.role != "none" else "–"
        if inside:
            label += f"\nΔ{row.mean_drop:+.2f}"
        ax.text(x, y, label, ha="center", va="center", fontsize=7)
        if not inside:
            continue
        if row.role.startswith("link"):
            _arrow(ax, (link_x, y - 0.3), (x - 0.42, y), "#1b9e77")
            _arrow(ax, (x - 0.42, y + 0.1), (link_x, y + 0.45), "#1b9e77")
        else:
            _arrow(ax, (link_x, y - 0.3), (x - 0.42, y - 0.1), "#888888")
            _arrow(ax, (x + 0.42, y), (query_x, y + 0.35), role_colour(row.role))
    ax.set_xlim(link_x - 0.8, query_x + 0.8)
    ax.set_ylim(-1.6, layers + 1.0)
    ax.set_yticks([layer + 0.5 for layer in range(layers)], [f"layer {layer + 1}" for layer in range(layers)])
    ax.set_xticks(range(n_heads), [f"head {h}" for h in range(n_heads)], fontsize=8)
    ax.tick_params(length=0)
    for side in ("top", "right", "left", "bottom"):
        ax.spines[side].set_visible(False)
    ax.set_title(textwrap.fill(title, width=60), fontsize=10)
    fig.tight_layout()
    return save_figure(fig, path, dpi=110, tight=False)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], colour: str) -> None:
    ax.annotate("", end, start, arrowprops={"arrowstyle": "->", "color": colour, "lw": 1.2,
                                            "connectionstyle": "arc3,rad=0.15"})
