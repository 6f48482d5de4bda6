"""Training pools and validation sets of an ensemble, on the device, one per distinct task."""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.train.sampling import EpochSampler, epoch_spans


class EnsembleData:
    """Batches for E runs: instance e draws from the pool of its own (task, data_seed) with its own
    seed, exactly the batches it would draw if trained alone. Pools come from `task.split`."""

    def __init__(self, runs: list[RunConfig], device: torch.device | str) -> None:
        self.device = torch.device(device)
        train = runs[0].train
        self.batch_size = train.batch_size
        keys = [(run.task, run.data_seed) for run in runs]
        unique = list(dict.fromkeys(keys))
        pools = [task.split(train.train_size, train.val_size, seed) for task, seed in unique]
        sizes = {(len(p[0]), len(p[1])) for p in pools}
        if len(sizes) != 1:
            raise ConfigError(f"the runs of one ensemble have pools of different sizes {sorted(sizes)}; "
                              "their task's ensemble_shape() must tell them apart")
        self.pool_size = len(pools[0][0])
        # All pools stacked: instance e reads rows offset[e] .. offset[e] + pool_size.
        self.tokens = torch.from_numpy(np.concatenate([p[0].tokens for p in pools])).to(self.device)
        self.targets = torch.from_numpy(np.concatenate([p[0].targets for p in pools])).to(self.device)
        which = [unique.index(k) for k in keys]
        self.offsets = torch.tensor([w * self.pool_size for w in which], device=self.device)[:, None]
        self.val_tokens = torch.stack([torch.from_numpy(pools[w][1].tokens) for w in which]).long().to(self.device)
        self.val_targets = torch.stack([torch.from_numpy(pools[w][1].targets) for w in which]).to(self.device)
        self.samplers = [EpochSampler(self.pool_size, self.batch_size, run.seed) for run in runs]
        self._epochs: dict[int, Tensor] = {}

    def _epoch_rows(self, epoch: int) -> Tensor:
        """Every instance's pool rows in the order of `epoch` [E, pool], offsets added, on the device:
        copied there once per epoch, so drawing a batch needs nothing from the host."""
        if epoch not in self._epochs:
            if len(self._epochs) >= 2:
                self._epochs.pop(min(self._epochs))
            order = np.stack([s.epoch_order(epoch) for s in self.samplers])
            self._epochs[epoch] = torch.from_numpy(order).to(self.device) + self.offsets
        return self._epochs[epoch]

    def train_batch(self, step: int) -> tuple[Tensor, Tensor]:
        """Tokens [E, B, pos, slots] and target symbols [E, B, T] of update number `step`: the rows
        `EpochSampler.indices(step)` names, sliced from the epoch orders kept on the device."""
        start = step * self.batch_size
        parts = []
        for epoch, low, high in epoch_spans(start, self.batch_size, self.pool_size):
            parts.append(self._epoch_rows(epoch)[:, low:high])
        idx = parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)
        return self.tokens[idx].long(), self.targets[idx]

    def pool(self) -> tuple[Tensor, Tensor]:
        """Every instance's whole training pool: tokens [E, pool, pos, slots] and targets [E, pool, T]."""
        idx = self.offsets + torch.arange(self.pool_size, device=self.device)
        return self.tokens[idx].long(), self.targets[idx]
