"""Per-variant example drawing for the retrieval task: base-id rows plus the structured view.

The token layout these rows follow is documented in headway.tasks.retrieval.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from headway.tasks.retrieval.arrays import (
    gather,
    gather_rows,
    query_hops,
    random_prefixes,
    select_items,
    statement_order,
    walk_back,
)

if TYPE_CHECKING:
    from headway.tasks.retrieval.config import RetrievalConfig


class Drawn(NamedTuple):
    """Arrays of n examples before token encoding; rows are base ids [n, n_statements + 1, width]."""

    rows: np.ndarray
    statements: np.ndarray
    chain: np.ndarray
    depth: np.ndarray
    classes: np.ndarray | None = None
    rules: np.ndarray | None = None
    link_targets: np.ndarray | None = None  # plain, asked for: each link's targets under its supervision, [n, links, D]


def draw_plain(cfg: RetrievalConfig, n: int, rng: np.random.Generator, mixture: bool, links: bool = False) -> Drawn:
    """Plain variant: K chains of [left, right] links in random order, then [x_query, QUERY]; with `links`, also
    every link's targets under `cfg.supervision` (built only then: they cost a fifth of the draw)."""
    k, d = cfg.chains, cfg.hops
    symbols = random_prefixes(rng, n, cfg.vocab, cfg.n_symbols)  # chain c is columns c*(d+1) .. c*(d+1)+d
    order = statement_order(rng, n, k * d, k, d, cfg.order == "chain")
    right = order + order // d  # link item c*d + j-1 points right at x_{j-1}, column c*(d+1) + j-1
    statements = gather(symbols, np.stack([right + 1, right], axis=-1))
    depth = query_hops(rng, n, d, mixture)
    chain = walk_back(symbols[:, : d + 1], depth)
    query_row = np.stack([chain[:, 0], np.full(n, cfg.vocab)], axis=1)
    rows = np.concatenate([statements, query_row[:, None, :]], axis=1)
    return Drawn(rows, statements, chain, depth, link_targets=link_targets(cfg, symbols, order) if links else None)


def link_targets(cfg: RetrievalConfig, symbols: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Each link's D target blocks [n, links, D] from the example's symbols (chain c in columns c(D+1) … c(D+1)+D)
    and link items (`order`): under dense supervision block j of link x_k holds x_{k-1-j}, j hops beyond its right
    side, -1 past the root; under whole-chain supervision x_{D-1-j}, the query's block j."""
    d = cfg.hops
    block = np.arange(d)
    if cfg.supervision == "whole-chain":
        root = (order // d) * (d + 1)  # column of x_0 of each link's chain
        return gather(symbols, root[..., None] + d - 1 - block)
    right = order + order // d
    reached = block <= (order % d)[..., None]
    return np.where(reached, gather(symbols, np.maximum(right[..., None] - block, 0)), -1)


def draw_rules(rng: np.random.Generator, n: int, classes: int, relations: int) -> np.ndarray:
    """Relation selected by each class, [n, classes], such that the classes disagree as much as they
    can: every relation is used when classes >= relations, no two classes share one otherwise.
    (Independent draws would often map all classes to one relation, making the class irrelevant.)"""
    if classes >= relations:
        return (np.arange(classes) % relations)[random_prefixes(rng, n, classes, classes)].astype(np.int64)
    return random_prefixes(rng, n, relations, classes).astype(np.int64)


def draw_conditional(cfg: RetrievalConfig, n: int, rng: np.random.Generator, mixture: bool) -> Drawn:
    """Conditional variant: true and decoy links, class and rule statements in random order, then the query."""
    k, d, n_rel = cfg.chains, cfg.hops, cfg.relations
    entities = random_prefixes(rng, n, cfg.vocab, cfg.n_symbols).reshape(n, k, 2 * d + 1)
    chain_symbols, decoys = entities[:, :, : d + 1], entities[:, :, d + 1 :]
    entity_class = rng.integers(0, cfg.classes, size=(n, k, 2 * d + 1))
    rules = draw_rules(rng, n, cfg.classes, n_rel)
    true_rel = gather(rules, entity_class[:, :, 1 : d + 1])
    decoy_rel = (true_rel + rng.integers(1, n_rel, size=(n, k, d))) % n_rel
    true_links = np.stack([true_rel, chain_symbols[:, :, 1:], chain_symbols[:, :, :-1]], axis=-1)
    decoy_links = np.stack([decoy_rel, chain_symbols[:, :, 1:], decoys], axis=-1)
    links = np.concatenate([true_links.reshape(n, k * d, 3), decoy_links.reshape(n, k * d, 3)], axis=1)
    entity_flat, class_flat = entities.reshape(n, -1), entity_class.reshape(n, -1)

    order = statement_order(rng, n, cfg.n_statements, k, d, cfg.order == "chain")
    statements = gather_rows(links, select_items(order, 0, cfg.n_links))
    class_items = select_items(order, cfg.n_links, cfg.n_links + cfg.n_symbols)
    classes = np.stack([gather(entity_flat, class_items), gather(class_flat, class_items)], axis=-1)
    depth = query_hops(rng, n, d, mixture)
    chain = walk_back(chain_symbols[:, 0, :], depth)
    items = _conditional_items(cfg, links, entity_flat, class_flat, rules)
    query_id = cfg.base_vocab - 1
    query_row = np.stack([np.full(n, query_id), chain[:, 0], np.full(n, query_id)], axis=1)
    rows = np.concatenate([gather_rows(items, order), query_row[:, None, :]], axis=1)
    return Drawn(rows, statements, chain, depth, classes, rules)


def _conditional_items(
    cfg: RetrievalConfig, links: np.ndarray, entity: np.ndarray, entity_class: np.ndarray, rules: np.ndarray
) -> np.ndarray:
    """Base-id rows of all statements in item order: links, class statements, rule statements."""
    relation0, class0 = cfg.vocab, cfg.vocab + cfg.relations
    is_id, rule_id = class0 + cfg.classes, class0 + cfg.classes + 1
    link_rows = links + np.array([relation0, 0, 0])
    class_rows = np.stack([np.full_like(entity, is_id), entity, entity_class + class0], axis=-1)
    rule_classes = np.broadcast_to(np.arange(cfg.classes) + class0, rules.shape)
    rule_rows = np.stack([np.full_like(rules, rule_id), rule_classes, rules + relation0], axis=-1)
    return np.concatenate([link_rows, class_rows, rule_rows], axis=1)
