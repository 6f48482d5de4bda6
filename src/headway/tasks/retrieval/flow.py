"""How information flows up one chain, as Theorem 1's Assumption 1 allows: a position can only attend to
positions that share token or positional information with it (docs/depth-bound.md).

- Every position holds a set of symbols. At each layer, every position gathers (set union) the sets
  of the positions it can see that share at least one symbol with its own set, all positions
  updating synchronously from the previous layer's sets. Causal attention sees itself and earlier
  positions; bidirectional sees every position.
- The query reaches the answer after L layers iff x_0 is in the read-out position's set.
- Only the queried chain matters (other chains share no symbol with it), so only its D links and
  the query, always last, are simulated. Link k (k = 1..D) is the statement [x_k, x_{k-1}].
- packed: one position per link holding {x_k, x_{k-1}}; the query holds {x_D}, read out there.
- flat: a link is two positions, left slot {x_k} then right slot {x_{k-1}}; the query is {x_D} then
  the QUERY marker {} (read out at the marker). The positional information of flat is this: the two
  slots of one statement may always gather from each other, shared symbol or not, subject to the
  mask (under causal attention the right slot sees the left, not the reverse).

Sets are uint64 bitmasks (bit i = x_i), all orders of a chunk advance at once. The task's generator plays
the rule out to its fixed point at every link to decide which dense targets a causal model can deliver
(`headway.tasks.retrieval.reachable_targets`); the share of link orders that reach in L layers is
`headway.analysis.retrieval.reach`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence

import numpy as np

MAX_HOPS = 62  # D+1 symbols must fit the 63 low bits of a uint64
_CELLS = 2**21  # orders x positions x positions per vectorised step (about 16 MiB of uint64)


def chunk_size(hops: int, layout: str) -> int:
    """How many link orders of `hops` links one vectorised step takes (about 16 MiB of sets)."""
    positions = _n_positions(hops, layout)
    return max(64, _CELLS // (positions * positions))


def order_chunks(orders: np.ndarray, layout: str) -> Iterable[np.ndarray]:
    """Rows of link orders [n, hops] in chunks small enough for one vectorised step of `gathered_sets`."""
    size = chunk_size(orders.shape[1], layout)
    return (orders[i:i + size] for i in range(0, len(orders), size))


def _n_positions(hops: int, layout: str) -> int:
    return hops + 1 if layout == "packed" else 2 * hops + 2


def initial_sets(orders: np.ndarray, layout: str) -> np.ndarray:
    """[n, positions] uint64 symbol sets of the queried chain laid out in each row's link order
    (orders[n, i] = k - 1 for link k at statement i), the query last."""
    n, hops = orders.shape
    one = np.uint64(1)
    k = orders.astype(np.uint64) + one  # link k = [x_k, x_{k-1}]
    query = np.full((n, 1), one << np.uint64(hops), dtype=np.uint64)
    if layout == "packed":
        return np.concatenate([(one << k) | (one << (k - one)), query], axis=1)
    slots = np.stack([one << k, one << (k - one)], axis=2).reshape(n, 2 * hops)
    return np.concatenate([slots, query, np.zeros((n, 1), dtype=np.uint64)], axis=1)


def _masks(positions: int, attention: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """visible[i, j]: position i may attend to j; always[i, j]: i gathers j shared symbol or not
    (itself, and in flat the other slot of its statement), within `visible`."""
    index = np.arange(positions)
    visible = index[:, None] >= index[None, :] if attention == "causal" else np.ones((positions,) * 2, bool)
    statement = index // 2 if layout == "flat" else index
    return visible, visible & (statement[:, None] == statement[None, :])


def reaches(orders: np.ndarray, layers: int, attention: str, layout: str,
            leafward: Sequence[bool] | None = None) -> np.ndarray:
    """Whether the read-out position holds x_0 after `layers` layers, for each row of link orders; `leafward`
    (packed only, one flag per layer) forbids the leaf-ward reads of the layers it marks False."""
    sets = gathered_sets(initial_sets(orders, layout), attention, layout, layers, leafward)
    return (sets[:, -1] & np.uint64(1)) != np.uint64(0)


def gathered_sets(sets: np.ndarray, attention: str, layout: str, layers: int | None = None,
                  leafward: Sequence[bool] | None = None) -> np.ndarray:
    """Every position's symbol set [n, positions] after `layers` layers of the gather rule (module
    docstring) from `sets` (`initial_sets`); None plays it out to its fixed point, what any depth reaches.

    `leafward` (packed layout, `layers` flags) restricts the rule by direction: at a layer it marks False, a
    position gathers only from positions that start no further from the root than itself (a link reads its
    root-ward neighbour, never its leaf-ward one; the query, the leaf end, reads any link). A position's
    distance from the root is its lowest symbol: x_{k-1} for link k, x_D for the query."""
    visible, always = _masks(sets.shape[1], attention, layout)
    zero = np.uint64(0)
    if leafward is not None:
        if layout != "packed" or layers is None or len(leafward) != layers:
            raise ValueError("leafward takes one flag per layer, and the packed layout only")
        lowest = sets & (~sets + np.uint64(1))  # each position's lowest bit: its starting distance from the root
        leafward_read = lowest[:, None, :] > lowest[:, :, None]  # [n, reader, source]
    for layer in itertools.repeat(None) if layers is None else range(layers):
        shares = (sets[:, :, None] & sets[:, None, :]) != zero
        if leafward is not None and not leafward[layer]:
            shares &= ~leafward_read
        gather = (shares & visible) | always
        grown = np.bitwise_or.reduce(np.where(gather, sets[:, None, :], zero), axis=2)
        if leafward is None and np.array_equal(grown, sets):  # no set changed, nor will one under the same rule
            break
        sets = grown
    return sets
