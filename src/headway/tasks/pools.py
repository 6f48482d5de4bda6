"""Training pool and validation set drawn from independent seed streams, with no example in both."""

from __future__ import annotations

import dataclasses

import numpy as np

from headway.errors import ConfigError
from headway.settings import is_integer
from headway.tasks.base import Batch, Task

# Validation top-up rounds before concluding the task has too few distinct examples (sooner when a top-up round
# finds no example outside the pool).
_MAX_TOP_UPS = 100
# Examples drawn (from a stream of their own) before the pool, to refuse in seconds a task whose pool would hold
# every example it has: refused when at most a quarter of them are distinct (each seen four times on average, so
# the task has hardly more examples than that) and the pool leaves fewer than val_size examples out.
PROBE = 4096
SATURATED = 0.25
_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


def make_pools(cfg: Task, train_size: int, val_size: int, seed: int) -> tuple[Batch, Batch]:
    """Train pool and a validation set (`cfg.draw(..., validation=True)`, e.g. full-depth queries)
    whose token rows never occur in the pool."""
    for name, size in (("train_size", train_size), ("val_size", val_size)):
        if not is_integer(size) or size < 1:
            raise ConfigError(f"{name} = {size!r} is invalid; use a whole number >= 1")
    if not is_integer(seed) or seed < 0:
        raise ConfigError(f"seed = {seed!r} is invalid; use a whole number >= 0")
    train_seq, val_seq, probe_seq = np.random.SeedSequence(seed).spawn(3)  # the first two as they always were
    _check_enough(cfg, int(train_size), int(val_size), np.random.default_rng(probe_seq))
    train = cfg.draw(int(train_size), np.random.default_rng(train_seq))
    seen = _SeenRows(train.tokens)
    val_rng = np.random.default_rng(val_seq)
    kept = []
    missing = int(val_size)
    for _ in range(_MAX_TOP_UPS):
        drawn = cfg.draw(max(2 * missing, 1024) if kept else missing, val_rng, validation=True)
        fresh = drawn.subset(np.flatnonzero(~seen.contains(drawn.tokens))[:missing])
        if kept and not len(fresh):  # a top-up of 1024 or more draws found none: the pool holds (nearly) all
            break
        kept.append(fresh)
        missing -= len(fresh)
        if missing == 0:
            return train, type(fresh).concat(kept)
    raise ConfigError(f"found only {val_size - missing} of val_size = {val_size} validation examples outside the "
                      f"training pool; {_more(cfg, train_size)}")


def _more(cfg: Task, train_size: int) -> str:
    """How to get a validation set: the task's settings that give it more examples, or a smaller pool."""
    settings = cfg.size_settings or tuple(f.name for f in dataclasses.fields(cfg))
    which = "a larger " + " or ".join(settings) if cfg.size_settings else f"settings of {cfg.name} that give it " \
        f"more examples ({', '.join(settings)})"
    return (f"task {cfg.name} has too few distinct examples for this pool: use {which}, or a train_size below "
            f"{train_size}")


def _check_enough(cfg: Task, train_size: int, val_size: int, rng: np.random.Generator) -> None:
    """Refuse, from a probe of PROBE examples, a task whose training pool would leave fewer than `val_size`
    examples outside it: a slow task would otherwise draw the whole pool (minutes) before finding that out."""
    count = min(PROBE, train_size)
    distinct = len(np.unique(_row_hashes(cfg.draw(count, rng).tokens)))
    if distinct > SATURATED * count:
        return
    population = _population(count, distinct)
    outside = population * (1 - 1 / population) ** train_size  # expected examples the pool misses
    if outside < val_size:
        raise ConfigError(f"{count} examples drawn held only {distinct} distinct ones, so a pool of train_size = "
                          f"{train_size} leaves about {outside:.0f} out, fewer than val_size = {val_size}; "
                          f"{_more(cfg, train_size)}")


def _population(draws: int, distinct: int) -> float:
    """The number N of equally likely examples from which `draws` draws give `distinct` distinct ones on average
    (N·(1 − (1 − 1/N)^draws) = distinct), by bisection."""
    low, high = float(distinct), float(distinct) * 2 + 1
    while high * -np.expm1(draws * np.log1p(-1 / high)) < distinct:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if middle * -np.expm1(draws * np.log1p(-1 / middle)) < distinct else (low, middle)
    return high


class _SeenRows:
    """Exact membership test for token rows: a 64-bit hash filters, byte comparison decides."""

    def __init__(self, tokens: np.ndarray) -> None:
        """Index the rows of tokens [N, ...] by hash."""
        self._tokens = tokens
        self._hashes = _row_hashes(tokens)
        self._sorted = np.sort(self._hashes)

    def contains(self, tokens: np.ndarray) -> np.ndarray:
        """Boolean per row of tokens: whether an identical row was indexed."""
        hashes = _row_hashes(tokens)
        slot = np.minimum(np.searchsorted(self._sorted, hashes), len(self._sorted) - 1)
        hits = np.flatnonzero(self._sorted[slot] == hashes)
        if hits.size == 0:
            return np.zeros(len(tokens), dtype=bool)
        known = {row.tobytes() for row in self._distinct(np.isin(self._hashes, hashes[hits]))}
        found = np.zeros(len(tokens), dtype=bool)
        flat = tokens.reshape(len(tokens), -1)
        found[hits] = [flat[i].tobytes() in known for i in hits]
        return found


    def _distinct(self, mask: np.ndarray) -> np.ndarray:
        """The distinct indexed rows among those `mask` selects, flattened: rows grouped by hash, each group's
        first row kept and any other row that differs from it (a hash collision), so a pool of many copies
        of few rows costs one sort of hashes, not of rows."""
        index = np.flatnonzero(mask)
        index = index[np.argsort(self._hashes[index], kind="stable")]
        hashes = self._hashes[index]
        starts = np.r_[True, hashes[1:] != hashes[:-1]]
        first = index[np.maximum.accumulate(np.where(starts, np.arange(len(index)), 0))]
        flat = self._tokens.reshape(len(self._tokens), -1)
        return flat[index[starts | (flat[index] != flat[first]).any(axis=1)]]


def _row_hashes(tokens: np.ndarray) -> np.ndarray:
    """FNV-1a style 64-bit hash of each row of tokens [N, ...], one vectorised pass per column."""
    columns = tokens.reshape(len(tokens), -1)
    hashes = np.full(len(tokens), _FNV_OFFSET, dtype=np.uint64)
    for j in range(columns.shape[1]):
        hashes ^= columns[:, j].astype(np.uint64)
        hashes *= _FNV_PRIME
    return hashes
