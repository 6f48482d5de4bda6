"""A run's examples as torch tensors, ready for a model: its validation set and training pool exactly as
the trainer built them (`task.split` is a pure function of the task, the sizes and `data_seed`), and fresh
draws of its task."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch
from torch import Tensor

from headway.tasks.base import Batch

if TYPE_CHECKING:
    from headway.runs.config import RunConfig


@dataclass
class Examples:
    """Examples of a run: int64 `tokens` [N, pos] or [N, pos, slots] and `targets` [N, n_targets], and the
    task's batch they came from (its structured view: answers, chains, …)."""

    tokens: Tensor
    targets: Tensor
    batch: Batch

    def __len__(self) -> int:
        return len(self.tokens)

    def for_ensemble(self, n_instances: int) -> tuple[Tensor, Tensor]:
        """Tokens and targets with a leading instance axis, every instance reading the same examples (no copy)."""
        return (self.tokens.expand(n_instances, *self.tokens.shape),
                self.targets.expand(n_instances, *self.targets.shape))


def of_batch(batch: Batch, device: torch.device | str = "cpu") -> Examples:
    """A task batch as int64 tensors on `device`."""
    return Examples(torch.from_numpy(np.asarray(batch.tokens)).long().to(device),
                    torch.from_numpy(np.asarray(batch.targets)).long().to(device), batch)


def split_examples(run: RunConfig, device: torch.device | str = "cpu") -> tuple[Examples, Examples]:
    """The run's training pool and validation set, as its trainer built them."""
    pool, val = run.task.split(run.train.train_size, run.train.val_size, run.data_seed)
    return of_batch(pool, device), of_batch(val, device)


def drawn_tokens(run: RunConfig, count: int, seed: int = 0, validation: bool = True) -> Tensor:
    """`count` fresh examples of the run's task (validation-style by default) as int64 tokens."""
    return of_batch(run.task.draw(count, np.random.default_rng(seed), validation=validation)).tokens
