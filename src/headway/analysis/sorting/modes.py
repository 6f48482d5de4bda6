"""Which way the heads of a sorting model share the work, read off their OV and QK circuits.

A head *copies* number v when attending to v raises v's logit well above the other outputs, and
*suppresses* v when it lowers it well below: the diagonal score (see `diagonal_scores`) is a z-score
of the OV diagonal within its row. Modes, tested in this order:

- **copy_suppression**: a suppressor head g and a copier head h ≠ g attend alike (QK similarity
  ≥ ``qk_similar``) and h copies most of what g suppresses (≥ ``suppressed_copied`` of g's set):
  one head writes the number, the other pushes it (or its copy elsewhere) down.
- **splitting**: at least two copiers whose copying sets hardly overlap (largest pairwise Jaccard
  ≤ ``max_overlap``) and that together cover the range (``coverage`` ≥ ``min_coverage``).
- **overlapping**: at least two copiers, but their sets overlap more than ``max_overlap``.
- **other**: at most one copier (one head does everything), nothing copies (untrained model), or
  disjoint copiers that leave more than ``1 - min_coverage`` of the numbers uncopied.

The thresholds (`ModeThresholds`) are the sorting study's rules: their values, and why each is what it
is, are `headway.studies.sorting.rules.SortingRules`'s, which builds this object (`mode_thresholds()`); the
classifier holds no value of its own. The score ignores magnitude: a head whose diagonal is weak but clean in
a quiet row scores nearly as high as the head that really writes the number.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from headway.errors import ConfigError
from headway.settings import Settings, check_number

if TYPE_CHECKING:  # the study's rules build ModeThresholds when the CLI parses options; torch loads with analysis
    from torch import Tensor

MODES = ("splitting", "copy_suppression", "overlapping", "other")


@dataclass(frozen=True)
class ModeThresholds(Settings):
    """The mode rule's thresholds (module docstring), without defaults: their values and reasons are the
    sorting study's rules (`SortingRules.mode_thresholds()`)."""

    copy: float
    min_fraction: float
    qk_similar: float
    suppressed_copied: float
    max_overlap: float
    min_coverage: float

    def __post_init__(self) -> None:
        self.normalise(
            copy=check_number("copy", self.copy, 0.0, low_open=True),
            min_fraction=check_number("min_fraction", self.min_fraction, 0.0, 1.0, low_open=True),
            qk_similar=check_number("qk_similar", self.qk_similar, -1.0, 1.0),
            suppressed_copied=check_number("suppressed_copied", self.suppressed_copied, 0.0, 1.0),
            max_overlap=check_number("max_overlap", self.max_overlap, 0.0, 1.0),
            min_coverage=check_number("min_coverage", self.min_coverage, 0.0, 1.0),
        )


def _check_circuits(ov: Tensor, qk: Tensor | None = None) -> None:
    if ov.dim() != 4 or ov.shape[-1] != ov.shape[-2]:
        raise ConfigError(f"ov has shape {tuple(ov.shape)}; expected [E, H, values, values]")
    e, h, v = ov.shape[:3]
    if qk is not None and tuple(qk.shape) != (e, h, v + 1, v):
        raise ConfigError(f"qk has shape {tuple(qk.shape)}; expected [{e}, {h}, {v + 1}, {v}] to match ov")


def diagonal_scores(ov: Tensor) -> Tensor:
    """Per number v, (OV[v, v] − mean_u OV[v, u]) / std_u OV[v, u], [E, H, V]: how far attending to v
    lifts v's own logit above the other outputs, in units of the row's spread (0 for a flat row)."""
    import torch

    _check_circuits(ov)
    ov = ov.double()
    spread = ov.std(dim=-1, unbiased=False)
    lift = ov.diagonal(dim1=-2, dim2=-1) - ov.mean(dim=-1)
    return torch.where(spread > 0, lift / spread.clamp_min(1e-30), torch.zeros_like(lift)).float()


def copy_sets(scores: Tensor, thresholds: ModeThresholds) -> tuple[Tensor, Tensor]:
    """Numbers each head copies (score > copy) and suppresses (score < −copy): two bool [E, H, V]."""
    return scores > thresholds.copy, scores < -thresholds.copy


def qk_similarity(qk: Tensor) -> Tensor:
    """Correlation [E, H, H] between the heads' QK circuits after centring each row: softmax ignores a
    constant added to one query's scores, so only how a query ranks the keys is compared."""
    import torch

    rows = (qk.double() - qk.double().mean(dim=-1, keepdim=True)).flatten(2)  # centred rows: mean 0 overall
    unit = rows / rows.norm(dim=-1, keepdim=True).clamp_min(1e-30)
    return torch.einsum("ehn,egn->ehg", unit, unit).float()


def _jaccard(copies: np.ndarray) -> np.ndarray:
    """Pairwise Jaccard index [E, H, H] of the copying sets (0 where both are empty)."""
    sets = copies.astype(np.float64)
    inter = np.einsum("ehv,egv->ehg", sets, sets)
    sizes = sets.sum(axis=-1)
    union = sizes[:, :, None] + sizes[:, None, :] - inter
    return np.divide(inter, union, out=np.zeros_like(inter), where=union > 0)


def _suppressed_copied(copies: np.ndarray, suppresses: np.ndarray) -> np.ndarray:
    """[E, G, H]: fraction of the numbers g suppresses that h copies (0 where g suppresses none)."""
    inter = np.einsum("egv,ehv->egh", suppresses.astype(np.float64), copies.astype(np.float64))
    sizes = suppresses.sum(axis=-1)[:, :, None].astype(np.float64)
    return np.divide(inter, sizes, out=np.zeros_like(inter), where=sizes > 0)


