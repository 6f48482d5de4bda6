"""The task registry: every task headway knows, by name, with its named scales.

Tasks register with the `register_task` class decorator when their module is imported. The
built-in tasks are the sub-packages of `headway.tasks` (a new task is a folder); other packages
register theirs through the `headway.tasks` entry-point group. Registration refuses a second task
of the same name, an incomplete Task class, and any setting name that would be ambiguous in the
flat run namespace (`RunConfig.flat()`): a model or training setting, a run key, or a setting that
another task declares with a different type.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from headway.errors import ConfigError
from headway.model.config import ModelConfig
from headway.plugins import Registry
from headway.recipe import LOSSES, TrainConfig
from headway.settings import field_types
from headway.tasks.base import Task

DEFAULT_TASK = "retrieval"
RUN_KEYS = ("task", "seed", "data_seed")  # the run's own keys in the flat namespace


def _check_task(cls: type[Task], others: dict[str, type[Task]]) -> None:
    """Refuse a task that is not a frozen dataclass, declares no usable scales or loss, or has
    setting names that would be ambiguous in the flat run namespace."""
    if not dataclasses.is_dataclass(cls) or not cls.__dataclass_params__.frozen:
        raise ConfigError(f"task {cls.name!r} must be a @dataclass(frozen=True)")
    if not cls.scales:
        raise ConfigError(f"task {cls.name!r} declares no scales; give at least one named scale")
    if cls.default_loss not in LOSSES:
        raise ConfigError(f"task {cls.name!r} has default_loss = {cls.default_loss!r}; choose one of {', '.join(LOSSES)}")
    owners = {name: "a model setting (ModelConfig)" for name in field_types(ModelConfig)}
    owners.update({name: "a training setting (TrainConfig)" for name in field_types(TrainConfig)})
    owners.update({name: "a key of the run itself" for name in RUN_KEYS})
    mine = field_types(cls)
    clashes = [f"{name} is {owners[name]}" for name in mine if name in owners]
    for other in others.values():
        theirs = field_types(other)
        clashes += [f"{name} is {mine[name].__name__} here but {theirs[name].__name__} in task {other.name!r}"
                    for name in mine if name in theirs and theirs[name] is not mine[name]]
    if clashes:
        raise ConfigError(f"task {cls.name!r} has setting names that clash in the flat run namespace "
                          f"({'; '.join(clashes)}); rename them")


TASKS: Registry[type[Task]] = Registry("task", Task, "headway.tasks", "headway.tasks",
                                       required=("summary", "scales"), check=_check_task)
register_task = TASKS.register
task_class = TASKS.get
task_names = TASKS.names


def task_name_of(config: Task) -> str:
    """The registered name of a task config instance."""
    name = type(config).name
    if task_class(name) is not type(config):
        raise ConfigError(f"{type(config).__qualname__} is not the registered task {name!r}")
    return name


def scale_settings(scale: str | None = None, task: str = DEFAULT_TASK) -> dict[str, Any]:
    """The flat run settings of a named scale of `task` (None: its default, the first declared): the
    task name, the scale's settings, and the task's default loss unless the scale sets one."""
    cls = task_class(task)
    if scale is None:
        scale = next(iter(cls.scales))
    if scale not in cls.scales:
        raise ConfigError(f"scale = {scale!r} is unknown for task {task}; choose one of {', '.join(cls.scales)}")
    settings = {"task": task, **cls.scales[scale]}
    settings.setdefault("loss", cls.default_loss)
    return settings


def setting_types() -> dict[str, type]:
    """Setting name -> value type over every registered task (a name shared by tasks has one type)."""
    out: dict[str, type] = {}
    for cls in TASKS.classes():
        out.update(field_types(cls))
    return out
