"""Vectorised numpy building blocks for the retrieval generator (no per-example Python loops)."""

from __future__ import annotations

import numpy as np


def random_prefixes(rng: np.random.Generator, n: int, m: int, k: int) -> np.ndarray:
    """First k entries of n independent uniform permutations of range(m): k distinct values per row.

    Argsort of 32-bit random keys is the fastest exact-enough shuffle in numpy; a tie between two
    keys (probability about m**2 / 2**33 per row) only makes one order slightly likelier.
    """
    keys = rng.integers(0, 2**32, size=(n, m), dtype=np.uint32)
    return np.argsort(keys, axis=1)[:, :k].astype(np.int32)


def gather(values: np.ndarray, cols: np.ndarray) -> np.ndarray:
    """values[i, cols[i, ...]] for every row i of a 2-D array: one flat fancy index, faster than take_along_axis."""
    n, m = values.shape
    offsets = (np.arange(n, dtype=np.intp) * m).reshape((n,) + (1,) * (cols.ndim - 1))
    return np.ascontiguousarray(values).ravel()[cols + offsets]


def gather_rows(values: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """values[i, idx[i, j], :] for a 3-D array [n, items, width]: whole rows picked per example."""
    n, _, width = values.shape
    return gather(values.reshape(n, -1), idx[:, :, None] * width + np.arange(width))


def statement_order(
    rng: np.random.Generator, n: int, n_items: int, chains: int, hops: int, chained: bool
) -> np.ndarray:
    """Item index at each sequence position, [n, n_items]; items 0..chains*hops-1 are chain links.

    Chain links are laid out [chain, hop] (link of hop k of chain c is item c*hops + k-1). When
    `chained`, each chain's links keep forward hop order while every item's position stays random:
    random positions are drawn for all items, then sorted within each chain.
    """
    position = random_prefixes(rng, n, n_items, n_items)
    if not chained:
        return position  # a uniform permutation is as good an order as it is a position map
    n_chain_items = chains * hops
    chain_positions = position[:, :n_chain_items].reshape(n, chains, hops)
    position[:, :n_chain_items] = np.sort(chain_positions, axis=2).reshape(n, n_chain_items)
    order = np.empty_like(position)
    np.put_along_axis(order, position, np.broadcast_to(np.arange(n_items), position.shape), axis=1)
    return order


def query_hops(rng: np.random.Generator, n: int, hops: int, mixture: bool) -> np.ndarray:
    """Hops from query to answer per example: uniform in 1..hops for the mixture, else all `hops`."""
    if mixture:
        return rng.integers(1, hops + 1, size=n)
    return np.full(n, hops)


def walk_back(chain_symbols: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """Symbols from x_depth down to x_0 per row of chain_symbols [n, hops+1], padded with -1."""
    steps = depth[:, None] - np.arange(chain_symbols.shape[1])
    return np.where(steps >= 0, gather(chain_symbols, np.maximum(steps, 0)), -1)


def encode_rows(rows: np.ndarray, packed: bool, base_vocab: int) -> np.ndarray:
    """Token ids from base-id rows [n, positions, width]: packed offsets slot s by s*base_vocab, flat serialises."""
    n, positions, width = rows.shape
    if packed:
        return (rows + np.arange(width) * base_vocab).astype(np.int32)
    return rows.reshape(n, positions * width, 1).astype(np.int32)


def select_items(order: np.ndarray, start: int, stop: int) -> np.ndarray:
    """Item indices in [start, stop) in sequence order, shifted to start at 0: [n, stop-start]."""
    mask = (order >= start) & (order < stop)
    return order[mask].reshape(order.shape[0], stop - start) - start
