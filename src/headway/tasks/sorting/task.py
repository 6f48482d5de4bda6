"""List-sorting task: configuration, vectorised generator and token layout.

An example is a list a₁ … a_n of numbers in 0 … values-1 and its ascending sort b₁ … b_n.
The full sequence is ``[a₁ … a_n, SEP, b₁ … b_n]`` with SEP = values (d_vocab = values + 1).
The model reads the first 2n tokens (``b_n`` is never an input) and predicts, with teacher forcing,
b₁ … b_n at positions n … 2n-1 (SEP … b_{n-1}); SEP is never a target, so d_out = values.

How the numbers are drawn (``gaps``):

- ``uniform`` (default): n distinct numbers uniformly from the range (with ``repeats``, n
  independent uniform draws). The mean gap between adjacent sorted numbers is then fixed by the
  range and n (about (values - 1)·(n - 1)/(n + 1)/(n - 1) ≈ 4.5 for the defaults).
- ``geometric``: the n-1 gaps are drawn directly, each ``min_gap + Geometric`` with mean
  ``mean_gap`` (min_gap is 1 without repeats, 0 with), the smallest number uniformly among the
  starts that keep the list in range; lists that do not fit are redrawn. This sets δ̄ without
  changing the vocabulary, so runs with different δ̄ share one ensemble.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from headway.errors import ConfigError
from headway.limits import MAX_CONTEXT, MAX_SYMBOLS
from headway.settings import check_bool, check_choice, check_int, check_number, is_integer
from headway.tasks.base import ArrayBatch, Task
from headway.tasks.registry import register_task

GAP_KINDS = ("uniform", "geometric")
# Redraw rounds for geometric lists that overflow the range before giving up on the setting.
_MAX_REDRAWS = 200
# The recipe (docs/sorting-task.md): 1 layer, attention-only, 2 heads of width 48 in d_model 96, LayerNorm;
# Adam (L2 decay 0.005, on weight matrices) with lr 1e-3 falling linearly to 1e-4, batch 512,
# cross-entropy, a fixed pool of 150k lists and a 10k validation set, dense log-spaced checkpoints.
RECIPE: dict[str, Any] = {
    "layers": 1, "heads": 2, "d_model": 96, "d_head": 48, "d_mlp": 0, "layernorm": True,
    "optimizer": "adam", "lr": 1e-3, "schedule": "linear", "final_lr_fraction": 0.1, "weight_decay": 0.005,
    "batch_size": 512, "loss": "cross_entropy", "train_size": 150_000, "val_size": 10_000, "steps": 20_000,
    "eval_every": 100, "checkpoint_every": 2000, "log_checkpoints": 40,
}


@register_task
@dataclass(frozen=True)
class SortingConfig(Task):
    """Shape of one sorting task; validated on construction so a bad value fails early."""

    name: ClassVar[str] = "sorting"
    summary: ClassVar[str] = "sort a list of numbers with teacher forcing (docs/sorting-task.md)"
    doc: ClassVar[str] = "docs/sorting-task.md"
    size_settings: ClassVar[tuple[str, ...]] = ("values", "length")
    scales: ClassVar[dict[str, dict[str, Any]]] = {
        "paper": RECIPE,
        # The same model and recipe; fewer steps, a smaller batch and validation set.
        "cpu": {**RECIPE, "batch_size": 128, "steps": 1500, "val_size": 2000, "eval_every": 50,
                "checkpoint_every": 500, "log_checkpoints": 16},
    }

    length: int = 10
    values: int = 51
    repeats: bool = False
    gaps: str = "uniform"
    mean_gap: float = 3.0  # δ̄, used by gaps = "geometric"

    def __post_init__(self) -> None:
        self.normalise(
            length=check_int("length", self.length, 2, MAX_CONTEXT // 2),
            values=check_int("values", self.values, 2, MAX_SYMBOLS),
            repeats=check_bool("repeats", self.repeats),
            gaps=check_choice("gaps", self.gaps, GAP_KINDS),
            mean_gap=check_number("mean_gap", self.mean_gap, 0.0),
        )
        if self.gaps == "uniform" and self.mean_gap != SortingConfig.mean_gap:
            raise ConfigError(f"mean_gap = {self.mean_gap:g} applies to gaps = 'geometric' only (gaps = 'uniform' "
                              "here); leave it out or add --gaps geometric")
        if not self.repeats and self.length > self.values:
            raise ConfigError(f"length = {self.length} distinct numbers do not fit in values = {self.values}; "
                              f"use values >= {self.length} or repeats = true")
        if self.gaps == "geometric":
            low = self.min_gap
            high = (self.values - 1) / (self.length - 1)
            if not low <= self.mean_gap <= high:
                raise ConfigError(f"mean_gap = {self.mean_gap:g} is invalid for length {self.length} and values "
                                  f"{self.values}; use a mean gap in [{low}, {high:.3g}]")

    @property
    def min_gap(self) -> int:
        """Smallest gap between adjacent sorted numbers: 0 with repeats, else 1."""
        return 0 if self.repeats else 1

    @property
    def sep(self) -> int:
        """Token id of the separator."""
        return self.values

    @property
    def d_vocab(self) -> int:
        """Token ids the model embeds: the numbers and SEP."""
        return self.values + 1

    @property
    def vocab(self) -> int:
        """Classes of one prediction: the numbers."""
        return self.values

    @property
    def n_ctx(self) -> int:
        """Input positions: the list, SEP and the first n-1 sorted numbers."""
        return 2 * self.length

    @property
    def n_slots(self) -> int:
        """One token per position."""
        return 1

    @property
    def n_targets(self) -> int:
        """Predictions per example: every sorted number."""
        return self.length

    @property
    def readout_positions(self) -> int:
        """Trailing positions whose outputs are predictions (SEP … b_{n-1})."""
        return self.length

    def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> SortingBatch:
        """n examples (training and validation lists come from the same distribution)."""
        return generate(self, n, rng)

    def accuracy_columns(self, per_target: list[float], all_correct: float, split: str = "val") -> dict[str, float]:
        """Logged accuracies: the mean over sorted positions, and whole lists right."""
        return {f"{split}_accuracy": float(np.mean(per_target)), f"{split}_list_accuracy": all_correct}

    def records(self, batch: SortingBatch) -> list[dict[str, Any]]:
        """The list, its sort, the gaps, and the model's tokens and targets with their positions."""
        readout = list(range(self.length, 2 * self.length))
        columns = zip(batch.lists.tolist(), batch.sorted.tolist(), batch.gaps.tolist(), batch.tokens.tolist(),
                      batch.targets.tolist(), strict=True)
        return [{"list": values, "sorted": ordered, "gaps": gaps, "tokens": tokens, "sep": self.sep,
                 "readout_positions": readout, "targets": targets}
                for values, ordered, gaps, tokens, targets in columns]


