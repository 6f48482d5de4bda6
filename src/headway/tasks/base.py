"""What every task provides: the `Task` config interface and the `Batch` protocol of its examples.

A task is a frozen dataclass subclassing `Task`: its fields are run settings (`hops`, `length`, …,
one flat namespace with the model and training settings), its properties the tensor shapes the
model is built for, and its methods draw examples, split them into a training pool and a
validation set, name the logged accuracies and turn examples into JSON records. Its examples come
as a dataclass subclassing `ArrayBatch`. `headway.tasks.registry.register_task` makes the task
known to `headway train`, `headway data`, the named scales and the run store.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self, runtime_checkable

import numpy as np

from headway.settings import Settings

if TYPE_CHECKING:
    from headway.model.config import ModelConfig


@runtime_checkable
class Batch(Protocol):
    """N examples: model tokens [N, n_ctx] or [N, n_ctx, n_slots] and target symbols [N, n_targets]."""

    tokens: np.ndarray
    targets: np.ndarray

    def __len__(self) -> int: ...

    def subset(self, idx: np.ndarray | slice | Sequence[int]) -> Self: ...

    @classmethod
    def concat(cls, batches: Sequence[Self]) -> Self: ...


@dataclasses.dataclass
class ArrayBatch:
    """A Batch whose every field is an array over examples (or None, for a view a variant lacks)."""

    tokens: np.ndarray
    targets: np.ndarray

    def __len__(self) -> int:
        """Number of examples."""
        return len(self.tokens)

    def subset(self, idx: np.ndarray | slice | Sequence[int]) -> Self:
        """Examples selected by idx (fancy index, mask or slice), applied to every array."""
        return dataclasses.replace(self, **{f.name: None if (a := getattr(self, f.name)) is None else a[idx]
                                            for f in dataclasses.fields(self)})

    @classmethod
    def concat(cls, batches: Sequence[Self]) -> Self:
        """One batch holding the examples of `batches` in order."""
        arrays = {}
        for f in dataclasses.fields(cls):
            parts = [getattr(b, f.name) for b in batches]
            arrays[f.name] = None if parts[0] is None else np.concatenate(parts)
        return cls(**arrays)


class Task(Settings, ABC):
    """The interface of a task config (a frozen dataclass). Class attributes describe the task to the
    registry; properties give the shapes; `draw` and `records` are required, the rest have defaults."""

    name: ClassVar[str]  # registry key and the value of `--task`
    summary: ClassVar[str]  # one line for `--help`
    doc: ClassVar[str] = ""  # where the task is documented, e.g. "docs/sorting-task.md"
    scales: ClassVar[dict[str, dict[str, Any]]]  # named flat settings over the run defaults; the first is the default
    default_loss: ClassVar[str] = "cross_entropy"  # the `loss` every scale starts from
    evaluates_training_pool: ClassVar[bool] = False  # log train_* accuracies over the whole pool at each evaluation
    ignored_training: ClassVar[tuple[str, ...]] = ()  # training settings the task does not use: refused unless default
    ignored_why: ClassVar[str] = ""  # why it does not use them, for that refusal
    size_settings: ClassVar[tuple[str, ...]] = ()  # settings giving more distinct examples, named when a split runs out

    # --- shapes the model and trainer are built for ---------------------------------------------

    @property
    @abstractmethod
    def n_ctx(self) -> int:
        """Input positions per example."""

    @property
    @abstractmethod
    def n_slots(self) -> int:
        """Token ids summed per position (1 unless the layout packs several)."""

    @property
    @abstractmethod
    def d_vocab(self) -> int:
        """Distinct token ids the model embeds."""

    @property
    def slot_vocab(self) -> int:
        """Ids one slot can hold: slot s of a position holds s·slot_vocab … (s+1)·slot_vocab − 1, the
        convention every packed layout follows (exports to one-token-per-position libraries rely on it)."""
        return self.d_vocab // self.n_slots

    @property
    @abstractmethod
    def vocab(self) -> int:
        """Classes of one prediction (the width of one readout block)."""

    @property
    @abstractmethod
    def n_targets(self) -> int:
        """Target symbols per example."""

    @property
    @abstractmethod
    def readout_positions(self) -> int:
        """Trailing positions read out (1: every target from the last position)."""

    @property
    def train_readout_positions(self) -> int:
        """Trailing positions the training loss reads (default: those evaluation reads). Dense
        supervision reads every position, its training targets one row of blocks per position."""
        return self.readout_positions

    @property
    def train_targets_masked(self) -> bool:
        """Whether training targets hold -1 for "no target at this block" (left out of the loss)."""
        return False

    @property
    def d_out(self) -> int:
        """Readout width per read position: all targets at one position, or one per position."""
        return self.vocab * (self.n_targets if self.readout_positions == 1 else 1)

    def check_model(self, model: ModelConfig) -> None:
        """Raise ConfigError when this task's settings cannot train `model` (default: every model can)."""

    # --- data ---------------------------------------------------------------------------------

    @abstractmethod
    def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> Batch:
        """n examples drawn with `rng` (validation examples may differ, e.g. always full depth)."""

    def split(self, train_size: int, val_size: int, seed: int) -> tuple[Batch, Batch]:
        """The training pool and validation set of `seed`. Default: `draw` from independent seed
        streams, validation rows never in the pool (`headway.tasks.pools`). A task with a finite set
        of examples overrides this to split that set."""
        from headway.tasks.pools import make_pools

        return make_pools(self, train_size, val_size, seed)

    @abstractmethod
    def records(self, batch: Batch) -> list[dict[str, Any]]:
        """One JSON-serialisable dict per example (plain Python values) for `headway data`."""

    # --- what is logged -----------------------------------------------------------------------

    def accuracy_columns(self, per_target: list[float], all_correct: float, split: str = "val") -> dict[str, float]:
        """Logged accuracies of one instance on `split` ("val", or "train" for the pool) from the
        per-target accuracy and the fraction of examples with every target right."""
        return {f"{split}_accuracy": float(np.mean(per_target))}

    def ensemble_shape(self) -> dict[str, Any]:
        """What runs of this task must share to train in one ensemble (with the model and recipe)."""
        shape = {"n_ctx": self.n_ctx, "n_slots": self.n_slots, "d_vocab": self.d_vocab, "d_out": self.d_out,
                 "vocab": self.vocab, "n_targets": self.n_targets}
        if self.train_readout_positions != self.readout_positions:  # absent otherwise: older keys unchanged
            shape["train_readout_positions"] = self.train_readout_positions
        return shape
