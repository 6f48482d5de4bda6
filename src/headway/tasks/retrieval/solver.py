"""Reference solver: recomputes the answer from the structured view alone, independently of the tokens."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from headway.tasks.retrieval.generator import RetrievalBatch


def solve(
    statements: Sequence[Sequence[int]],
    query: int,
    hops: int,
    classes: Mapping[Any, int] | Sequence[Sequence[int]] | None = None,
    rules: Mapping[Any, int] | Sequence[int] | None = None,
) -> list[int]:
    """Follow `hops` links from `query` and return the chain [query, ..., answer].

    Plain statements are [left, right] pairs. Conditional statements are [relation, left, right]
    triples; then `classes` (entity -> class, as a mapping or [entity, class] pairs) and `rules`
    (class -> relation, as a mapping or a list indexed by class) select the relation followed
    from each entity. Mapping keys may be strings, as in JSON records. Raises ValueError when the
    statements do not determine a unique next entity.
    """
    if classes is None:
        successor = _unique_successors((int(left), int(right)) for left, right in statements)
    else:
        if rules is None:
            raise ValueError("conditional statements need both classes and rules")
        entity_class = _int_map(classes.items() if isinstance(classes, Mapping) else classes)
        class_rule = _int_map(rules.items() if isinstance(rules, Mapping) else enumerate(rules))
        successor = _unique_successors(
            (int(left), int(right))
            for relation, left, right in statements
            if int(relation) == class_rule[entity_class[int(left)]]
        )
    chain = [int(query)]
    for _ in range(int(hops)):
        if chain[-1] not in successor:
            raise ValueError(f"no link to follow from {chain[-1]} after {len(chain) - 1} hops")
        chain.append(successor[chain[-1]])
    return chain


def solve_batch(batch: RetrievalBatch) -> np.ndarray:
    """Answers of every example, computed one by one with solve() from the structured view."""
    statements, query, hops = batch.statements.tolist(), batch.query.tolist(), batch.query_hops.tolist()
    conditional = batch.classes is not None and batch.rules is not None
    classes = batch.classes.tolist() if conditional else [None] * len(query)
    rules = batch.rules.tolist() if conditional else [None] * len(query)
    examples = zip(statements, query, hops, classes, rules, strict=True)
    answers = [solve(s, q, h, c, r)[-1] for s, q, h, c, r in examples]
    return np.array(answers, dtype=np.int64)


def _int_map(pairs: Any) -> dict[int, int]:
    """Dict of int keys to int values from (key, value) pairs."""
    return {int(key): int(value) for key, value in pairs}


def _unique_successors(pairs: Any) -> dict[int, int]:
    """Map each left entity to its right entity, refusing an entity with two links to follow."""
    successor: dict[int, int] = {}
    for left, right in pairs:
        if left in successor:
            raise ValueError(f"entity {left} has more than one link to follow")
        successor[left] = right
    return successor
