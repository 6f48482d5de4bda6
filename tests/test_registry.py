"""The plugin registries: tasks and studies register by name, and every refusal names what is wrong."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.plugins import Registry
from headway.runs.config import RunConfig
from headway.studies.registry import STUDIES, register_study, study_class, study_names
from headway.tasks.base import ArrayBatch, Batch, Task
from headway.tasks.pools import PROBE
from headway.tasks.registry import TASKS, _check_task, register_task, scale_settings, setting_types, task_class


class ParityMembers:
    """What a toy task needs besides its fields: is the sum of `width` bits odd?"""

    name: ClassVar[str] = "parity"
    summary: ClassVar[str] = "parity of a few bits"
    scales: ClassVar[dict[str, dict[str, Any]]] = {"cpu": {"steps": 10}}

    n_ctx = property(lambda self: self.width)
    n_slots = property(lambda self: 1)
    d_vocab = property(lambda self: 2)
    vocab = property(lambda self: 2)
    n_targets = property(lambda self: 1)
    readout_positions = property(lambda self: 1)

    def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> ArrayBatch:
        tokens = rng.integers(0, 2, size=(n, self.width))
        return ArrayBatch(tokens=tokens, targets=tokens.sum(axis=1, keepdims=True) % 2)

    def records(self, batch: Batch) -> list[dict[str, Any]]:
        return [{"bits": row} for row in batch.tokens.tolist()]


@dataclass(frozen=True)
class Parity(ParityMembers, Task):
    """A complete toy task (used through a private registry)."""

    width: int = 12


def private_registry() -> Registry:
    """A task registry with the built-in tasks' checks, separate from the one headway uses."""
    registry = Registry("task", Task, "headway.tasks", "headway.tasks", required=("summary", "scales"),
                        check=_check_task)
    registry._discovered = True  # this registry starts empty on purpose
    return registry


def test_builtin_tasks_and_studies_are_discovered():
    assert {"retrieval", "sorting", "modular"} <= set(TASKS.names())
    assert {"retrieval", "sorting", "modular"} <= set(study_names())
    assert task_class("sorting").name == "sorting"
    assert scale_settings("cpu", "modular")["task"] == "modular"


def test_a_complete_task_registers_and_builds_runs():
    registry = private_registry()
    registry.register(Parity)
    assert registry.names() == ["parity"] and registry.get("parity") is Parity
    batch = Parity().split(64, 16, seed=3)[1]
    assert isinstance(batch, Batch) and len(batch) == 16
    assert Parity().d_out == 2 and Parity().accuracy_columns([0.5], 0.5) == {"val_accuracy": 0.5}


def test_a_small_task_at_the_default_pool_size_is_refused_in_a_second_naming_its_setting():
    """Parity of 4 bits has 16 examples: the default 2^20-example pool would hold all of them, and a slow draw
    would take minutes to find that out; a probe of PROBE examples refuses first, naming the task's setting."""
    asked: list[int] = []

    @dataclass(frozen=True)
    class Slow(Parity):
        size_settings: ClassVar[tuple[str, ...]] = ("width",)

        def draw(self, n: int, rng: np.random.Generator, validation: bool = False) -> ArrayBatch:
            asked.append(n)
            return super().draw(n, rng, validation)

    defaults = RunConfig().train
    with pytest.raises(ConfigError, match=r"4096 examples drawn held only 16 distinct ones.*task parity has too few "
                                          r"distinct examples for this pool: use a larger width, or a train_size"):
        Slow(width=4).split(defaults.train_size, defaults.val_size, 0)
    assert asked == [PROBE]  # the pool was never drawn
    with pytest.raises(ConfigError, match=r"settings of parity that give it more examples \(width\)"):
        Parity(width=4).split(defaults.train_size, defaults.val_size, 0)
    train, val = Slow(width=16).split(4096, 256, 0)  # 65536 examples: a pool of 4096 leaves plenty
    assert len(val) == 256


