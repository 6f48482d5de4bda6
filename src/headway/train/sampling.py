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

    def _perm(self, epoch: int) -> np.ndarray:
        if epoch not in self._perms:
            if len(self._perms) >= 2:
                self._perms.pop(min(self._perms))
            rng = np.random.default_rng([self.seed, self._STREAM, epoch])
            self._perms[epoch] = rng.permutation(self.pool_size)
        return self._perms[epoch]

    def indices(self, step: int) -> np.ndarray:
        positions = step * self.batch_size + np.arange(self.batch_size, dtype=np.int64)
        epochs, within = np.divmod(positions, self.pool_size)
        out = np.empty(self.batch_size, dtype=np.int64)
        for epoch in np.unique(epochs):
            sel = epochs == epoch
            out[sel] = self._perm(int(epoch))[within[sel]]
        return out
