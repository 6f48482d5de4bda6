"""Stateless batch order: the batch at any step is a pure function of (seed, step).

Each epoch is a fresh permutation of the pool drawn from (seed, epoch); a batch may straddle two
epochs. Because nothing depends on history, a resumed run draws exactly the batches an
uninterrupted one would, with no sampler state to save.
"""

from __future__ import annotations

import numpy as np


class EpochSampler:
    """Indices into a pool of `pool_size` examples for batch `step` of size `batch_size`."""

    _STREAM = 0xBA7C4  # separates this stream from the other uses of a run's seed

    def __init__(self, pool_size: int, batch_size: int, seed: int) -> None:
        self.pool_size, self.batch_size, self.seed = pool_size, batch_size, seed
        self._perms: dict[int, np.ndarray] = {}

    def epoch_order(self, epoch: int) -> np.ndarray:
        """The pool's indices in the order epoch `epoch` visits them (the last two are kept)."""
        if epoch not in self._perms:
            if len(self._perms) >= 2:
                self._perms.pop(min(self._perms))
            rng = np.random.default_rng([self.seed, self._STREAM, epoch])
            self._perms[epoch] = rng.permutation(self.pool_size)
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        """Pool indices of batch `step`."""
        spans = epoch_spans(step * self.batch_size, self.batch_size, self.pool_size)
        return np.concatenate([self.epoch_order(epoch)[first:end] for epoch, first, end in spans])


def epoch_spans(start: int, count: int, pool_size: int) -> list[tuple[int, int, int]]:
    """(epoch, first, end) slices of the epoch orders that positions start .. start + count - 1 of the
    endless stream of epochs cover, in order: one span, or more where a batch straddles epochs."""
    spans = []
    while count > 0:
        epoch, first = divmod(start, pool_size)
        take = min(count, pool_size - first)
        spans.append((epoch, first, first + take))
        start, count = start + take, count - take
    return spans
