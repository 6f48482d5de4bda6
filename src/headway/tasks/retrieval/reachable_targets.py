"""Link targets that no depth can deliver under a causal mask (the share a task masks is
`headway.analysis.retrieval.reach.masked_fraction`).

Under dense supervision the link [x_k, x_{k-1}] targets x_{k-1}, ..., x_0 of its chain (block j holds
x_{k-1-j}); under whole-chain supervision it targets x_{D-1}, ..., x_0 (block j holds x_{D-1-j}). A causal model
can only bring x_m to the position that carries those targets if the information flow of Assumption 1
lets it through from earlier positions (`headway.tasks.retrieval.flow`, whose rule `gathered_sets`
plays out here to its fixed point, per example, from that example's own link order). Only a link's own
chain matters: other chains share no symbol with it, and dropping their links keeps every position's
earlier/later relation to the chain's links. `mask_unreachable` turns these targets into -1, so the
loss never asks a link for a symbol it cannot see.
"""

from __future__ import annotations

import numpy as np

from headway.tasks.retrieval.arrays import gather
from headway.tasks.retrieval.flow import gathered_sets, initial_sets, order_chunks


def link_chains(statements: np.ndarray, hops: int) -> tuple[np.ndarray, np.ndarray]:
    """Per link of plain-variant statements [n, links, 2] (left, right): its hop k - 1 (link k is
    [x_k, x_{k-1}]) and the index of its chain's first link [x_1, x_0], found by following the links."""
    n, links, _ = statements.shape
    link_of_left = np.full((n, int(statements.max()) + 1), -1, dtype=np.int64)
    np.put_along_axis(link_of_left, statements[:, :, 0], np.broadcast_to(np.arange(links), (n, links)), axis=1)
    below = gather(link_of_left, statements[:, :, 1])  # the link one hop toward the root, -1 at hop 1
    hop = np.zeros((n, links), dtype=np.int64)
    first = np.broadcast_to(np.arange(links), (n, links))
    for _ in range(hops - 1):
        step = gather(below, first)
        hop += step >= 0
        first = np.where(step >= 0, step, first)
    return hop, first


def unreachable_targets(statements: np.ndarray, hops: int, layout: str, supervision: str = "dense") -> np.ndarray:
    """[n, links, hops] bool: block j of each link has a target (`supervision` "dense": x_{k-1-j} of
    link k, j < k; "whole-chain": x_{D-1-j}) that the position carrying it (packed: the link; flat:
    its right slot) never gathers under causal attention, however many layers."""
    n, links, _ = statements.shape
    hop, first = link_chains(statements, hops)
    by_chain = np.argsort(first * links + np.arange(links), axis=1)  # each chain's links, in sequence order
    orders = gather(hop, by_chain).reshape(-1, hops)  # one row per chain: hop k - 1 of its i-th link
    carrier = np.arange(hops) if layout == "packed" else 2 * np.arange(hops) + 1
    held = np.concatenate([gathered_sets(initial_sets(chunk, layout), "causal", layout)[:, carrier]
                           for chunk in order_chunks(orders, layout)])
    if supervision == "whole-chain":
        wanted = np.broadcast_to(hops - 1 - np.arange(hops), (*orders.shape, hops))  # block j wants x_{D-1-j}
    else:
        wanted = orders[:, :, None] - np.arange(hops)  # block j wants x_{k-1-j}; negative past the root
    holds = (held[:, :, None] >> np.maximum(wanted, 0).astype(np.uint64)) & np.uint64(1)
    missing = ((wanted >= 0) & (holds == 0)).reshape(n, links, hops)
    out = np.empty_like(missing)
    out[np.arange(n)[:, None], by_chain] = missing
    return out
