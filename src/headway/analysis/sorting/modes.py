"""Which way the heads of a sorting model share the work, read off their OV and QK circuits.

A head *copies* number v when attending to v raises v's logit well above the other outputs: the
diagonal score (see `diagonal_scores`) is a z-score of the OV diagonal within its row. Suppression
is measured against a copier, in logits: head g *suppresses* v against copier h when g's own score
for v is at most ``-suppress_z`` and g's lift of v (``diagonal_lifts``: the diagonal minus the row's
mean) removes at least ``suppress_share`` of h's lift of v. A z-score alone cannot say this: a broad
suppressor (one that also pushes down v's neighbours) scores far less than a sharp one, and a
suppressor at 1% of its copier's strength scores as high as a strong one. Modes, tested in this order:

- **copy_suppression**: a copier h and a head g ≠ h attend alike (QK similarity ≥ ``qk_similar``)
  and g suppresses, against h, at least ``min_suppressed`` of all the numbers (like ``min_fraction``
  for a copier, a share of the range, so a pair needs as many numbers whatever the copier's set): one
  head writes the number, the other removes a stated share of it.
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
    suppress_z: float
    suppress_share: float
    min_suppressed: float
    max_overlap: float
    min_coverage: float

    def __post_init__(self) -> None:
        self.normalise(
            copy=check_number("copy", self.copy, 0.0, low_open=True),
            min_fraction=check_number("min_fraction", self.min_fraction, 0.0, 1.0, low_open=True),
            qk_similar=check_number("qk_similar", self.qk_similar, -1.0, 1.0),
            suppress_z=check_number("suppress_z", self.suppress_z, 0.0),
            suppress_share=check_number("suppress_share", self.suppress_share, 0.0, low_open=True),
            min_suppressed=check_number("min_suppressed", self.min_suppressed, 0.0, 1.0, low_open=True),
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

    lift = _lifts(ov)
    spread = ov.double().std(dim=-1, unbiased=False)
    return torch.where(spread > 0, lift / spread.clamp_min(1e-30), torch.zeros_like(lift)).float()


def diagonal_lifts(ov: Tensor) -> Tensor:
    """Per number v, OV[v, v] − mean_u OV[v, u], [E, H, V]: how much attending to v lifts v's own logit
    above the row's mean, in the circuit's units (logits when the OV circuit carries the readout scale)."""
    return _lifts(ov).float()


def _lifts(ov: Tensor) -> Tensor:
    """OV[v, v] − mean_u OV[v, u] in double precision, [E, H, V], after checking ov's shape."""
    _check_circuits(ov)
    ov = ov.double()
    return ov.diagonal(dim1=-2, dim2=-1) - ov.mean(dim=-1)


def copy_sets(scores: Tensor, thresholds: ModeThresholds) -> tuple[Tensor, Tensor]:
    """Numbers each head copies (score > copy) and pushes below noise (score ≤ −suppress_z): two bool [E, H, V]."""
    return scores > thresholds.copy, scores <= -thresholds.suppress_z


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


def suppression_pairs(lifts: np.ndarray, copies: np.ndarray, below: np.ndarray, share: float
                      ) -> tuple[np.ndarray, np.ndarray]:
    """Per ordered pair (g, h), two [E, G, H]: the share of all numbers that h copies and g suppresses against h
    (g's score below noise, `below`, and g's lift removing ≥ `share` of h's), and g's suppression
    strength: −Σ lift_g / Σ lift_h over h's copied numbers, the share of h's copying that g removes
    (0 where h copies nothing)."""
    lifts = lifts.astype(np.float64)
    copied = copies.astype(np.float64)
    removes = (-lifts[:, :, None, :] >= share * lifts[:, None, :, :]) & below[:, :, None, :]  # [E, G, H, V]
    suppressed = np.einsum("eghv,ehv->egh", removes.astype(np.float64), copied) / lifts.shape[-1]
    removed = -np.einsum("egv,ehv->egh", lifts, copied)
    copying = np.einsum("ehv,ehv->eh", lifts, copied)[:, None, :]
    return suppressed, np.divide(removed, copying, out=np.zeros_like(removed), where=copying > 0)


