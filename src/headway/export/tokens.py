"""Token ids of a headway task as a library with one token per position takes them.

A packed layout sums the embeddings of several slot ids at one position (e.g. a link's two symbols);
one-token-per-position libraries cannot. The exact translation is a combined vocabulary: every tuple of
slot ids becomes one id whose embedding row is the sum of the slots' rows, so the model's first residual
stream is unchanged. Slot s holds ids s·slot_vocab … (s+1)·slot_vocab − 1 (`Task.slot_vocab`); the tuple
(d₀, …, d_{k−1}) of slot-relative ids maps to offset + Σ d_s·slot_vocab^(k−1−s). The offset is the number of
raw ids, k·slot_vocab, and the rows below it are NaN: raw headway ids handed to the library unmapped give NaN
outputs, never numbers that look right.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.tasks.base import Task

# Rows of a combined embedding beyond which an export is refused (4 M rows × d_model floats).
MAX_COMBINED_VOCAB = 1 << 22


@dataclass(frozen=True)
class TokenMap:
    """Maps headway tokens [..., pos, slots] (tasks whose batches carry a slot axis) or [..., pos] to one
    id per position."""

    slots: int
    slot_vocab: int
    slot_axis: bool
    offset: int = 0  # the first combined id (k·slot_vocab for a packed layout; 0 for an export from before it)

    @property
    def d_vocab(self) -> int:
        """Ids after mapping: offset + slot_vocab ** slots."""
        return self.offset + self.slot_vocab**self.slots

    def __call__(self, tokens: Tensor | np.ndarray) -> Tensor:
        """One id per position, [..., pos] (int64); ids outside their slot's range are refused."""
        tokens = torch.as_tensor(tokens).long()
        if self.slot_axis and (tokens.dim() < 2 or tokens.shape[-1] != self.slots):
            raise ConfigError(f"tokens of shape {tuple(tokens.shape)} lack this task's slot axis: "
                              f"[..., pos, {self.slots}]")
        digits = tokens - torch.arange(self.slots, device=tokens.device) * self.slot_vocab if self.slot_axis \
            else tokens.unsqueeze(-1)
        if digits.numel() and (digits.min() < 0 or digits.max() >= self.slot_vocab):
            raise ConfigError(f"token ids outside their slot's range: slot s holds "
                              f"s·{self.slot_vocab} … (s+1)·{self.slot_vocab} − 1")
        weights = self.slot_vocab ** torch.arange(self.slots - 1, -1, -1, device=tokens.device)
        return self.offset + (digits * weights).sum(dim=-1)

    def combined_embedding(self, w_e: Tensor) -> Tensor:
        """The [d_vocab, d_model] embedding: `offset` NaN rows, then for every tuple the sum of its slots' rows."""
        rows = w_e.reshape(self.slots, self.slot_vocab, w_e.shape[-1])
        combined = rows[0]
        for slot in range(1, self.slots):
            combined = (combined[:, None, :] + rows[slot][None, :, :]).reshape(-1, w_e.shape[-1])
        return torch.cat([w_e.new_full((self.offset, w_e.shape[-1]), float("nan")), combined])

    def to_dict(self) -> dict[str, Any]:
        """The map's numbers, for the export's files."""
        return asdict(self)


def token_map(task: Task, d_model: int) -> TokenMap:
    """The map for a model of `task` (a packed one's combined ids after the raw ids); refused when the combined
    vocabulary would not fit (naming its size and the flat layout as the way out)."""
    slot_axis = task.draw(1, np.random.default_rng(0)).tokens.ndim == 3
    offset = task.n_slots * task.slot_vocab if task.n_slots > 1 else 0
    mapping = TokenMap(task.n_slots, task.slot_vocab, slot_axis, offset)
    slots = task.n_slots
    if mapping.d_vocab > MAX_COMBINED_VOCAB:
        raise ConfigError(f"the packed layout's combined vocabulary has {mapping.d_vocab} ids "
                          f"({mapping.slot_vocab}^{slots}, {mapping.d_vocab * d_model * 4 / 2**30:.1f} GiB of "
                          f"embeddings), over the {MAX_COMBINED_VOCAB} allowed; export a flat-layout run instead")
    return mapping
