"""A run: one task, one model shape, one training recipe and one seed.

A run is stored and shown as one flat dictionary (`RunConfig.flat()`): the field names of the
task, model and training configs do not collide (the task registry refuses a task whose names
would), so a flat view is unambiguous and is what grids, the CLI, `headway show` and the
metrics DataFrame use.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any

from headway.errors import ConfigError
from headway.execution.sizes import balanced_sizes
from headway.limits import MAX_RUNS, MAX_SEED
from headway.model.config import ModelConfig
from headway.recipe import TrainConfig
from headway.settings import check_int, field_types
from headway.tasks.base import Task
from headway.tasks.registry import DEFAULT_TASK, setting_types, task_class, task_name_of

if TYPE_CHECKING:
    from headway.runs.examples import Examples

# Hyper-parameters that members of one ensemble may hold different values of.
PER_INSTANCE = ("lr", "weight_decay")


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a run's numbers."""

    task: Task = field(default_factory=lambda: task_class(DEFAULT_TASK)())
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0  # model initialisation and batch order
    data_seed: int = 0  # training pool and validation set (shared by runs that differ only in seed)

    def __post_init__(self) -> None:
        object.__setattr__(self, "seed", check_int("seed", self.seed, 0, MAX_SEED))
        object.__setattr__(self, "data_seed", check_int("data_seed", self.data_seed, 0, MAX_SEED))
        self.task.check_model(self.model)
        default = TrainConfig()
        for name in self.task.ignored_training:
            if getattr(self.train, name) != getattr(default, name):
                raise ConfigError(f"{name} = {getattr(self.train, name)!r} does not apply to task {self.task_name} "
                                  f"({self.task.ignored_why}); leave it out")

    @property
    def task_name(self) -> str:
        """The registered name of the run's task."""
        return task_name_of(self.task)

    def flat(self) -> dict[str, Any]:
        """One flat dictionary of every setting (JSON-serialisable)."""
        return {"task": self.task_name, **self.task.to_dict(), **self.model.to_dict(),
                **self.train.to_dict(), "seed": self.seed, "data_seed": self.data_seed}

    def stored(self) -> dict[str, Any]:
        """`flat()` without settings added later that hold their older-behaviour value (`Settings.LATER`):
        what a run directory stores and the run id hashes."""
        return {"task": self.task_name, **self.task.stored_dict(), **self.model.stored_dict(),
                **self.train.stored_dict(), "seed": self.seed, "data_seed": self.data_seed}

    @classmethod
    def from_flat(cls, data: dict[str, Any]) -> RunConfig:
        """Inverse of `flat()`; unknown keys are refused so typos do not pass silently."""
        task_cls = task_class(data.get("task", DEFAULT_TASK))
        parts = {part: {f.name for f in fields(part_cls)}
                 for part, part_cls in (("task", task_cls), ("model", ModelConfig), ("train", TrainConfig))}
        known = set().union(*parts.values()) | {"task", "seed", "data_seed"}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; allowed: {', '.join(sorted(known))}")
        pick = {part: {k: v for k, v in data.items() if k in names} for part, names in parts.items()}
        return cls(task=task_cls(**pick["task"]), model=ModelConfig(**pick["model"]),
                   train=TrainConfig(**pick["train"]), seed=data.get("seed", 0),
                   data_seed=data.get("data_seed", 0))

    @property
    def run_id(self) -> str:
        """A short stable hash of the configuration (`stored()`)."""
        return _digest(self.stored())[:12]

    def validation_data(self, device: Any = "cpu") -> Examples:
        """The validation set this run's trainer used, as int64 tensors (`headway.runs.examples.Examples`)."""
        from headway.runs.examples import split_examples

        return split_examples(self, device)[1]

    def training_data(self, device: Any = "cpu") -> Examples:
        """The training pool this run's trainer drew its batches from, as int64 tensors."""
        from headway.runs.examples import split_examples

        return split_examples(self, device)[0]

    def training_loss(self) -> Callable[..., Any]:
        """The per-instance loss this run trains on, `fn(model, tokens, targets) -> [E]`
        (`headway.tasks.objective.run_loss` of its task and loss kind)."""
        from headway.tasks.objective import run_loss

        return run_loss(self.task, self.train.loss)

    def tokens(self, count: int, seed: int = 0, validation: bool = True) -> Any:
        """`count` fresh examples of this run's task as int64 tokens [count, pos(, slots)] (a torch tensor)."""
        from headway.runs.examples import drawn_tokens

        return drawn_tokens(self, count, seed, validation)

    def ensemble_key(self) -> dict[str, Any]:
        """What runs must share to be trained as members of one ensemble: the model shape, the
        task's tensor shapes and the training recipe (except the per-instance hyper-parameters)."""
        return {
            "task": self.task_name,
            "io": self.task.ensemble_shape(),
            "model": self.model.stored_dict(),
            "train": {k: v for k, v in self.train.stored_dict().items() if k not in PER_INSTANCE},
        }


