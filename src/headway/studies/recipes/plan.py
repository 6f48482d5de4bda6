"""What a recipe sweep trains: variants × seeds over one named base cell.

A base cell is a task and its recipe at CPU scale (`BASES`); a variant is a spec (`headway.studies.variants`):
names of `VARIANTS` and `key=value` run settings joined by `+` (`ce+bidir`, `ce+steps=12000`, `base+lr=0.003`).
A run's settings are the base's, then the command's run settings (`--steps`), then its variant's, in order.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.errors import ConfigError
from headway.limits import MAX_ANALYSIS_EXAMPLES
from headway.runs.config import RunConfig
from headway.settings import check_choice, check_int
from headway.studies.base import Plan, axis
from headway.studies.variants import variant_grids, variant_settings
from headway.tasks.registry import scale_settings

SCALES = ("cpu",)


def _conditional_cell() -> dict[str, Any]:
    """The conditional cell of `headway study retrieval --scale cpu` (D = 1, K = 2, 3 layers, 3000 steps), logged
    every 100 steps, its regular checkpoints kept."""
    return {**scale_settings("cpu", "retrieval"), "conditional": True, "chains": 2, "hops": 1, "layers": 3,
            "steps": 3000, "curriculum": "ic", "relations": 2, "classes": 2, "checkpoint_every": 1000,
            "log_checkpoints": 0}


def _sorting_cell() -> dict[str, Any]:
    """The sorting study's `cpu` recipe."""
    from headway.studies.sorting.plan import study_plan

    return dict(study_plan("cpu").settings)


# Named base cells: their settings (built when asked for) and what each is.
BASES = {
    "retrieval-conditional": (_conditional_cell, "the retrieval study's conditional cell at cpu scale: D = 1, K = 2, "
                                                 "R = C = 2, 3 layers, MSE, lr 1e-3, 3000 steps"),
    "sorting": (_sorting_cell, "the sorting study's cpu recipe: lists of 10 numbers from 0 … 50, 1 layer, 2 heads"),
}
# Named variants: the settings each changes from its base, and why it is worth training.
VARIANTS: dict[str, dict[str, Any]] = {
    "base": {},
    "plain": {"conditional": False},
    "ce": {"loss": "cross_entropy"},
    "lr3e-3": {"lr": 3e-3},
    "bidir": {"attention": "bidirectional"},
    "layers4": {"layers": 4},
    "d128": {"d_model": 128},
    "heads8": {"heads": 8},
    "chains1": {"chains": 1},
    "classes1": {"classes": 1},
    "r4c1": {"relations": 4, "classes": 1},
    "r4c2": {"relations": 4, "classes": 2},
    "long": {"steps": 12000},
}
WHY = {
    "base": "the base cell as it is",
    "plain": "control: the plain task with the same model; it must be learned",
    "ce": "cross-entropy instead of MSE (a larger gradient on a wide readout)",
    "lr3e-3": "3x the learning rate",
    "bidir": "every position reads every other (link positions see every class and rule statement)",
    "layers4": "one layer more than the three dependent lookups of the conditional cell need",
    "d128": "twice the width",
    "heads8": "twice the heads (d_head 8)",
    "chains1": "one chain: fewer distractor statements",
    "classes1": "one class: the rule is one relation for every entity (no class lookup)",
    "r4c1": "one class, 4 relations: the true link is the relation the rule names",
    "r4c2": "2 classes, 4 relations: two relations only on decoys",
    "long": "4x the conditional cell's steps",
}


def parse_variant(option: str, text: str) -> str:
    """One variant from the command line, checked now: a spec over `VARIANTS`."""
    variant_settings(text, VARIANTS)
    return text.strip()


def parse_base(option: str, text: str) -> str:
    """A base cell's name from the command line."""
    return check_choice(f"--{option}", text.strip(), tuple(BASES))


@dataclass(frozen=True)
class RecipePlan(Plan):
    """The base cell, the variants and seeds trained over it, and the probes of a conditional cell."""

    base: str = field(default="retrieval-conditional", metadata=axis(
        f"Base cell: {', '.join(BASES)}.", parse=parse_base))
    variants: tuple[str, ...] = field(default=("base",), metadata=axis(
        "Variants: comma list of specs, names and key=value run settings joined by '+' (e.g. ce+bidir, "
        f"base+lr=0.003); names: {', '.join(VARIANTS)}.", "variant", parse=parse_variant))
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata=axis("Seeds per variant (e.g. 0..2).", "seed"))
    settings: dict[str, Any] = field(default_factory=dict)  # run settings over the base (the command's --steps)
    probe_examples: int = field(default=3000, metadata=axis(
        "Fresh examples the conditional probes of each run are fitted and scored on (0: no probes; a conditional "
        f"D = 1 cell only; at most {MAX_ANALYSIS_EXAMPLES:,})."))

    def __post_init__(self) -> None:
        check_choice("base", self.base, tuple(BASES))
        if not (self.variants and self.seeds):
            raise ConfigError("the sweep needs at least one variant and one seed")
        for seed in self.seeds:
            check_int("seed", seed, 0)
        check_int("probe_examples", self.probe_examples, 0, MAX_ANALYSIS_EXAMPLES)
        self.grids()  # every setting checked, and no two variants alike, before anything trains

    def grids(self) -> dict[str, list[RunConfig]]:
        """One grid per variant, its runs in seed order."""
        return variant_grids({**BASES[self.base][0](), **self.settings}, self.variants, VARIANTS, self.seeds,
                             "variant")

    def with_settings(self, **settings: Any) -> RecipePlan:
        """A copy with run settings over the base changed (None leaves one as it is)."""
        return replace(self, settings={**self.settings, **{k: v for k, v in settings.items() if v is not None}})


def study_plan(scale: str) -> RecipePlan:
    """The sweep at a named scale: `cpu`, the conditional cell's base, its control and the first three changes."""
    if scale != "cpu":
        raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(SCALES)}")
    return RecipePlan("cpu", variants=("base", "plain", "ce", "lr3e-3", "bidir"))
