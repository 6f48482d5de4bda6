"""What the sorting study trains and measures at each scale: weight decay × data (δ̄) × seeds,
packed into one ensemble, and the SGLD settings of its LLC estimates."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.analysis.llc import SGLDSettings
from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.runs.cost import GPU_STEP_BASE_S, GPU_STEP_PER_LAYER_S
from headway.settings import check_int, check_number
from headway.studies.base import Plan, axis
from headway.studies.llc_chains import apply_llc_chains, llc_burnin_field, llc_draws_field, traced_line
from headway.studies.fresh_data import data_line, fresh_data_field, on_fresh_data
from headway.tasks.registry import scale_settings

STUDY_SCALES = ("cpu", "gpu")
UNIFORM = "uniform"  # the default data: distinct numbers drawn uniformly from 0 … 50
# Seconds per SGLD step on one H100: a step of the batched chains (forward, backward, update) is bound by kernel
# latency, so the LLC trace takes at least this per sequential step. Taken as the measured latency floor of a
# one-layer eager training step (headway.runs.cost); SGLD steps themselves are not yet timed on a GPU
SGLD_STEP_S = GPU_STEP_BASE_S + GPU_STEP_PER_LAYER_S


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
    llc_first_step: int = field(default=0, metadata=axis(
        "First training step the LLC trace visits: earlier checkpoints are not traced (before w* is a minimum λ̂ is "
        "no LLC; docs/decisions.md)."))
    llc_budget: int | None = field(default=None, metadata=axis(
        "SGLD steps a chain within which the LLC's settings are chosen for each ensemble ('fixed': the scale's "
        "settings as given; docs/decisions.md).", words={"fixed": None}))
    llc_burnin: int | None = llc_burnin_field()
    llc_draws: int | None = llc_draws_field()
    llc_weights: str = field(default="all,heads", metadata=axis(
        "Weight groups of the LLC trace: all (the whole model), heads (each head alone), embed, unembed."))
    examples: int = field(default=2000, metadata=axis("Lists each model is analysed on."))
    fresh_data: bool = fresh_data_field()

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
        if self.llc_budget is not None:
            check_int("llc_budget", self.llc_budget, 2)
        if "all" not in (group.strip() for group in self.llc_weights.split(",")):
            raise ConfigError(f"llc_weights = {self.llc_weights!r} must include 'all': the stages and the LLC verdict "
                              "read the whole-model LLC")
        check_int("examples", self.examples, 1)
        # every task and recipe setting is checked before anything trains; the last checkpoint is at the last step
        check_int("llc_first_step", self.llc_first_step, 0, max(run.train.steps for run in self.runs()))
        apply_llc_chains(self)

    def grids(self) -> dict[str, list[RunConfig]]:
        """One grid, in (data, weight decay, seed) order, each seed on its own lists with `fresh_data`."""
        return {"runs": on_fresh_data([RunConfig.from_flat({**self.settings, **data_settings(data),
                                                            "weight_decay": wd, "seed": seed})
                                       for data in self.data for wd in self.weight_decays for seed in self.seeds],
                                      self.fresh_data)}

    def development_runs(self) -> list[RunConfig]:
        """Runs whose LLC is traced over training: the first data value, every weight decay."""
        return [run for run in self.runs()
                if data_label(run) == data_label_of(self.data[0]) and run.seed in self.development_seeds]

    def with_settings(self, **settings: Any) -> SortingPlan:
        """A copy with flat run settings (e.g. steps) over the recipe (None leaves one as it is)."""
        return replace(self, settings={**self.settings, **{k: v for k, v in settings.items() if v is not None}})

    def describe(self) -> list[str]:
        projected = gpu_projection(self)
        return [data_line(self.fresh_data), traced_line(self),
                f"LLC: about {projected['llc_flops']:.2e} FLOPs; projected on one H100 (measured rates): "
                f"training {projected['training_s'] / 60:.1f} min, analysis {projected['analysis_s'] / 60:.1f} min"]


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


def gpu_plan() -> SortingPlan:
    """The `gpu` scale: the recipe (batch 512, 20k steps) over a δ̄ grid of 1.5–4.5 in steps of 0.5 and the
    default lists, both weight decays, 24 seeds per cell (the gap test's power; the CPU run's 3 seeds gave
    0.00), the LLC over training of seeds 0–11 at both weight decays (whole model and each head) at every
    saved checkpoint, with the CPU calibration's ε 1.5e-6 at batch 512 over the sampling time of the former
    ε 3e-6 × 400 steps (800 steps). 24 seeds rather than more because the 384 runs train as one ensemble of
    about 46 GiB (`training_memory`). Sized before any GPU had run it, at an assumed 100 TFLOP/s, to about
    15 minutes; at the rates measured on an H100 it projects to about 50 minutes (`gpu_projection`,
    docs/study-sorting.md)."""
    sgld = SGLDSettings(lr=1.5e-6, nbeta=1e4, localization=1e4, chains=8, draws=400, burnin=400, batch_size=512,
                        init_loss_batches=None, init_batch_size=4096)
    return SortingPlan("gpu", data=(UNIFORM, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5), weight_decays=(0.005, 0.0),
                       seeds=tuple(range(24)), settings=scale_settings("paper", "sorting"), sgld=sgld,
                       development_seeds=tuple(range(12)), examples=10_000)


def gpu_projection(plan: SortingPlan) -> dict[str, float]:
    """Projected seconds of `plan` on one H100: training at `gpu_step_seconds` per step of each ensemble, the
    LLC's FLOPs at the measured training rate but no faster than SGLD_STEP_S per sequential SGLD step (every
    traced run's chains step together)."""
    from headway.runs.config import group_runs
    from headway.runs.cost import GPU_TRAINING_FLOPS, gpu_training_seconds, training_flops

    runs, traced = plan.runs(), plan.development_runs()
    flops = sum(training_flops(run) for run in runs)
    training = gpu_training_seconds(list(group_runs(runs).values()))
    groups = _weight_groups(plan, runs[0])
    checkpoints = _trace_checkpoints(plan)
    llc = _llc_flops(plan, runs, 1) + checkpoints * _llc_flops(plan, traced, groups)
    sequential = (1 + checkpoints * groups) * plan.sgld.steps
    analysis = max(llc / GPU_TRAINING_FLOPS, sequential * SGLD_STEP_S)
    return {"training_flops": flops, "training_s": training, "llc_flops": llc,
            "analysis_s": analysis, "total_s": training + analysis}


