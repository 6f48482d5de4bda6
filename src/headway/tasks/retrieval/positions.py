"""Where things sit in a retrieval example: statement rows, the chain's links and each link's neighbours.

Everything the head scores, interventions and probes need is indexed by *statement* (one packed
position, or the `width` consecutive flat positions of one statement); the query is the last
statement. A link's *next* link is the one its right entity continues into (one hop closer to the
root); its *previous* link is the one whose right entity is its left entity. In the conditional
variant only true links (those whose relation the left entity's class selects) form chains.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch

NONE = -1


@dataclass(frozen=True)
class StatementMap:
    """Per example [N, ...]: base-id rows and the positions of the chain structure (NONE if absent)."""

    rows: np.ndarray  # [N, P, width] base ids, P statements including the query (last)
    is_link: np.ndarray  # [N, P] bool: a link that belongs to a chain (true links only)
    left: np.ndarray  # [N, P] left entity of each link (NONE elsewhere)
    right: np.ndarray  # [N, P] right entity of each link (NONE elsewhere)
    next_link: np.ndarray  # [N, P] statement index of the link one hop closer to the root
    prev_link: np.ndarray  # [N, P] statement index of the link one hop further from the root
    hop_link: np.ndarray  # [N, D] statement of the queried chain's link for hop j = 1..D (hop 1 starts at the query)
    class_statement: np.ndarray | None  # [N, V] statement index stating each entity's class (conditional)
    rule_statements: np.ndarray | None  # [N, C] statement index of each class's rule (conditional)

    @property
    def n_statements(self) -> int:
        """Statements per example, the query included."""
        return self.rows.shape[1]

    @property
    def query(self) -> int:
        """Statement index of the query (always the last)."""
        return self.rows.shape[1] - 1


def statement_rows(cfg: RetrievalConfig, tokens: np.ndarray) -> np.ndarray:
    """Base ids [N, P, width] of every statement from model tokens (undoes slot offsets or flattening)."""
    width = cfg.statement_width
    if cfg.layout == "packed":
        return tokens - np.arange(width) * cfg.base_vocab
    return tokens.reshape(tokens.shape[0], -1, width)


def reading_positions(cfg: RetrievalConfig) -> np.ndarray:
    """The model position read for each statement [P]: its last slot, which has seen the whole statement."""
    per = 1 if cfg.layout == "packed" else cfg.statement_width
    return np.arange(cfg.n_ctx // per) * per + per - 1


def map_statements(cfg: RetrievalConfig, batch: RetrievalBatch) -> StatementMap:
    """The chain structure of every example of `batch`, found from its tokens and structured view."""
    rows = statement_rows(cfg, np.asarray(batch.tokens))
    n, p, _ = rows.shape
    body = np.zeros((n, p), dtype=bool)
    body[:, :-1] = True
    class_statement = rule_statements = None
    if cfg.conditional:
        marker, left, right = rows[..., 0], rows[..., 1], rows[..., 2]
        relation = marker - cfg.vocab
        is_relation = body & (relation >= 0) & (relation < cfg.relations)
        class_statement, entity_class = _class_statements(cfg, rows, body)
        rule_statements, rules = _rule_statements(cfg, rows, body)
        left_class = np.take_along_axis(entity_class, np.where(is_relation, left, 0), axis=1)
        selected = np.take_along_axis(rules, np.clip(left_class, 0, None), axis=1)
        is_link = is_relation & (left_class >= 0) & (relation == selected)
    else:
        left, right = rows[..., 0], rows[..., 1]
        is_link = body
    left = np.where(is_link, left, NONE)
    right = np.where(is_link, right, NONE)
    next_link = _match(is_link, right, left)
    prev_link = _match(is_link, left, right)
    hop_link = _hop_links(batch, is_link, left, right)
    return StatementMap(rows, is_link, left, right, next_link, prev_link, hop_link, class_statement, rule_statements)


def follow(start: np.ndarray, pointers: np.ndarray, steps: int) -> np.ndarray:
    """Statement reached from `start` [N, M] after `steps` moves along `pointers` [N, P] (NONE stays NONE)."""
    current = start.copy()
    for _ in range(steps):
        valid = current >= 0
        moved = np.take_along_axis(pointers, np.where(valid, current, 0), axis=1)
        current = np.where(valid, moved, NONE)
    return current


def link_numbers(smap: StatementMap, hops: int) -> tuple[np.ndarray, np.ndarray]:
    """Each link's number in its chain and its chain's root link, both [N, P] (NONE off the chains): link k of a
    chain is [x_k, x_{k-1}], k = 1 the root link, so k is one more than the moves along `next_link` to the root.
    Chains longer than `hops` links are cut at `hops` moves (the task's chains have `hops` links)."""
    number = np.where(smap.is_link, 1, NONE)
    root = np.where(smap.is_link, np.arange(smap.n_statements)[None, :], NONE)
    for _ in range(hops):
        onward = np.take_along_axis(smap.next_link, np.where(root >= 0, root, 0), axis=1)
        moves = (root >= 0) & (onward >= 0)
        number = np.where(moves, number + 1, number)
        root = np.where(moves, onward, root)
    return number, root


def _match(is_link: np.ndarray, key: np.ndarray, target: np.ndarray) -> np.ndarray:
    """For each link, the link whose `target` entity equals its `key` entity (NONE when there is none)."""
    same = (key[:, :, None] == target[:, None, :]) & is_link[:, :, None] & is_link[:, None, :]
    found = same.any(axis=2)
    return np.where(found, same.argmax(axis=2), NONE)


def _hop_links(batch: RetrievalBatch, is_link: np.ndarray, left: np.ndarray, right: np.ndarray) -> np.ndarray:
    """Statement of each hop of the queried chain [N, D]: the link from chain[j-1] to chain[j]."""
    chain = np.asarray(batch.chain)
    hops = chain.shape[1] - 1
    out = np.full((len(chain), hops), NONE, dtype=np.int64)
    for j in range(1, hops + 1):
        here = is_link & (left == chain[:, j - 1 : j]) & (right == chain[:, j : j + 1]) & (chain[:, j : j + 1] >= 0)
        out[:, j - 1] = np.where(here.any(axis=1), here.argmax(axis=1), NONE)
    return out


def _class_statements(cfg: RetrievalConfig, rows: np.ndarray, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Statement index stating each entity's class, and the class itself, both [N, V] (NONE if unstated)."""
    n = rows.shape[0]
    is_id = cfg.vocab + cfg.relations + cfg.classes
    where = body & (rows[..., 0] == is_id)
    statement = np.full((n, cfg.vocab), NONE, dtype=np.int64)
    entity_class = np.full((n, cfg.vocab), NONE, dtype=np.int64)
    ex, pos = np.nonzero(where)
    entity = rows[ex, pos, 1]
    statement[ex, entity] = pos
    entity_class[ex, entity] = rows[ex, pos, 2] - cfg.vocab - cfg.relations
    return statement, entity_class


def _rule_statements(cfg: RetrievalConfig, rows: np.ndarray, body: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Statement index of each class's rule and the relation it selects, both [N, C]."""
    n = rows.shape[0]
    rule_id = cfg.vocab + cfg.relations + cfg.classes + 1
    where = body & (rows[..., 0] == rule_id)
    statement = np.full((n, cfg.classes), NONE, dtype=np.int64)
    relation = np.full((n, cfg.classes), NONE, dtype=np.int64)
    ex, pos = np.nonzero(where)
    cls = rows[ex, pos, 1] - cfg.vocab - cfg.relations
    statement[ex, cls] = pos
    relation[ex, cls] = rows[ex, pos, 2] - cfg.vocab
    return statement, relation
