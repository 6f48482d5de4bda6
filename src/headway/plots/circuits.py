"""Figures of a sorting model's heads: OV and QK circuits as heat-maps, and the per-number diagonal
scores that the mode classifier reads.

Figures are built as `matplotlib.figure.Figure` objects (no pyplot state, any backend); the caller
saves them with `fig.savefig(path)`.
"""

from __future__ import annotations

import textwrap

import numpy as np
from matplotlib.figure import Figure
from torch import Tensor

from headway.errors import ConfigError

_HEAD_COLOURS = ["#1b9e77", "#d95f02", "#7570b3", "#e7298a", "#66a61e", "#e6ab02", "#a6761d", "#666666"]


def _array(values: Tensor | np.ndarray) -> np.ndarray:
    return values.detach().cpu().numpy() if isinstance(values, Tensor) else np.asarray(values)


def _number_ticks(count: int) -> list[int]:
    """Tick positions every 5 or 10 numbers, readable for 10 to 100 numbers."""
    step = 10 if count > 30 else 5
    return list(range(0, count, step))


def _heatmap(fig: Figure, ax, matrix: np.ndarray, title: str) -> None:
    """Diverging heat-map centred at 0, with its own colour bar."""
    limit = float(np.abs(matrix).max()) or 1.0
    image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.03)
    ax.set_title(title, fontsize=9)


def plot_circuits(ov: Tensor | np.ndarray, qk: Tensor | np.ndarray, title: str) -> Figure:
    """One row per head of one model: the OV circuit [V, V] (source number → output number) and the
    QK circuit [V+1, V] (query token → key number, SEP the last row), each row of QK centred because
    softmax sees only differences between the keys of one query."""
    ov, qk = _array(ov), _array(qk)
    if ov.ndim != 3 or ov.shape[1] != ov.shape[2] or qk.shape != (ov.shape[0], ov.shape[1] + 1, ov.shape[1]):
        raise ConfigError(f"ov {ov.shape} and qk {qk.shape} do not fit; expected [H, V, V] and [H, V+1, V]")
    n_heads, values = ov.shape[:2]
    fig = Figure(figsize=(9.5, 4.0 * n_heads + 0.6))
    axes = fig.subplots(n_heads, 2, squeeze=False)
    ticks = _number_ticks(values)
    for h in range(n_heads):
        ov_ax, qk_ax = axes[h]
        _heatmap(fig, ov_ax, ov[h], f"head {h}: OV (logit change)")
        ov_ax.set_xlabel("output number")
        ov_ax.set_ylabel("source number (attended)")
        ov_ax.set_xticks(ticks)
        ov_ax.set_yticks(ticks)
        _heatmap(fig, qk_ax, qk[h] - qk[h].mean(axis=1, keepdims=True), f"head {h}: QK (row-centred score)")
        qk_ax.set_xlabel("key number (in the list)")
        qk_ax.set_ylabel("query token")
        qk_ax.set_xticks(ticks)
        rows = [t for t in ticks if t < values - 2]  # keep the SEP label clear of the last number's
        qk_ax.set_yticks(rows + [values], [str(t) for t in rows] + ["SEP"])
    fig.suptitle(textwrap.fill(title, width=90), fontsize=10)
    fig.tight_layout()
    return fig


def plot_diagonal_scores(scores: Tensor | np.ndarray, copies: Tensor | np.ndarray, suppresses: Tensor | np.ndarray,
                         title: str, threshold: float) -> Figure:
    """Diagonal score of every number [H, V] as one line per head, with the ±`threshold` of copying and
    suppressing (the sorting study's `copy` rule) dashed and the numbers each head copies (dots) or suppresses (crosses) marked."""
    scores, copies, suppresses = _array(scores), _array(copies).astype(bool), _array(suppresses).astype(bool)
    if scores.ndim != 2 or copies.shape != scores.shape or suppresses.shape != scores.shape:
        raise ConfigError(f"scores {scores.shape}, copies {copies.shape} and suppresses {suppresses.shape} "
                          "must all be [H, V]")
    n_heads, values = scores.shape
    numbers = np.arange(values)
    fig = Figure(figsize=(8.0, 3.6))
    ax = fig.subplots()
    for h in range(n_heads):
        colour = _HEAD_COLOURS[h % len(_HEAD_COLOURS)]
        ax.plot(numbers, scores[h], color=colour, lw=1.3, label=f"head {h}")
        ax.scatter(numbers[copies[h]], scores[h, copies[h]], color=colour, s=14, zorder=3)
        ax.scatter(numbers[suppresses[h]], scores[h, suppresses[h]], color=colour, marker="x", s=18, zorder=3)
    for level in (threshold, -threshold):
        ax.axhline(level, color="#636363", ls="--", lw=0.9)
    ax.axhline(0.0, color="#bdbdbd", lw=0.6)
    ax.text(values - 0.5, threshold, " copies", va="bottom", ha="right", fontsize=7, color="#636363")
    ax.text(values - 0.5, -threshold, " suppresses", va="top", ha="right", fontsize=7, color="#636363")
    ax.set_xlim(-0.5, values - 0.5)
    ax.set_xticks(_number_ticks(values))
    ax.set_xlabel("number v (attended and output)")
    ax.set_ylabel("diagonal score (z within OV row)")
    ax.legend(fontsize=8, frameon=False, ncol=min(n_heads, 4))
    ax.set_title(textwrap.fill(title, width=80), fontsize=10)
    fig.tight_layout()
    return fig