def _digest(data: dict[str, Any]) -> str:
    return hashlib.sha1(json.dumps(data, sort_keys=True).encode()).hexdigest()


def group_runs(runs: list[RunConfig],
               limit: Callable[[list[RunConfig]], int | None] | None = None) -> dict[str, list[RunConfig]]:
    """Pack runs into ensembles by shape. Members are ordered by (seed, data_seed, lr, weight_decay)
    and the directory name hashes the shape and the member runs, so the same set of runs always
    gives the same ensemble, whatever order the grid listed them in. `limit(members)` may cap the
    size of a shape's ensemble (None: no cap): a larger group is cut, in that order, into the fewest
    ensembles of balanced sizes, each named the same way from its own members."""
    ids = [run.run_id for run in runs]
    if len(set(ids)) != len(ids):
        raise ConfigError("the grid repeats a run; every run must differ in some setting (e.g. seed)")
    by_shape: dict[str, list[RunConfig]] = {}
    for run in runs:
        by_shape.setdefault(_digest(run.ensemble_key()), []).append(run)
    groups = {}
    for members in by_shape.values():
        members.sort(key=lambda r: (r.seed, r.data_seed, r.train.lr, r.train.weight_decay, r.run_id))
        for part in _cut(members, limit(members) if limit else None):
            groups[ensemble_name(part)] = part
    return groups


def ensemble_name(members: list[RunConfig]) -> str:
    """The directory name of an ensemble of `members` (in their order): layers, context and a hash."""
    first = members[0]
    digest = _digest({"shape": first.ensemble_key(), "runs": [m.run_id for m in members]})
    return f"L{first.model.layers}-S{first.task.n_ctx}-{digest[:8]}"


def _cut(members: list[RunConfig], most: int | None) -> list[list[RunConfig]]:
    """`members` in consecutive parts of at most `most` (balanced sizes, larger first); whole when it fits."""
    if most is None or len(members) <= most:
        return [members]
    sizes = balanced_sizes(len(members), most)
    return [members[sum(sizes[:i]) : sum(sizes[: i + 1])] for i in range(len(sizes))]


def expand_grid(base: dict[str, Any], axes: dict[str, list[Any]]) -> list[RunConfig]:
    """Every combination of the axis values on top of `base` (flat settings), in row-major order."""
    size = math.prod(len(values) for values in axes.values())
    if size > MAX_RUNS:
        raise ConfigError(f"the grid holds {size} runs ({' × '.join(str(len(v)) for v in axes.values())}); "
                          f"one command trains at most {MAX_RUNS}, so split it into several")
    combos: list[dict[str, Any]] = [dict(base)]
    for key, values in axes.items():
        if not values:
            raise ConfigError(f"grid axis {key} has no values")
        seen: set[Any] = set()
        for value in values:
            if value in seen:
                raise ConfigError(f"{key} lists {value!r} twice; every run must differ in some setting")
            seen.add(value)
        combos = [{**c, key: v} for c in combos for v in values]
    return [RunConfig.from_flat(c) for c in combos]


def flat_setting_types() -> dict[str, type]:
    """Every flat run setting's name -> value type: each registered task's, the model's, the recipe's, the seeds."""
    return {**setting_types(), **field_types(ModelConfig), **field_types(TrainConfig), "seed": int, "data_seed": int}
