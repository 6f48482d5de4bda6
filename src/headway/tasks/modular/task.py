"""Modular addition, the classic grokking task: a + b mod p from the sequence [a, b, =].

The examples are the p² pairs (a, b) with a, b in 0 … p-1; tokens are a, b and the `=` token
(id p), so d_vocab = p + 1; the model reads out (a + b) mod p at the last position (d_out = p).
The set is finite, so the task splits it instead of drawing from it: a seeded permutation of all
p² pairs, the first round(train_fraction · p²) for training (full-batch training when batch_size
is that size) and all the others as the validation (test) set. `train_size` and `val_size` do
not apply to this task. `draw` (for `headway data modular`) samples pairs uniformly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from headway.errors import ConfigError
from headway.limits import MAX_MODULUS
from headway.settings import check_int, check_number
from headway.tasks.base import ArrayBatch, Task
from headway.tasks.registry import register_task

# Nanda et al. (2023), "Progress measures for grokking via mechanistic interpretability", as far as
# we follow it: p = 113, 30% of the pairs for training, one layer, 4 heads of width 32 in d_model 128,
# MLP 512, no LayerNorm, weights drawn at std ≈ 1/sqrt(d_model) (init_scale 4.4 × our 0.02), AdamW
# lr 1e-3 with weight decay 1 and betas (0.9, 0.98), full batch (3831 pairs), 40k steps.
PAPER: dict[str, Any] = {
    "modulus": 113, "train_fraction": 0.3, "layers": 1, "heads": 4, "d_model": 128, "d_mlp": 512,
    "layernorm": False, "init_scale": 4.4, "optimizer": "adamw", "lr": 1e-3, "weight_decay": 1.0, "beta2": 0.98,
    "warmup_steps": 10, "batch_size": 3831, "steps": 40_000, "eval_every": 100, "checkpoint_every": 1000,
    "log_checkpoints": 40,
}
# Minutes on 2 cores (measured, docs/modular-task.md): p = 59, 35% of the pairs (1218), d_model 64, MLP
# 256, weights ×5 and lr 1e-2; with weight decay it memorises by step ~150 and groks by ~1500.
CPU: dict[str, Any] = {
    "modulus": 59, "train_fraction": 0.35, "layers": 1, "heads": 4, "d_model": 64, "d_mlp": 256,
    "layernorm": False, "init_scale": 5.0, "optimizer": "adamw", "lr": 1e-2, "weight_decay": 1.0, "beta2": 0.98,
    "warmup_steps": 10, "batch_size": 1218, "steps": 2000, "eval_every": 50, "checkpoint_every": 100,
    "log_checkpoints": 20,
}


@register_task
@dataclass(frozen=True)
class ModularConfig(Task):
    """Modular addition modulo `modulus`, its p² pairs split by `train_fraction`."""

    name: ClassVar[str] = "modular"
    summary: ClassVar[str] = "a + b mod p on its p² pairs split by a train fraction (docs/modular-task.md)"
    doc: ClassVar[str] = "docs/modular-task.md"
    evaluates_training_pool: ClassVar[bool] = True  # train accuracy over the whole training set: grokking
    scales: ClassVar[dict[str, dict[str, Any]]] = {"paper": PAPER, "cpu": CPU}
    ignored_training: ClassVar[tuple[str, ...]] = ("train_size", "val_size")
    ignored_why: ClassVar[str] = "it trains on train_fraction of the p² pairs and validates on the others"

    modulus: int = 113
    train_fraction: float = 0.3

    def __post_init__(self) -> None:
        self.normalise(modulus=check_int("modulus", self.modulus, 2, MAX_MODULUS),
                       train_fraction=check_number("train_fraction", self.train_fraction, 0.0, 1.0,
                                                   low_open=True, high_open=True))
        if not 1 <= self.train_examples < self.modulus**2:
            raise ConfigError(f"train_fraction = {self.train_fraction:g} of {self.modulus ** 2} pairs leaves no "
                              "training or no test pair; choose a fraction that leaves both")

    @property
    def train_examples(self) -> int:
        """Pairs in the training set."""
        return round(self.train_fraction * self.modulus**2)

    @property
    def equals(self) -> int:
        """Token id of `=`."""
        return self.modulus

    @property
    def n_ctx(self) -> int:
        return 3

    @property
    def n_slots(self) -> int:
        return 1

    @property
    def d_vocab(self) -> int:
        return self.modulus + 1

    @property
    def vocab(self) -> int:
        return self.modulus

    @property
    def n_targets(self) -> int:
        return 1

    @property
    def readout_positions(self) -> int:
        return 1

    def encode(self, a: np.ndarray, b: np.ndarray) -> ModularBatch:
        """The batch of the pairs (a[i], b[i])."""
        a, b = np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)
        tokens = np.stack([a, b, np.full_like(a, self.equals)], axis=1)
        return ModularBatch(tokens=tokens, targets=((a + b) % self.modulus)[:, None], a=a, b=b)

    def all_pairs(self) -> ModularBatch:
        """Every pair, a-major: row a·p + b is (a, b)."""
        a, b = np.divmod(np.arange(self.modulus**2), self.modulus)
        return self.encode(a, b)

    def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> ModularBatch:
        """n pairs drawn uniformly (with replacement)."""
        return self.encode(rng.integers(0, self.modulus, n), rng.integers(0, self.modulus, n))

    def split(self, train_size: int, val_size: int, seed: int) -> tuple[ModularBatch, ModularBatch]:
        """The first train_examples pairs of a permutation drawn from `seed` for training, the rest for
        validation; `train_size` and `val_size` do not apply (the set is finite)."""
        order = np.random.default_rng(check_int("data_seed", seed, 0)).permutation(self.modulus**2)
        pairs = self.all_pairs()
        return pairs.subset(np.sort(order[: self.train_examples])), pairs.subset(np.sort(order[self.train_examples :]))

    def records(self, batch: ModularBatch) -> list[dict[str, Any]]:
        """Each pair, its sum mod p, and the model's tokens and target."""
        return [{"a": a, "b": b, "answer": t[0], "tokens": tokens, "targets": t, "readout_position": self.n_ctx - 1}
                for a, b, tokens, t in zip(batch.a.tolist(), batch.b.tolist(), batch.tokens.tolist(),
                                           batch.targets.tolist(), strict=True)]

    def ensemble_shape(self) -> dict[str, Any]:
        """Runs share an ensemble only with equally large training sets."""
        return {**super().ensemble_shape(), "train_examples": self.train_examples}


@dataclass
class ModularBatch(ArrayBatch):
    """Pairs: tokens [N, 3] (a, b, =), targets [N, 1] ((a + b) mod p), and a, b [N]."""

    a: np.ndarray
    b: np.ndarray