def _weight_groups(plan: SortingPlan, run: RunConfig) -> int:
    """Weight groups of the LLC trace: one per named group, one per head for "heads"."""
    names = [name.strip() for name in plan.llc_weights.split(",")]
    return sum(run.model.layers * run.model.heads if name == "heads" else 1 for name in names)


def _trace_checkpoints(plan: SortingPlan) -> int:
    """Checkpoints the LLC trace visits: every saved one from `llc_first_step` on, or `llc_checkpoints` of them."""
    from headway.runs.config import RunConfig
    from headway.train.trainer import checkpoint_schedule

    train = RunConfig.from_flat(plan.settings).train
    saved = sum(step >= plan.llc_first_step
                for step in checkpoint_schedule(train.steps, train.checkpoint_every, train.log_checkpoints))
    return saved if plan.llc_checkpoints is None else min(saved, plan.llc_checkpoints)


def _llc_flops(plan: SortingPlan, runs: list[RunConfig], groups: int) -> float:
    """FLOPs of one LLC estimate of each of `runs` for each of `groups` weight groups, with L(w*) once."""
    from headway.runs.cost import sgld_flops

    sgld = plan.sgld
    if not runs:
        return 0.0
    pool = (sgld.init_loss_batches or 0) * (sgld.init_batch_size or 0) or runs[0].train.train_size
    return sum(groups * sgld_flops(run, sgld.chains, sgld.steps, sgld.batch_size) + sgld_flops(run, 0, 0, 0, pool)
               for run in runs)


def study_plan(scale: str) -> SortingPlan:
    """The study at a named scale: `cpu` (about an hour on 2 cores) or `gpu` (the recipe's size)."""
    if scale == "cpu":
        # 18 seeds x 2 weight decays x the default lists and δ̄ 1.5: if every run learns, each mode claim has power
        # >= 0.8 at α/7, the strictest Holm level over the study's seven claims (`design.design_power`: the gap
        # claim 0.86, the binomial claims >= 0.99); 3 seeds x 3 data values gave the gap claim 0.00. The two data
        # values are the ends of the former three (δ̄ 3 left out): the stated effect is linear in δ̄, so runs at
        # the ends carry it; three values would need about 20 seeds each (120 runs) for the same power
        settings = {**scale_settings("cpu", "sorting"), "steps": 1200, "batch_size": 128, "eval_every": 50,
                    "checkpoint_every": 400, "log_checkpoints": 16}
        # batch from the calibration sweep (docs/study-sorting.md): λ̂ moves < 6% when ε is halved or the batch
        # doubled; ε a quarter of that sweep's 1.5e-6, the first step whose MALA acceptance passes the validity floor
        # on the traced runs (0.43-0.45 against 0.21-0.25), over 4x the steps to keep the sampling time ε·steps
        sgld = SGLDSettings(lr=3.75e-7, nbeta=1e4, localization=1e4, chains=4, draws=480, burnin=480, batch_size=64,
                            init_loss_batches=16, init_batch_size=1024)
        return SortingPlan("cpu", data=(UNIFORM, 1.5), weight_decays=(0.005, 0.0), seeds=tuple(range(18)),
                           settings=settings, sgld=sgld, development_seeds=(0, 1), llc_weights="all")
    if scale == "gpu":
        return gpu_plan()
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
