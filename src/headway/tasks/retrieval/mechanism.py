"""Which mechanism a trained retrieval model uses, found from its probes and attention scores.

- *linear*: the query gains at most one hop per layer: after t layers no hop beyond t is decodable
  at the query (stacked query heads, each following one link).
- *compositional*: after some layer t the query decodes a hop beyond t. One hop per layer cannot
  do that, so link positions must have composed links first (Theorem 1's tripling allows up to
  ⌊3ᵗ/2⌋ hops). A solved model with D > L is compositional by this rule, since its last layer
  decodes hop D at the query.

The composing heads are named by where link positions look in the layers before the last:
`root-ward` when a link attends to the link one hop closer to the root (the one that continues
from its right symbol; under a causal mask only when that link came earlier) and `leaf-ward` when
it attends to the link one hop further from the root. Farthest-hop, not prefix reach, decides:
a model that jumps from hop 1 to hop 3 without ever holding hop 2 still composes.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

MECHANISMS = ("linear", "compositional", "unsolved")
# Attention from links to a chain neighbour, averaged over visible pairs, that counts as reading it:
# far above the uniform share of a 4-chain cpu-scale example (1/13 at most) and below a sharp head's ~1.
READ_LEVEL = 0.3


@dataclass(frozen=True)
class Mechanism:
    """The class of one model and the evidence behind it."""

    mechanism: str  # one of MECHANISMS
    farthest: tuple[int, ...]  # farthest hop decoded at the query after layers 1..L (0: none)
    excess: int  # max over layers t of farthest_t - t: > 0 means composition
    reads: str  # where links look before the last layer: root-ward, leaf-ward, both or none
    link_next: float  # strongest head's attention from links to the root-ward neighbour (layers < L)
    link_prev: float  # strongest head's attention from links to the leaf-ward neighbour (layers < L)


def farthest_hops(probes: pd.DataFrame, layers: int, threshold: float = 0.9) -> tuple[int, ...]:
    """Farthest hop decoded at the query (accuracy ≥ `threshold`) after each layer 1..`layers`, from
    one model's rows of a `depth_probes` table (columns layer, site, hops, accuracy)."""
    query = probes[(probes.site == "query") & (probes.accuracy >= threshold)]
    best = query.groupby("layer").hops.max()
    return tuple(int(best.get(layer, 0)) for layer in range(1, layers + 1))


def link_reads(heads: pd.DataFrame, layers: int, level: float = READ_LEVEL,
               uniform: tuple[float, float] = (0.0, 0.0)) -> tuple[str, float, float]:
    """Where links look in the layers before the last, from one model's rows of a `head_scores` table
    and the uniform-attention reference (link_next, link_prev): (reads, strongest link_next, strongest
    link_prev)."""
    early = heads[heads.layer < layers - 1]
    nxt = float(np.nan_to_num(early.link_next.max(), nan=0.0)) if len(early) else 0.0
    prev = float(np.nan_to_num(early.link_prev.max(), nan=0.0)) if len(early) else 0.0
    needed = [max(level, 2.0 * np.nan_to_num(u, nan=0.0)) for u in uniform]
    names = [name for name, mass, need in (("root-ward", nxt, needed[0]), ("leaf-ward", prev, needed[1]))
             if mass >= need]
    reads = "both" if len(names) == 2 else names[0] if names else "none"
    return reads, nxt, prev


def classify(probes: pd.DataFrame, heads: pd.DataFrame, layers: int, solved: bool, threshold: float = 0.9,
             level: float = READ_LEVEL, uniform: tuple[float, float] = (0.0, 0.0)) -> Mechanism:
    """The mechanism of one model from its probe rows and head-score rows (see the module docstring);
    an unsolved model is `unsolved` whatever its probes show, with the evidence kept."""
    farthest = farthest_hops(probes, layers, threshold)
    excess = max(far - t for t, far in enumerate(farthest, start=1))
    reads, nxt, prev = link_reads(heads, layers, level, uniform)
    mechanism = "unsolved" if not solved else "compositional" if excess > 0 else "linear"
    return Mechanism(mechanism, farthest, int(excess), reads, nxt, prev)


def mechanism_table(probes: pd.DataFrame, heads: pd.DataFrame, models: pd.DataFrame, key: str = "run_id",
                    threshold: float = 0.9, level: float = READ_LEVEL) -> pd.DataFrame:
    """One row per model of `models` (columns `key`, layers, solved, and optionally uniform_next and
    uniform_prev, the uniform-attention reference) with its Mechanism's fields; `probes` and `heads`
    hold the rows of every model, told apart by `key`."""
    rows = []
    probe_groups, head_groups = dict(tuple(probes.groupby(key))), dict(tuple(heads.groupby(key)))
    for model in models.itertuples():
        name = getattr(model, key)
        found = classify(probe_groups.get(name, probes.iloc[:0]), head_groups.get(name, heads.iloc[:0]),
                         int(model.layers), bool(model.solved), threshold, level,
                         (getattr(model, "uniform_next", 0.0), getattr(model, "uniform_prev", 0.0)))
        rows.append({key: name, "mechanism": found.mechanism,
                     "farthest": ",".join(str(f) for f in found.farthest), "excess": found.excess,
                     "reads": found.reads, "link_next": found.link_next, "link_prev": found.link_prev})
    return pd.DataFrame(rows, columns=[key, "mechanism", "farthest", "excess", "reads", "link_next", "link_prev"])