@dataclass
class SortingBatch(ArrayBatch):
    """N examples: model tokens [N, 2n] (a₁ … a_n, SEP, b₁ … b_{n-1}) and targets [N, n] (b₁ … b_n)
    plus the lists themselves."""

    lists: np.ndarray  # [N, n]: a₁ … a_n
    sorted: np.ndarray  # [N, n]: b₁ … b_n

    @property
    def gaps(self) -> np.ndarray:
        """Gaps between adjacent sorted numbers [N, n-1]."""
        return np.diff(self.sorted, axis=1)


def generate(cfg: SortingConfig, n: int, rng: np.random.Generator | int) -> SortingBatch:
    """Draw n independent examples of cfg with explicit randomness (a Generator or an int seed)."""
    if not is_integer(n) or n <= 0:
        raise ConfigError(f"n = {n!r} examples requested; use a whole number n >= 1")
    rng = rng if isinstance(rng, np.random.Generator) else np.random.default_rng(rng)
    lists = _draw_geometric(cfg, int(n), rng) if cfg.gaps == "geometric" else _draw_uniform(cfg, int(n), rng)
    return encode(cfg, lists)


def encode(cfg: SortingConfig, lists: np.ndarray) -> SortingBatch:
    """Tokens and targets of given lists [N, n] (e.g. hand-written ones)."""
    lists = np.asarray(lists, dtype=np.int64)
    if lists.ndim != 2 or lists.shape[1] != cfg.length:
        raise ConfigError(f"lists have shape {lists.shape}; expected [N, {cfg.length}]")
    if lists.size and (lists.min() < 0 or lists.max() >= cfg.values):
        raise ConfigError(f"list values must lie in 0 … {cfg.values - 1}")
    ordered = np.sort(lists, axis=1)
    sep = np.full((len(lists), 1), cfg.sep, dtype=np.int64)
    tokens = np.concatenate([lists, sep, ordered[:, :-1]], axis=1)
    return SortingBatch(tokens=tokens, targets=ordered.copy(), lists=lists, sorted=ordered)


def _draw_uniform(cfg: SortingConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n lists of uniform numbers: distinct (the first `length` of a random permutation) or not."""
    if cfg.repeats:
        return rng.integers(0, cfg.values, size=(n, cfg.length))
    keys = rng.random((n, cfg.values))
    return np.argpartition(keys, cfg.length - 1, axis=1)[:, : cfg.length].astype(np.int64)


def _draw_geometric(cfg: SortingConfig, n: int, rng: np.random.Generator) -> np.ndarray:
    """n lists whose sorted gaps are min_gap + Geometric (mean mean_gap), shuffled into random order."""
    span = cfg.values - 1
    extra = cfg.mean_gap - cfg.min_gap  # mean of the geometric part (support 0, 1, …)
    gaps = np.empty((n, cfg.length - 1), dtype=np.int64)
    todo = np.arange(n)
    for _ in range(_MAX_REDRAWS):
        if extra > 0:
            drawn = rng.geometric(1.0 / (1.0 + extra), size=(len(todo), cfg.length - 1)) - 1
        else:
            drawn = np.zeros((len(todo), cfg.length - 1), dtype=np.int64)
        gaps[todo] = drawn + cfg.min_gap
        todo = todo[gaps[todo].sum(axis=1) > span]
        if not len(todo):
            break
    else:
        raise ConfigError(f"mean_gap = {cfg.mean_gap:g} rarely fits {cfg.length} numbers in 0 … {span}; "
                          "use a smaller mean_gap or more values")
    room = span - gaps.sum(axis=1)
    start = (rng.random(n) * (room + 1)).astype(np.int64)
    ordered = np.concatenate([start[:, None], start[:, None] + np.cumsum(gaps, axis=1)], axis=1)
    return rng.permuted(ordered, axis=1)
