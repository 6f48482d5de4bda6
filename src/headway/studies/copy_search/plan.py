"""What the copy-suppression search trains: conditions × seeds over the sorting study's `cpu` recipe.

A condition is a variant spec (`headway.studies.variants`): names of `CONDITIONS` and `key=value` run settings
joined by `+` (`repeats-dense+weight_decay=0`, `distinct+values=200`). Its settings apply over the recipe and
over the command's run settings (`--steps` sets the recipe's steps; a condition that names its steps keeps them).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.settings import check_int
from headway.studies.base import Plan, axis
from headway.studies.variants import variant_grids, variant_settings

SCALES = ("cpu",)
# The named conditions, fixed before training (docs/study-sorting.md gives the reasons). The recipe's lists are
# 10 distinct numbers from 0 … 50, its weight decay 0.005 (coupled L2, Adam) and its model has 2 heads.
CONDITIONS: dict[str, dict[str, Any]] = {
    "distinct": {},  # the default lists (distinct, uniform; δ̄ ≈ 4.7): the reference
    "repeats": {"repeats": True},  # uniform draws that may repeat (about 1 list in 2 has a repeat)
    "repeats-dense": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0},  # half of all gaps are 0
    "repeats-dense-nowd": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "weight_decay": 0.0},
    "repeats-dense-4h": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "heads": 4},
    "distinct-4h": {"heads": 4},
    "repeats-long": {"repeats": True, "length": 20},  # 20 draws from 51 numbers: many repeats and near neighbours
    "repeats-dense-3x": {"repeats": True, "gaps": "geometric", "mean_gap": 1.0, "steps": 3600},
}
# What results/sorting-copy-search-cpu ran on a shared 2-core CPU; the others need more compute.
DEFAULT_CONDITIONS = ("distinct", "repeats", "repeats-dense", "repeats-dense-nowd")


def parse_condition(option: str, text: str) -> str:
    """One condition from the command line, checked now: a variant spec over `CONDITIONS`."""
    variant_settings(text, CONDITIONS)
    return text.strip()


@dataclass(frozen=True)
class SearchPlan(Plan):
    """The conditions and seeds searched over the base recipe, and what each final model is classified on."""

    conditions: tuple[str, ...] = field(metadata=axis(
        "Conditions: comma list of variant specs, names of the search's conditions and key=value run settings "
        f"joined by '+' (e.g. repeats-dense+weight_decay=0); names: {', '.join(CONDITIONS)}.", "condition",
        parse=parse_condition))
    seeds: tuple[int, ...] = field(metadata=axis("Seeds per condition (e.g. 0..7).", "seed"))
    settings: dict[str, Any] = field(default_factory=dict)  # the base recipe's flat run settings
    examples: int = field(default=2000, metadata=axis("Lists each model's readout scale is measured on."))
    classify_step: int | None = field(default=None, metadata=axis(
        "Classify each model at this saved step, with its accuracies logged there (a search stopped early; "
        "'none': the last).", words={"none": None}))
    compare_gaps: bool = field(default=False, metadata=axis(
        "Also judge the sorting study's gap claim (the data decide the mode) over the conditions, which must then "
        "differ in their data only (task settings, data_seed)."))

    def __post_init__(self) -> None:
        if not (self.conditions and self.seeds):
            raise ConfigError("the search needs at least one condition and one seed")
        for seed in self.seeds:
            check_int("seed", seed, 0)
        check_int("examples", self.examples, 1)
        if self.classify_step is not None:
            check_int("classify_step", self.classify_step, 1)
        grids = self.grids()  # every setting checked, and no two conditions alike, before anything trains
        if self.compare_gaps:
            check_data_only(grids)

    def grids(self) -> dict[str, list[RunConfig]]:
        """One grid per condition, its runs in seed order."""
        return variant_grids(self.settings, self.conditions, CONDITIONS, self.seeds, "condition")

    def with_settings(self, **settings: Any) -> SearchPlan:
        """A copy with flat run settings of the base recipe changed (None leaves one as it is)."""
        return replace(self, settings={**self.settings, **{k: v for k, v in settings.items() if v is not None}})


def check_data_only(grids: dict[str, list[RunConfig]]) -> None:
    """Refuse conditions that differ in more than their data (task settings and data_seed): the gap claim compares
    data, and another difference would be confounded with it."""
    def recipe(run: RunConfig) -> dict[str, Any]:
        task = set(run.task.to_dict())
        return {k: v for k, v in run.flat().items() if k not in task and k not in ("data_seed", "task")}

    (first, runs), *others = grids.items()
    if not others:
        raise ConfigError("compare_gaps needs at least two conditions to compare")
    for name, other in others:
        for a, b in zip(runs, other, strict=True):
            mine, theirs = recipe(a), recipe(b)
            differ = sorted(k for k in mine if mine[k] != theirs.get(k))
            if differ:
                raise ConfigError(f"compare_gaps compares data only, but conditions {first!r} and {name!r} also "
                                  f"differ in {', '.join(differ)}")


def study_plan(scale: str) -> SearchPlan:
    """The search at a named scale: `cpu`, the sorting study's `cpu` recipe, its four default conditions, 8 seeds."""
    if scale != "cpu":
        raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(SCALES)}")
    from headway.studies.sorting.plan import study_plan as sorting_plan

    return SearchPlan("cpu", conditions=DEFAULT_CONDITIONS, seeds=tuple(range(8)),
                      settings=dict(sorting_plan("cpu").settings))