def test_unknown_names_list_the_known_ones():
    known = ", ".join(TASKS.names())  # the built-in tasks and any another package registers
    with pytest.raises(ConfigError, match=rf"task = 'nope' is unknown; choose one of {known}$"):
        task_class("nope")
    with pytest.raises(ConfigError, match=r"study = 'nope' is unknown; choose one of .*retrieval"):
        study_class("nope")
    with pytest.raises(ConfigError, match=r"scale = 'huge' is unknown for task sorting; choose one of paper, cpu"):
        scale_settings("huge", "sorting")
    with pytest.raises(ConfigError, match="task = 'nope'"):
        RunConfig.from_flat({"task": "nope"})


def test_a_second_task_of_the_same_name_is_refused():
    clone = dataclasses.make_dataclass("OtherRetrieval", [], bases=(Parity,), frozen=True,
                                       namespace={"name": "retrieval"})
    with pytest.raises(ConfigError, match="task name 'retrieval' is already registered by headway.tasks.retrieval"):
        register_task(clone)
    assert task_class("retrieval") is not clone


@pytest.mark.parametrize("field, kind, message", [
    ("layers", int, "layers is a model setting"),
    ("steps", int, "steps is a training setting"),
    ("seed", int, "seed is a key of the run itself"),
    ("hops", str, "hops is str here but int in task 'retrieval'"),
])
def test_setting_names_that_clash_in_the_flat_namespace_are_refused(field, kind, message):
    clashing = dataclasses.make_dataclass("Clash", [(field, kind, dataclasses.field(default=kind()))], bases=(Parity,),
                                          frozen=True, namespace={"name": "clash"})
    with pytest.raises(ConfigError, match=message):
        register_task(clashing)
    assert "clash" not in TASKS.names()


def test_a_shared_setting_of_the_same_type_is_allowed():
    shared = dataclasses.make_dataclass("Shared", [("hops", int, dataclasses.field(default=1))], bases=(Parity,),
                                        frozen=True, namespace={"name": "shared"})
    registry = private_registry()
    registry.register(task_class("retrieval"))
    registry.register(shared)
    assert registry.names() == ["retrieval", "shared"]


def test_incomplete_or_mutable_task_classes_are_refused():
    class NoDraw(Task):
        name, summary, scales = "nodraw", "x", {"cpu": {}}

    with pytest.raises(ConfigError, match="incomplete: implement .*draw"):
        register_task(NoDraw)
    mutable = dataclasses.make_dataclass("Mutable", [("width", int, dataclasses.field(default=12))],
                                         bases=(ParityMembers, Task), namespace={"name": "mutable"})
    with pytest.raises(ConfigError, match="frozen"):
        register_task(mutable)
    with pytest.raises(ConfigError, match="subclass headway.tasks.base.Task"):
        register_task(int)
    bad_loss = dataclasses.make_dataclass("BadLoss", [], bases=(Parity,), frozen=True,
                                          namespace={"name": "badloss", "default_loss": "hinge"})
    with pytest.raises(ConfigError, match="default_loss = 'hinge'"):
        register_task(bad_loss)


def test_every_setting_has_one_type_across_tasks():
    types = setting_types()
    assert types["hops"] is int and types["mean_gap"] is float and types["train_fraction"] is float
    assert types["conditional"] is bool


def test_a_study_of_an_existing_name_is_refused():
    existing = study_class("sorting")
    clone = type("Clone", (existing,), {"name": "retrieval", "__module__": "elsewhere"})
    with pytest.raises(ConfigError, match="study name 'retrieval' is already registered"):
        register_study(clone)
    assert STUDIES.get("retrieval").__name__ == "RetrievalStudy"


def test_packages_import_each_other_without_cycles():
    """The top-level packages form a layered graph (no package reaches itself through imports)."""
    root = pathlib.Path(__file__).parents[1] / "src" / "headway"
    edges: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        package = path.relative_to(root).parts[0].removesuffix(".py")
        for node in ast.walk(ast.parse(path.read_text())):
            names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else (
                [a.name for a in node.names] if isinstance(node, ast.Import) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "headway" and len(parts) > 1 and parts[1] != package:
                    edges.setdefault(package, set()).add(parts[1])

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges.get(start, ()))

    assert {"runs", "train", "tasks", "studies", "plots", "analysis"} <= set(edges)
    assert [(a, b) for a in sorted(edges) for b in sorted(edges[a]) if reaches(b, a)] == []
