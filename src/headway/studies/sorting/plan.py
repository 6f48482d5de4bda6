"""What the sorting study trains and measures at each scale: weight decay × data (δ̄) × seeds,
packed into one ensemble, and the SGLD settings of its LLC estimates."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from headway.analysis.llc import SGLDSettings
from headway.errors import ConfigError
from headway.presets import scale_settings
from headway.runs.config import RunConfig
from headway.settings import check_int, check_number

STUDY_SCALES = ("cpu", "gpu")
UNIFORM = "uniform"  # the default data: distinct numbers drawn uniformly from 0 … 50


@dataclass(frozen=True)
class SortingPlan:
    """The grid (weight decays × data × seeds), the training recipe and the analysis settings."""

    scale: str
    data: tuple[str | float, ...]  # "uniform" or a mean gap δ̄ of geometric gaps
    weight_decays: tuple[float, ...]
    seeds: tuple[int, ...]
    settings: dict[str, Any] = field(default_factory=dict)  # flat run settings over the recipe
    sgld: SGLDSettings = field(default_factory=SGLDSettings)
    development_seeds: tuple[int, ...] = (0,)  # seeds whose LLC (whole and per head) is traced over checkpoints
    llc_checkpoints: int | None = None  # None: every saved checkpoint; else that many, log-spaced
    examples: int = 2000  # lists each model is analysed on

    def __post_init__(self) -> None:
        if not (self.data and self.weight_decays and self.seeds):
            raise ConfigError("the sorting grid needs at least one data value, weight decay and seed")
        for value in self.data:
            if value != UNIFORM:
                check_number("mean gap", value, 0.0)
        for value in self.weight_decays:
            check_number("weight decay", value, 0.0)
        for seed in self.seeds:
            check_int("seed", seed, 0)
        if self.llc_checkpoints is not None:
            check_int("llc_checkpoints", self.llc_checkpoints, 2)
        self.runs()  # every task and recipe setting is checked before anything trains

    def runs(self) -> list[RunConfig]:
        """Every run of the grid, in (data, weight decay, seed) order."""
        return [RunConfig.from_flat({**self.settings, **data_settings(data), "weight_decay": wd, "seed": seed})
                for data in self.data for wd in self.weight_decays for seed in self.seeds]

    def development_runs(self) -> list[RunConfig]:
        """Runs whose LLC is traced over training: the first data value, every weight decay."""
        return [run for run in self.runs()
                if data_label(run) == data_label_of(self.data[0]) and run.seed in self.development_seeds]

    def with_overrides(self, **changes: Any) -> SortingPlan:
        """A copy with some fields replaced (e.g. seeds from the command line)."""
        return dataclasses.replace(self, **changes)


def data_settings(data: str | float) -> dict[str, Any]:
    """Task settings of one data value: the default lists, or geometric gaps of mean δ̄."""
    if data == UNIFORM:
        return {"gaps": "uniform"}
    return {"gaps": "geometric", "mean_gap": float(data)}


def data_label_of(data: str | float) -> str:
    return UNIFORM if data == UNIFORM else f"gap {float(data):g}"


def data_label(run: RunConfig) -> str:
    """How a run's data is named in tables and figures."""
    return UNIFORM if run.task.gaps == "uniform" else data_label_of(run.task.mean_gap)


def study_plan(scale: str) -> SortingPlan:
    """The study at a named scale: `cpu` (under 30 minutes on 2 cores) or `gpu` (the recipe's size)."""
    if scale == "cpu":
        settings = {**scale_settings("cpu", "sorting"), "steps": 1200, "batch_size": 128, "eval_every": 50,
                    "checkpoint_every": 400, "log_checkpoints": 16}
        sgld = SGLDSettings(lr=3e-6, nbeta=1e4, localization=1e4, chains=4, draws=60, burnin=60, batch_size=32,
                            init_loss_batches=16)
        return SortingPlan("cpu", data=(UNIFORM, 1.5, 3.0), weight_decays=(0.005, 0.0), seeds=(0, 1, 2),
                           settings=settings, sgld=sgld)
    if scale == "gpu":
        settings = scale_settings("paper", "sorting")
        sgld = SGLDSettings(lr=3e-6, nbeta=1e4, localization=1e4, chains=8, draws=200, burnin=200, batch_size=512,
                            init_loss_batches=32)
        return SortingPlan("gpu", data=(UNIFORM, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5), weight_decays=(0.005, 0.0),
                           seeds=tuple(range(16)), settings=settings, sgld=sgld, development_seeds=(0, 1, 2),
                           examples=10_000)
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