def classify_modes(ov: Tensor, qk: Tensor, thresholds: ModeThresholds) -> pd.DataFrame:
    """One row per instance: `mode` (see the module docstring) and every quantity the rule reads:
    copy_fraction_h{h}, suppress_fraction_h{h}, n_copiers, n_suppressors, overlap (largest Jaccard of
    two copiers, NaN with fewer than two), coverage, qk_similarity (of the reported pair), and the
    copier / suppressor head indices (-1 for none)."""
    _check_circuits(ov, qk)
    copies_t, suppresses_t = copy_sets(diagonal_scores(ov), thresholds)
    copies, suppresses = copies_t.cpu().numpy(), suppresses_t.cpu().numpy()
    copy_frac, supp_frac = copies.mean(axis=-1), suppresses.mean(axis=-1)  # [E, H]
    pairs = {
        "jaccard": _jaccard(copies),
        "qk": qk_similarity(qk).cpu().numpy(),
        "supp_copied": _suppressed_copied(copies, suppresses),
    }
    rows = []
    for e in range(ov.shape[0]):
        fractions = {}
        for h in range(ov.shape[1]):
            fractions[f"copy_fraction_h{h}"] = float(copy_frac[e, h])
            fractions[f"suppress_fraction_h{h}"] = float(supp_frac[e, h])
        decided = _rule(copy_frac[e], supp_frac[e], float(copies[e].any(axis=0).mean()),
                        {k: v[e] for k, v in pairs.items()}, thresholds)
        rows.append({"instance": e, "mode": decided.pop("mode"), **fractions, **decided})
    return pd.DataFrame(rows)


def _rule(copy_frac: np.ndarray, supp_frac: np.ndarray, coverage: float, pairs: dict[str, np.ndarray],
          t: ModeThresholds) -> dict:
    """Mode of one instance from its per-head fractions [H] and pairwise quantities [H, H]."""
    copiers = np.flatnonzero(copy_frac >= t.min_fraction)
    suppressors = np.flatnonzero(supp_frac >= t.min_fraction)
    overlap = _largest_pair(pairs["jaccard"], copiers)
    matched, pair = _reported_pair(copy_frac, supp_frac, copiers, suppressors, pairs, t)
    if matched:
        mode = "copy_suppression"
    elif len(copiers) >= 2 and overlap > t.max_overlap:
        mode = "overlapping"
    elif len(copiers) >= 2 and coverage >= t.min_coverage:
        mode = "splitting"
    else:
        mode = "other"
    return {"mode": mode, "n_copiers": len(copiers), "n_suppressors": len(suppressors), "overlap": overlap,
            "coverage": coverage, **pair}


def _reported_pair(copy_frac: np.ndarray, supp_frac: np.ndarray, copiers: np.ndarray, suppressors: np.ndarray,
                   pairs: dict[str, np.ndarray], t: ModeThresholds) -> tuple[bool, dict]:
    """Whether a copy/suppress pair passes the rule, and the pair to report: the best passing pair, else
    the best (suppressor, copier) pair, else the two heads that copy most (copier -1 when none copies)."""
    candidates = [(g, h) for g in suppressors for h in copiers if g != h]
    matched = [(g, h) for g, h in candidates
               if pairs["qk"][g, h] >= t.qk_similar and pairs["supp_copied"][g, h] >= t.suppressed_copied]
    if candidates:
        g, h = max(matched or candidates, key=lambda p: (pairs["supp_copied"][p], pairs["qk"][p]))
        return bool(matched), {"qk_similarity": float(pairs["qk"][g, h]), "copier": int(h), "suppressor": int(g)}
    by_copying = np.argsort(-copy_frac, kind="stable")
    similarity = float(pairs["qk"][by_copying[0], by_copying[1]]) if len(copy_frac) > 1 else float("nan")
    suppressor = int(suppressors[np.argmax(supp_frac[suppressors])]) if len(suppressors) else -1
    return False, {"qk_similarity": similarity, "copier": int(by_copying[0]) if len(copiers) else -1,
                   "suppressor": suppressor}


def _largest_pair(matrix: np.ndarray, heads: np.ndarray) -> float:
    """Largest off-diagonal entry of matrix among `heads` (NaN with fewer than two)."""
    if len(heads) < 2:
        return float("nan")
    sub = matrix[np.ix_(heads, heads)]
    return float(sub[~np.eye(len(heads), dtype=bool)].max())


def threshold_sweep(ov: Tensor, qk: Tensor, sweep: dict[str, tuple[float, ...]],
                    base: ModeThresholds) -> pd.DataFrame:
    """One row per instance × swept value (columns instance, threshold, value, mode): the mode with that
    one threshold of `base` changed (`sweep`: threshold name → values, e.g. the sorting study's
    `SortingRules.mode_sweeps()`), so a report can show where a model's label, and a verdict, flips."""
    frames = [classify_modes(ov, qk, replace(base, **{name: value}))[["instance", "mode"]]
              .assign(threshold=name, value=float(value)) for name, values in sweep.items() for value in values]
    return pd.concat(frames, ignore_index=True)[["instance", "threshold", "value", "mode"]]


def noise_threshold(null_scores: Tensor, entries: int, rate: float, step: float = 0.5) -> float:
    """Smallest multiple of `step` beyond which (±) a model with `entries` diagonal scores (heads ×
    numbers) drawn like `null_scores` expects fewer than `rate` of them (`SortingRules.copy_noise`): a copy
    threshold set by noise alone, before any trained model is seen."""
    magnitude = null_scores.detach().abs().flatten().double()
    threshold = step
    while (magnitude > threshold).double().mean().item() * entries >= rate:
        threshold += step
    return threshold
