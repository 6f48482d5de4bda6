"""What the modular-addition study trains and measures at each scale: train fraction × weight decay ×
seeds, one ensemble per train fraction, and the SGLD settings of its LLC trace."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.analysis.llc import SGLDSettings
from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.settings import check_int, check_number
from headway.studies.base import Plan, axis
from headway.studies.llc_chains import apply_llc_chains, llc_burnin_field, llc_draws_field, traced_line
from headway.studies.fresh_data import data_line, fresh_data_field, on_fresh_data
from headway.tasks.registry import scale_settings

STUDY_SCALES = ("cpu", "gpu")


@dataclass(frozen=True)
class ModularPlan(Plan):
    """The grid (train fractions × weight decays × seeds), the recipe and the analysis settings."""

    train_fractions: tuple[float, ...] = field(metadata=axis("Shares of the p² pairs trained on, comma list.",
                                                             "train_fraction"))
    weight_decays: tuple[float, ...] = field(metadata=axis("Weight decay values, comma list (e.g. 1,0).",
                                                           "weight_decay"))
    seeds: tuple[int, ...] = field(metadata=axis("Seeds per cell (e.g. 0..3).", "seed"))
    settings: dict[str, Any] = field(default_factory=dict)  # flat run settings over the task's recipe
    sgld: SGLDSettings = field(default_factory=SGLDSettings)
    development_seeds: tuple[int, ...] = field(default=(0,), metadata=axis(
        "Seeds whose LLC is traced over training (every train fraction and weight decay).", "development_seed"))
    llc_checkpoints: int | None = field(default=None, metadata=axis(
        "Checkpoints of the LLC trace, log-spaced ('none': every saved one).", words={"none": None}))
    llc_first_step: int = field(default=0, metadata=axis(
        "First training step the LLC trace visits: earlier checkpoints are not traced (before w* is a minimum λ̂ is "
        "no LLC; docs/decisions.md)."))
    llc_budget: int | None = field(default=None, metadata=axis(
        "SGLD steps a chain within which the LLC's settings are chosen for each ensemble ('fixed': the scale's "
        "settings as given; docs/decisions.md).", words={"fixed": None}))
    llc_burnin: int | None = llc_burnin_field()
    llc_draws: int | None = llc_draws_field()
    fresh_data: bool = fresh_data_field()

    def __post_init__(self) -> None:
        if not (self.train_fractions and self.weight_decays and self.seeds):
            raise ConfigError("the modular grid needs at least one train fraction, weight decay and seed")
        for value in self.weight_decays:
            check_number("weight decay", value, 0.0)
        for seed in (*self.seeds, *self.development_seeds):
            check_int("seed", seed, 0)
        if self.llc_checkpoints is not None:
            check_int("llc_checkpoints", self.llc_checkpoints, 2)
        if self.llc_budget is not None:
            check_int("llc_budget", self.llc_budget, 2)
        # every task and recipe setting is checked before anything trains; the last checkpoint is at the last step
        check_int("llc_first_step", self.llc_first_step, 0, max(run.train.steps for run in self.runs()))
        apply_llc_chains(self)

    def grids(self) -> dict[str, list[RunConfig]]:
        """One grid, in (train fraction, weight decay, seed) order; every run trains full-batch (its batch
        is its whole training set), as the recipe does; with `fresh_data` each seed splits the pairs its own way."""
        runs = []
        for fraction in self.train_fractions:
            full = RunConfig.from_flat({**self.settings, "train_fraction": fraction}).task.train_examples
            runs += [RunConfig.from_flat({**self.settings, "train_fraction": fraction, "batch_size": full,
                                          "weight_decay": wd, "seed": seed})
                     for wd in self.weight_decays for seed in self.seeds]
        return {"runs": on_fresh_data(runs, self.fresh_data)}

    def development_runs(self) -> list[RunConfig]:
        """Runs whose LLC is traced over training."""
        return [run for run in self.runs() if run.seed in self.development_seeds]

    def with_settings(self, **settings: Any) -> ModularPlan:
        """A copy with flat run settings (e.g. steps) over the recipe (None leaves one as it is)."""
        return replace(self, settings={**self.settings, **{k: v for k, v in settings.items() if v is not None}})

    def describe(self) -> list[str]:
        return [data_line(self.fresh_data), traced_line(self)]


def study_plan(scale: str) -> ModularPlan:
    """The study at a named scale: `cpu` (minutes on 2 cores) or `gpu` (the paper's recipe)."""
    if scale == "cpu":
        # nβ = n, the 1218 training pairs (β = 1): at devinterp's B / ln B = 46 the posterior's loss rise λ/nβ reached
        # a uniform guess's (the chains left the basin at 7 of 12 checkpoints); ε and γ chosen on seed 0's trace by the
        # rule in docs/study-modular.md ("The LLC's settings"), before the traced seeds 1-3 were trained
        sgld = SGLDSettings(lr=3e-6, nbeta=1218.0, localization=100.0, chains=4, draws=600, burnin=600,
                            batch_size=256, init_loss_batches=None)
        # 12 seeds per weight decay: the fewest at which a count claim can be reproduced (11 of 12, p = 0.003) and
        # refuted with power ≥ 0.8 at 95% under Holm over five claims (3 seeds could do neither)
        return ModularPlan("cpu", train_fractions=(0.35,), weight_decays=(1.0, 0.0), seeds=tuple(range(12)),
                           settings=scale_settings("cpu", "modular"), sgld=sgld, development_seeds=(1, 2, 3),
                           llc_checkpoints=12)
    if scale == "gpu":
        sgld = SGLDSettings(lr=1e-4, nbeta=None, localization=100.0, chains=8, draws=200, burnin=100, batch_size=512,
                            init_loss_batches=None)
        return ModularPlan("gpu", train_fractions=(0.3, 0.5), weight_decays=(1.0, 0.0), seeds=tuple(range(8)),
                           settings=scale_settings("paper", "modular"), sgld=sgld, development_seeds=(0, 1),
                           llc_checkpoints=24)
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
