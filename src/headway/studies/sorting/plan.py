"""What the sorting study trains and measures at each scale: weight decay × data (δ̄) × seeds,
packed into one ensemble, and the SGLD settings of its LLC estimates."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.analysis.llc import SGLDSettings
from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.settings import check_int, check_number
from headway.studies.base import Plan, axis
from headway.tasks.registry import scale_settings

STUDY_SCALES = ("cpu", "gpu")
UNIFORM = "uniform"  # the default data: distinct numbers drawn uniformly from 0 … 50


def parse_data(option: str, text: str) -> str | float:
    """One data value from the command line: 'uniform' or a mean gap δ̄."""
    if text.strip().lower() == UNIFORM:
        return UNIFORM
    try:
        return float(text)
    except ValueError:
        raise ConfigError(f"--{option} got {text!r}; expected 'uniform' or a mean gap (a number)") from None


@dataclass(frozen=True)
class SortingPlan(Plan):
    """The grid (weight decays × data × seeds), the training recipe and the analysis settings."""

    data: tuple[str | float, ...] = field(metadata=axis(  # "uniform" or a mean gap δ̄ of geometric gaps
        "Training data: 'uniform' (the default lists) and/or mean gaps δ̄ of geometric gaps, comma list.",
        "mean_gap", parse=parse_data, was="mean_gaps"))
    weight_decays: tuple[float, ...] = field(metadata=axis("Weight decay values, comma list (e.g. 0.005,0).",
                                                           "weight_decay"))
    seeds: tuple[int, ...] = field(metadata=axis("Seeds per cell (e.g. 0..7).", "seed"))
    settings: dict[str, Any] = field(default_factory=dict)  # flat run settings over the recipe
    sgld: SGLDSettings = field(default_factory=SGLDSettings)
    development_seeds: tuple[int, ...] = field(default=(0,), metadata=axis(
        "Seeds whose LLC is traced over training (first data value, every weight decay).", "development_seed"))
    llc_checkpoints: int | None = field(default=None, metadata=axis(
        "Checkpoints of the LLC trace, log-spaced ('none': every saved one).", words={"none": None}))
    llc_weights: str = field(default="all,heads", metadata=axis(
        "Weight groups of the LLC trace: all (the whole model), heads (each head alone), embed, unembed."))
    examples: int = field(default=2000, metadata=axis("Lists each model is analysed on."))

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
        if "all" not in (group.strip() for group in self.llc_weights.split(",")):
            raise ConfigError(f"llc_weights = {self.llc_weights!r} must include 'all': the stages and the LLC verdict "
                              "read the whole-model LLC")
        check_int("examples", self.examples, 1)
        self.runs()  # every task and recipe setting is checked before anything trains

    def grids(self) -> dict[str, list[RunConfig]]:
        """One grid, in (data, weight decay, seed) order."""
        return {"runs": [RunConfig.from_flat({**self.settings, **data_settings(data), "weight_decay": wd,
                                              "seed": seed})
                         for data in self.data for wd in self.weight_decays for seed in self.seeds]}

    def development_runs(self) -> list[RunConfig]:
        """Runs whose LLC is traced over training: the first data value, every weight decay."""
        return [run for run in self.runs()
                if data_label(run) == data_label_of(self.data[0]) and run.seed in self.development_seeds]

    def with_settings(self, **settings: Any) -> SortingPlan:
        """A copy with flat run settings (e.g. steps) over the recipe (None leaves one as it is)."""
        return replace(self, settings={**self.settings, **{k: v for k, v in settings.items() if v is not None}})

    def describe(self) -> list[str]:
        return [f"LLC traced over training for {len(self.development_runs())} of them"]


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
        # ε and batch from the calibration sweep (docs/study-sorting.md): λ̂ moves < 6% when ε is halved or
        # the batch doubled; the sampling time ε·steps of the former ε 3e-6 × 120 steps is kept
        sgld = SGLDSettings(lr=1.5e-6, nbeta=1e4, localization=1e4, chains=4, draws=120, burnin=120, batch_size=64,
                            init_loss_batches=16, init_batch_size=1024)
        return SortingPlan("cpu", data=(UNIFORM, 1.5, 3.0), weight_decays=(0.005, 0.0), seeds=(0, 1, 2),
                           settings=settings, sgld=sgld, development_seeds=(0, 1), llc_weights="all")
    if scale == "gpu":
        settings = scale_settings("paper", "sorting")
        sgld = SGLDSettings(lr=3e-6, nbeta=1e4, localization=1e4, chains=8, draws=200, burnin=200, batch_size=512,
                            init_loss_batches=None, init_batch_size=4096)
        return SortingPlan("gpu", data=(UNIFORM, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5), weight_decays=(0.005, 0.0),
                           seeds=tuple(range(16)), settings=settings, sgld=sgld, development_seeds=(0, 1, 2),
                           examples=10_000)
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
