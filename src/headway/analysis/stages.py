"""Developmental stages: boundaries found from a run's loss curve and LLC curve over training.

The rule (docs/study-sorting.md), applied on log10(step) because development is log-paced:

1. Checkpoints whose λ̂ is not positive are left out of the LLC part of the rule: SGLD found lower
   loss than w*, so w* is not a local minimum there (early in training) and λ̂ is not an LLC.
   If such checkpoints come first, the first checkpoint with λ̂ > 0 is a boundary ("local").
2. Both curves are smoothed with a centred moving average over `window` points. LLC boundaries:
   the interior turning points of the smoothed LLC curve (a rise that becomes a fall or the
   reverse), kept only when the curve moves by at least `min_change` of its range on both sides
   of the turn, so chain noise does not split stages.
3. Loss boundaries: the end of the initial plateau (the first step where the smoothed loss has
   fallen by `plateau` of its total drop) and the start of the final plateau (the first step
   where it is within `plateau` of its final value).
4. Boundaries closer than one checkpoint interval to an earlier one are merged into it.

A stage is the interval between consecutive boundaries; each is labelled by what the LLC does
in it (rises, falls or flat; "not local" before the first checkpoint with λ̂ > 0), which is how
developmental-interpretability papers name them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import pandas as pd

from headway.errors import ConfigError


@dataclass(frozen=True)
class StageRule:
    """Thresholds of the boundary rule (see the module docstring)."""

    window: int = 3
    min_change: float = 0.1
    plateau: float = 0.1


def smooth(values: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average that keeps the ends (shorter windows there)."""
    half = window // 2
    out = np.empty(len(values))
    for i in range(len(values)):
        out[i] = np.nanmean(values[max(0, i - half) : i + half + 1])
    return out


def llc_turns(steps: np.ndarray, llc: np.ndarray, rule: StageRule = StageRule()) -> list[tuple[int, str]]:
    """Steps where the smoothed LLC turns (maximum or minimum) by a clear margin."""
    curve = smooth(np.asarray(llc, dtype=float), rule.window)
    if len(curve) < 3:  # a turn needs a point on each side
        return []
    span = np.nanmax(curve) - np.nanmin(curve)
    if not np.isfinite(span) or span <= 0:
        return []
    turns: list[tuple[int, str]] = []
    anchor = 0  # the last accepted turn (or the start)
    for i in range(1, len(curve) - 1):
        before = curve[i] - curve[anchor]
        after = curve[i + 1 :] - curve[i]
        if before > 0 and curve[i] >= curve[i - 1] and curve[i] >= curve[i + 1]:
            kind, drop = "max", -np.nanmin(after)
        elif before < 0 and curve[i] <= curve[i - 1] and curve[i] <= curve[i + 1]:
            kind, drop = "min", np.nanmax(after)
        else:
            continue
        if abs(before) >= rule.min_change * span and drop >= rule.min_change * span:
            turns.append((int(steps[i]), kind))
            anchor = i
    return turns


def loss_plateaus(steps: np.ndarray, loss: np.ndarray, rule: StageRule = StageRule()) -> list[tuple[int, str]]:
    """End of the initial loss plateau and start of the final one."""
    curve = smooth(np.asarray(loss, dtype=float), rule.window)
    first, last = curve[0], curve[-1]
    drop = first - last
    if not np.isfinite(drop) or drop <= 0:
        return []
    left = np.flatnonzero(curve <= first - rule.plateau * drop)
    right = np.flatnonzero(curve <= last + rule.plateau * drop)
    out = []
    if len(left) and 0 < left[0] < len(curve) - 1:
        out.append((int(steps[left[0]]), "loss falls"))
    if len(right) and 0 < right[0] < len(curve) - 1:
        out.append((int(steps[right[0]]), "loss settles"))
    return out


def stage_boundaries(loss_steps: np.ndarray, loss: np.ndarray, llc_steps: np.ndarray, llc: np.ndarray,
                     rule: StageRule = StageRule()) -> pd.DataFrame:
    """Boundaries from both curves (columns: step, source, kind), sorted and merged."""
    if len(loss_steps) != len(loss) or len(llc_steps) != len(llc):
        raise ConfigError("each curve needs one value per step")
    llc_steps, llc = np.asarray(llc_steps), np.asarray(llc, dtype=float)
    local = llc > 0
    found = [(s, "llc", k) for s, k in llc_turns(llc_steps[local], llc[local], rule)]
    if local.any() and not local[0]:
        found.append((int(llc_steps[local][0]), "llc", "local"))
    found += [(s, "loss", k) for s, k in loss_plateaus(np.asarray(loss_steps), np.asarray(loss), rule)]
    found.sort()
    grid = np.log10(np.maximum(np.asarray(llc_steps, dtype=float), 1))
    spacing = np.median(np.diff(grid)) if len(grid) > 1 else 0.0
    kept: list[tuple[int, str, str]] = []
    for step, source, kind in found:
        if kept and np.log10(max(step, 1)) - np.log10(max(kept[-1][0], 1)) < spacing:
            continue
        kept.append((step, source, kind))
    return pd.DataFrame(kept, columns=["step", "source", "kind"])


def label_stages(boundaries: pd.DataFrame, llc_steps: np.ndarray, llc: np.ndarray,
                 rule: StageRule = StageRule()) -> pd.DataFrame:
    """Stages between boundaries (start, end, llc_change, label rises/falls/flat, or "not local"
    before the first checkpoint with λ̂ > 0), measured on the checkpoints with λ̂ > 0."""
    llc = np.asarray(llc, dtype=float)
    local = llc > 0
    if not local.any():
        return pd.DataFrame(columns=["stage", "start", "end", "llc_change", "llc"])
    first_local = int(np.asarray(llc_steps)[local][0])
    steps = np.asarray(llc_steps)[local]
    curve = smooth(llc[local], rule.window)
    edges = sorted({int(np.asarray(llc_steps)[0]), *boundaries.step.tolist(), int(steps[-1])})
    span = np.nanmax(curve) - np.nanmin(curve) if len(curve) else 0.0
    rows = []
    for index, (start, end) in enumerate(itertools.pairwise(edges)):
        if end <= first_local:
            rows.append({"stage": index + 1, "start": start, "end": end, "llc_change": float("nan"),
                         "llc": "not local"})
            continue
        change = float(np.interp(np.log10(max(end, 1)), np.log10(np.maximum(steps, 1)), curve)
                       - np.interp(np.log10(max(start, 1)), np.log10(np.maximum(steps, 1)), curve))
        label = "flat" if span <= 0 or abs(change) < rule.min_change * span else ("rises" if change > 0 else "falls")
        rows.append({"stage": index + 1, "start": start, "end": end, "llc_change": change, "llc": label})
    return pd.DataFrame(rows)