def classify_modes(ov: Tensor, qk: Tensor, thresholds: ModeThresholds) -> pd.DataFrame:
    """One row per instance: `mode` (see the module docstring) and every quantity the rule reads:
    copy_fraction_h{h}, suppress_fraction_h{h} (share of the numbers the head pushes below −suppress_z),
    n_copiers, n_suppressors (heads that suppress, against some copier, at least min_suppressed of the numbers,
    whatever their QK), overlap (largest Jaccard of two copiers, NaN with fewer than two), coverage, suppression (the
    largest share of a copier's lift over its numbers that another head removes; NaN without a copier), and of
    the reported pair: qk_similarity, suppressed_share (share of the numbers the suppressor suppresses against the
    copier)
    and the copier / suppressor head indices (-1 for none)."""
    _check_circuits(ov, qk)
    copies_t, below_t = copy_sets(diagonal_scores(ov), thresholds)
    copies, below = copies_t.cpu().numpy(), below_t.cpu().numpy()
    copy_frac, supp_frac = copies.mean(axis=-1), below.mean(axis=-1)  # [E, H]
    suppressed, strength = suppression_pairs(diagonal_lifts(ov).cpu().numpy(), copies, below,
                                             thresholds.suppress_share)
    pairs = {"jaccard": _jaccard(copies), "qk": qk_similarity(qk).cpu().numpy(), "suppressed": suppressed,
             "strength": strength}
    rows = []
    for e in range(ov.shape[0]):
        fractions = {}
        for h in range(ov.shape[1]):
            fractions[f"copy_fraction_h{h}"] = float(copy_frac[e, h])
            fractions[f"suppress_fraction_h{h}"] = float(supp_frac[e, h])
        decided = _rule(copy_frac[e], float(copies[e].any(axis=0).mean()), {k: v[e] for k, v in pairs.items()},
                        thresholds)
        rows.append({"instance": e, "mode": decided.pop("mode"), **fractions, **decided})
    return pd.DataFrame(rows)


def _rule(copy_frac: np.ndarray, coverage: float, pairs: dict[str, np.ndarray], t: ModeThresholds) -> dict:
    """Mode of one instance from its per-head copying fractions [H] and pairwise quantities [H, H]."""
    copiers = np.flatnonzero(copy_frac >= t.min_fraction)
    suppressing = pairs["suppressed"][:, copiers] >= t.min_suppressed  # [G, copiers]
    suppressors = np.flatnonzero(suppressing.any(axis=1))
    overlap = _largest_pair(pairs["jaccard"], copiers)
    matched, pair = _reported_pair(copy_frac, copiers, pairs, t)
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


def _reported_pair(copy_frac: np.ndarray, copiers: np.ndarray, pairs: dict[str, np.ndarray],
                   t: ModeThresholds) -> tuple[bool, dict]:
    """Whether a copy/suppress pair passes the rule, and the pair to report: the best passing pair, else the
    (head, copier) pair whose head suppresses most of the copier's numbers, else the two heads that copy most
    (suppressor -1; copier -1 when none copies). `suppression` is the largest strength of any head against any
    copier, whichever pair is reported. A head never suppresses its own copied numbers (their lift is positive)."""
    candidates = [(g, h) for h in copiers for g in range(len(copy_frac)) if g != h]
    strongest = max((pairs["strength"][p] for p in candidates), default=float("nan"))
    suppressing = [p for p in candidates if pairs["suppressed"][p] > 0]
    matched = [(g, h) for g, h in suppressing
               if pairs["qk"][g, h] >= t.qk_similar and pairs["suppressed"][g, h] >= t.min_suppressed]
    if suppressing:
        g, h = max(matched or suppressing, key=lambda p: (pairs["suppressed"][p], pairs["strength"][p], pairs["qk"][p]))
        return bool(matched), {"qk_similarity": float(pairs["qk"][g, h]),
                               "suppressed_share": float(pairs["suppressed"][g, h]), "suppression": float(strongest),
                               "copier": int(h), "suppressor": int(g)}
    by_copying = np.argsort(-copy_frac, kind="stable")
    similarity = float(pairs["qk"][by_copying[0], by_copying[1]]) if len(copy_frac) > 1 else float("nan")
    return False, {"qk_similarity": similarity, "suppressed_share": 0.0 if len(candidates) else float("nan"),
                   "suppression": float(strongest), "copier": int(by_copying[0]) if len(copiers) else -1,
                   "suppressor": -1}


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
