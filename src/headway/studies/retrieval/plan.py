"""What the stacked-heads study trains at each scale: the depth-law grid and the conditional grid.

Scales (docs/study-retrieval.md): `cpu` finishes in under 20 minutes on 2 cores; `paper` is the
paper's recipe and grid (8 seeds × layers 1–8, 8 heads, width 128, 10k steps, batch 512, 2^20
examples; conditional: its second setup, 64 transformers, 24k steps, batch 128, 2^18 examples, IC);
`gpu` sits between. Checkpoints are denser than plain training so emergence can be timed.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from headway.errors import ConfigError
from headway.model.config import ATTENTION_KINDS
from headway.presets import scale_settings
from headway.runs.config import RunConfig, expand_grid
from headway.tasks.retrieval import CURRICULA, LAYOUTS, ORDERS

STUDY_SCALES = ("cpu", "gpu", "paper")


@dataclass(frozen=True)
class StudyPlan:
    """The two grids of the study. `depth_*` sweep the plain task (hops × layers × seeds, per
    curriculum and variant); `conditional_*` the conditional task (an empty hops tuple skips it)."""

    scale: str = "cpu"
    depth_base: dict[str, Any] = field(default_factory=dict)
    layers: tuple[int, ...] = (1, 2, 3)
    hops: tuple[int, ...] = (1, 2, 3)
    seeds: tuple[int, ...] = (0, 1, 2)
    curricula: tuple[str, ...] = ("ic", "none")
    contrast_hops: tuple[int, ...] = ()  # hops at which curricula other than ic are trained; () = every D > 1
    layouts: tuple[str, ...] = ("packed",)
    attentions: tuple[str, ...] = ("causal",)
    orders: tuple[str, ...] = ("shuffled",)
    conditional_base: dict[str, Any] = field(default_factory=dict)
    conditional_layers: tuple[int, ...] = (1, 2, 3)
    conditional_hops: tuple[int, ...] = (1, 2)
    conditional_seeds: tuple[int, ...] = (0, 1, 2)

    def __post_init__(self) -> None:
        """Refuse an empty or impossible axis with its name and what is allowed."""
        for name in ("layers", "hops", "seeds"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is empty; give at least one value")
        _check_choices("curricula", self.curricula, CURRICULA)
        _check_choices("layouts", self.layouts, LAYOUTS)
        _check_choices("attentions", self.attentions, ATTENTION_KINDS)
        _check_choices("orders", self.orders, ORDERS)
        for name in ("layers", "hops", "contrast_hops", "conditional_layers", "conditional_hops"):
            bad = [v for v in getattr(self, name) if v < 1]
            if bad:
                raise ConfigError(f"{name} = {bad[0]} is not allowed; use whole numbers >= 1")

    def depth_runs(self) -> list[RunConfig]:
        """Plain-task runs. With one hop the curricula coincide, so D=1 is trained with `ic` only; other
        curricula are trained at `contrast_hops` only when those are given (a cheaper contrast)."""
        runs = []
        for curriculum in self.curricula:
            hops = [d for d in self.hops
                    if curriculum == "ic" or "ic" not in self.curricula
                    or (d > 1 and (not self.contrast_hops or d in self.contrast_hops))]
            if not hops:
                continue
            axes = {"layout": list(self.layouts), "attention": list(self.attentions), "order": list(self.orders),
                    "hops": hops, "layers": list(self.layers), "seed": list(self.seeds)}
            runs += expand_grid({**self.depth_base, "curriculum": curriculum}, axes)
        return runs

    def conditional_runs(self) -> list[RunConfig]:
        """Conditional-task runs (IC), empty when the plan has no conditional hops."""
        if not self.conditional_hops:
            return []
        axes = {"hops": list(self.conditional_hops), "layers": list(self.conditional_layers),
                "seed": list(self.conditional_seeds)}
        return expand_grid({**self.conditional_base, "conditional": True, "curriculum": "ic"}, axes)

    def runs(self) -> list[RunConfig]:
        """Every run of the study."""
        return self.depth_runs() + self.conditional_runs()

    def with_settings(self, **settings: Any) -> StudyPlan:
        """A copy with flat run settings (e.g. steps, vocab) set in both grids (None leaves one as it is)."""
        given = {k: v for k, v in settings.items() if v is not None}
        return replace(self, depth_base={**self.depth_base, **given},
                       conditional_base={**self.conditional_base, **given})

    def with_overrides(self, **values: Any) -> StudyPlan:
        """A copy with the given fields replaced (None leaves a field as it is)."""
        return replace(self, **{k: v for k, v in values.items() if v is not None})


def training_flops(run: RunConfig) -> float:
    """Approximate floating-point operations to train `run`: forward and backward (3× forward) of the
    projections, MLP and attention products of every layer, for every token of every step."""
    d, tokens, n_ctx = run.model.d_model, run.train.batch_size * run.task.n_ctx, run.task.n_ctx
    per_layer = 2 * tokens * (4 * d * run.model.heads * run.model.head_dim + 2 * d * run.model.mlp_dim) \
        + 4 * tokens * n_ctx * run.model.heads * run.model.head_dim
    return 3.0 * run.model.layers * per_layer * run.train.steps


def _check_choices(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    if not values:
        raise ConfigError(f"{name} is empty; choose from {', '.join(allowed)}")
    for value in values:
        if value not in allowed:
            raise ConfigError(f"{name} value {value!r} is unknown; choose from {', '.join(allowed)}")


def _dense_checkpoints(settings: dict[str, Any], every: int, logs: int) -> dict[str, Any]:
    return {**settings, "checkpoint_every": every, "log_checkpoints": logs}


def study_plan(scale: str) -> StudyPlan:
    """The plan of a named scale (see the module docstring)."""
    if scale == "cpu":
        # evaluations every 25 steps on 512 examples: hop accuracies jump within 100 steps at this scale
        cpu = {**_dense_checkpoints(scale_settings("cpu"), 50, 20), "eval_every": 25, "val_size": 512}
        return StudyPlan(scale=scale, depth_base=cpu, contrast_hops=(2,),
                         conditional_base={**cpu, "chains": 2, "steps": 3000}, conditional_layers=(3,),
                         conditional_hops=(1,), conditional_seeds=(0, 1))
    if scale == "gpu":
        gpu = {"vocab": 32, "chains": 4, "steps": 5000, "train_size": 2**18, "val_size": 2048,
               "eval_every": 100, "checkpoint_every": 250, "log_checkpoints": 16}
        return StudyPlan(scale=scale, depth_base=gpu, layers=(1, 2, 3, 4), hops=(1, 2, 3, 4, 5, 6),
                         seeds=(0, 1, 2, 3), conditional_base={**gpu, "chains": 2, "batch_size": 128},
                         conditional_layers=(1, 2, 3), conditional_hops=(1, 2, 4),
                         conditional_seeds=tuple(range(16)))
    if scale == "paper":
        paper = {"vocab": 64, "checkpoint_every": 500, "log_checkpoints": 20}
        second = {"vocab": 64, "steps": 24000, "batch_size": 128, "train_size": 2**18,
                  "checkpoint_every": 1000, "log_checkpoints": 24}
        # D at both ends of every bound step: 1 (1 layer), 2 and 4 (2), 5 and 13 (3), 14 (4)
        return StudyPlan(scale=scale, depth_base=paper, layers=tuple(range(1, 9)), hops=(1, 2, 4, 5, 13, 14),
                         seeds=tuple(range(8)), conditional_base=second, conditional_layers=(1, 2, 3, 4),
                         conditional_hops=(1, 2, 4), conditional_seeds=tuple(range(64)))
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
