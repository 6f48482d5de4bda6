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
from headway.runs.config import RunConfig, expand_grid
from headway.studies.base import Plan, axis
from headway.studies.fresh_data import data_line, fresh_data_field, on_fresh_data
from headway.tasks.registry import scale_settings
from headway.tasks.retrieval.config import CURRICULA, LAYOUTS, LINK_SUPERVISIONS, ORDERS, SUPERVISIONS, RetrievalConfig
from headway.tasks.retrieval.theory import min_layers

STUDY_SCALES = ("cpu", "gpu", "paper")
# Analysis seconds per ensemble on one GPU, timed in a lease (one H200, results/retrieval-gpu-bound): 37.4 s for two
# 8-run ensembles, 18.7 s each; two ensembles of 8 and 16 runs did not finish in about 45 s (results/retrieval-gpu-
# logdepth), so 25 s. The analysis is ~150 forwards of 1024 examples per task, ridge probes and a forward per
# checkpoint, bound by latency.
ANALYSIS_S_PER_ENSEMBLE = 25.0
# Seconds an ensemble's training takes beyond its steps at `gpu_step_seconds`, timed in the same leases: data
# generation, compilation (about 35 s cold, a few s when the inductor cache is warm), the evaluations every
# `eval_every` steps and the checkpoints. 2500- and 1200-step ensembles ran 3-38 s past their steps' projection.
ENSEMBLE_OVERHEAD_S = 35.0


@dataclass(frozen=True)
class RetrievalPlan(Plan):
    """The two grids of the study. `depth_*` sweep the plain task (hops × layers × seeds, per
    curriculum and variant); `conditional_*` the conditional task (an empty hops tuple skips it)."""

    scale: str = "cpu"
    depth_base: dict[str, Any] = field(default_factory=dict)
    layers: tuple[int, ...] = field(default=(1, 2, 3), metadata=axis("Layer counts of the depth grid (e.g. 1..4)."))
    hops: tuple[int, ...] = field(default=(1, 2, 3), metadata=axis("Hop counts D of the depth grid."))
    seeds: tuple[int, ...] = field(default=(0, 1, 2), metadata=axis("Seeds per cell of the depth grid.", "seed"))
    curricula: tuple[str, ...] = field(default=("ic", "none"),
                                       metadata=axis("Curricula: ic, none, mixture (comma list).", "curriculum"))
    contrast_hops: tuple[int, ...] = field(  # hops at which curricula other than ic are trained; () = every D > 1
        default=(), metadata=axis("Hops at which curricula other than ic are trained ('all': every D > 1).",
                                  words={"all": ()}))
    layouts: tuple[str, ...] = field(default=("packed",), metadata=axis("Layouts: packed, flat.", "layout"))
    attentions: tuple[str, ...] = field(default=("causal",),
                                        metadata=axis("Attention: causal, bidirectional.", "attention"))
    orders: tuple[str, ...] = field(default=("shuffled",), metadata=axis("Link orders: shuffled, chain.", "order"))
    supervisions: tuple[str, ...] = field(default=("query",), metadata=axis(
        "Supervision: query, dense (every link also predicts its chain toward the root), whole-chain (every link "
        "predicts its whole chain, root-ward and leaf-ward); IC only.", "supervision"))
    mask_unreachable: bool = field(default=False, metadata=axis(
        "Mask the link targets no depth can deliver under a causal mask (dense and whole-chain causal cells; "
        "alone: true)."))
    bound_hops: tuple[int, ...] = field(default=(), metadata=axis(
        "Cells at Theorem 1's exact bound, beside the grid: for each D, bidirectional attention, shuffled links "
        "and dense supervision with ⌈log₃ 2D⌉ layers, V raised to K·(D+1) where the grid's is smaller "
        "('none': none).", words={"none": ()}))
    fresh_data: bool = fresh_data_field()
    conditional_base: dict[str, Any] = field(default_factory=dict)
    conditional_layers: tuple[int, ...] = field(default=(1, 2, 3), metadata=axis("Conditional grid: layer counts."))
    conditional_hops: tuple[int, ...] = field(
        default=(1, 2), metadata=axis("Conditional grid: hop counts ('none' skips it).", words={"none": ()}))
    conditional_seeds: tuple[int, ...] = field(default=(0, 1, 2),
                                               metadata=axis("Conditional grid: seeds.", "conditional_seed"))

    def __post_init__(self) -> None:
        """Refuse an empty or impossible axis with its name and what is allowed."""
        for name in ("layers", "hops", "seeds"):
            if not getattr(self, name):
                raise ConfigError(f"{name} is empty; give at least one value")
        _check_choices("curricula", self.curricula, CURRICULA)
        _check_choices("layouts", self.layouts, LAYOUTS)
        _check_choices("attentions", self.attentions, ATTENTION_KINDS)
        _check_choices("orders", self.orders, ORDERS)
        _check_choices("supervisions", self.supervisions, SUPERVISIONS)
        for name in ("layers", "hops", "contrast_hops", "bound_hops", "conditional_layers", "conditional_hops"):
            bad = [v for v in getattr(self, name) if v < 1]
            if bad:
                raise ConfigError(f"{name} = {bad[0]} is not allowed; use whole numbers >= 1")
        has_link_causal = (any(s in LINK_SUPERVISIONS for s in self.supervisions) and "causal" in self.attentions
                           and "ic" in self.curricula)
        if self.mask_unreachable and not has_link_causal:
            raise ConfigError("mask_unreachable = True masks the link targets of dense or whole-chain, causal IC cells "
                              f"and this plan has none (supervision {','.join(self.supervisions)}, attention "
                              f"{','.join(self.attentions)}, curriculum {','.join(self.curricula)}); "
                              "add --supervision dense (and --attention causal, --curriculum ic)")

    def depth_runs(self) -> list[RunConfig]:
        """Plain-task runs. With one hop the curricula coincide, so D=1 is trained with `ic` only; other
        curricula are trained at `contrast_hops` only when those are given (a cheaper contrast). Link
        supervision exists for `ic` only, so the other curricula are trained with the query's; with
        `mask_unreachable`, its causal runs mask the targets no depth can deliver."""
        runs = []
        for curriculum in self.curricula:
            supervisions = list(self.supervisions) if curriculum == "ic" else ["query"]
            hops = [d for d in self.hops
                    if curriculum == "ic" or "ic" not in self.curricula
                    or (d > 1 and (not self.contrast_hops or d in self.contrast_hops))]
            if not hops:
                continue
            axes = {"layout": list(self.layouts), "attention": list(self.attentions), "order": list(self.orders),
                    "supervision": supervisions, "hops": hops, "layers": list(self.layers), "seed": list(self.seeds)}
            runs += [self._masked(run) for run in expand_grid({**self.depth_base, "curriculum": curriculum}, axes)]
        grid = {run.run_id for run in runs}
        return runs + [run for run in self.bound_runs() if run.run_id not in grid]  # a grid cell may be one

    def bound_runs(self) -> list[RunConfig]:
        """The `bound_hops` cells: where Theorem 1's bound is exact (bidirectional attention, which reaches in
        every link order) and the shuffled order the paper uses, so one layer fewer could not solve them. Dense
        supervision, because at CPU scale it is what let bidirectional shuffled cells compose at all."""
        runs = []
        for hops in self.bound_hops:
            base = {**self.depth_base, "curriculum": "ic", "attention": "bidirectional", "order": "shuffled",
                    "supervision": "dense", "hops": hops, "layers": min_layers(hops)}
            chains = base.get("chains", RetrievalConfig.chains)
            base["vocab"] = max(base.get("vocab", RetrievalConfig.vocab), chains * (hops + 1))
            runs += expand_grid(base, {"seed": list(self.seeds)})
        return runs

    def _masked(self, run: RunConfig) -> RunConfig:
        """`run` with mask_unreachable set where the plan asks for it and a mask applies (link supervision, causal)."""
        if not (self.mask_unreachable and run.task.supervision in LINK_SUPERVISIONS and run.model.attention == "causal"):
            return run
        return replace(run, task=replace(run.task, mask_unreachable=True))

    def conditional_runs(self) -> list[RunConfig]:
        """Conditional-task runs (IC), empty when the plan has no conditional hops."""
        if not self.conditional_hops:
            return []
        axes = {"hops": list(self.conditional_hops), "layers": list(self.conditional_layers),
                "seed": list(self.conditional_seeds)}
        return expand_grid({**self.conditional_base, "conditional": True, "curriculum": "ic"}, axes)

    def grids(self) -> dict[str, list[RunConfig]]:
        """The depth-law grid and the conditional grid, each run on its seed's own data with `fresh_data`."""
        return {"depth": on_fresh_data(self.depth_runs(), self.fresh_data),
                "conditional": on_fresh_data(self.conditional_runs(), self.fresh_data)}

    def describe(self) -> list[str]:
        projected = gpu_projection(self)
        return [data_line(self.fresh_data),
                f"projected on one H100 (eager step, measured rates): training {projected['training_s'] / 60:.1f} min, "
                f"analysis {projected['analysis_s'] / 60:.1f} min ({projected['ensembles']} ensembles × "
                f"{ANALYSIS_S_PER_ENSEMBLE:g} s, measured on an H200)"]

    def with_settings(self, **settings: Any) -> RetrievalPlan:
        """A copy with flat run settings (e.g. steps, vocab) set in both grids (None leaves one as it is)."""
        given = {k: v for k, v in settings.items() if v is not None}
        return replace(self, depth_base={**self.depth_base, **given},
                       conditional_base={**self.conditional_base, **given})


def _check_choices(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    if not values:
        raise ConfigError(f"{name} is empty; choose from {', '.join(allowed)}")
    for value in values:
        if value not in allowed:
            raise ConfigError(f"{name} value {value!r} is unknown; choose from {', '.join(allowed)}")


def _dense_checkpoints(settings: dict[str, Any], every: int, logs: int) -> dict[str, Any]:
    return {**settings, "checkpoint_every": every, "log_checkpoints": logs}


def gpu_plan() -> RetrievalPlan:
    """The `gpu` scale: the cells that separate the papers' claims from what the CPU scale showed.

    Depth: 2 and 3 causal layers on D = 3, 4, 5, links in chain order and shuffled, each with dense and query
    supervision — at CPU scale chain order composed under either supervision and shuffled order under neither
    (results/order-supervision-cpu), so the grid asks whether the paper's width and 10k steps change that at
    D = 4 and 5 (three layers needed ~5000 steps at width 64 for D = 4 in chain order) — with the paper's
    model and 8 seeds. Beside the grid, the cells at Theorem 1's exact bound that the CPU could not solve (two
    bidirectional layers on D = 4, results/bidirectional-d4-cpu; three on D = 9 at V = 40,
    results/bidirectional-d9-cpu), shuffled links, dense supervision. Conditional: the recipes the CPU sweep could not run: bidirectional attention, 3 and 4
    layers, width 128, the paper's 24k steps at batch 128 (its second setup), 16 seeds. At the step times
    measured on an H100 and an H200 it projects to about 73 minutes, so it runs in `--time-limit` pieces or with
    `--steps`/`--seed` cut to a lease (`gpu_projection`, docs/study-retrieval.md).
    """
    model = {**scale_settings("paper"), "vocab": 24, "train_size": 2**18, "val_size": 2048, "eval_every": 100}
    depth = {**_dense_checkpoints(model, 250, 16), "steps": 10_000}
    conditional = {**_dense_checkpoints(model, 1000, 24), "chains": 2, "attention": "bidirectional",
                   "steps": 24_000, "batch_size": 128}
    return RetrievalPlan(scale="gpu", depth_base=depth, layers=(2, 3), hops=(3, 4, 5), seeds=tuple(range(8)),
                         curricula=("ic",), orders=("chain", "shuffled"), supervisions=("dense", "query"), bound_hops=(4, 9),
                         conditional_base=conditional, conditional_layers=(3, 4), conditional_hops=(1, 2),
                         conditional_seeds=tuple(range(16)))


def gpu_projection(plan: RetrievalPlan, step_scale: float = 1.0) -> dict[str, float]:
    """Projected seconds of `plan` on one H100: each ensemble's steps at `gpu_step_seconds` (the measured
    latency floor or FLOP rate of an eager step) times `step_scale` (a step measured on the device at hand over
    its projection) plus ENSEMBLE_OVERHEAD_S, and the analysis at ANALYSIS_S_PER_ENSEMBLE per ensemble."""
    from headway.runs.config import group_runs
    from headway.runs.cost import gpu_training_seconds, training_flops

    flops = sum(training_flops(run) for run in plan.runs())
    groups = [members for runs in plan.grids().values() if runs for members in group_runs(runs).values()]
    training = step_scale * gpu_training_seconds(groups) + ENSEMBLE_OVERHEAD_S * len(groups)
    analysis = len(groups) * ANALYSIS_S_PER_ENSEMBLE
    return {"training_flops": flops, "training_s": training, "ensembles": len(groups),
            "analysis_s": analysis, "total_s": training + analysis}


def study_plan(scale: str) -> RetrievalPlan:
    """The plan of a named scale (see the module docstring)."""
    if scale == "cpu":
        # evaluations every 25 steps on 512 examples: hop accuracies jump within 100 steps at this scale
        cpu = {**_dense_checkpoints(scale_settings("cpu"), 50, 20), "eval_every": 25, "val_size": 512}
        return RetrievalPlan(scale=scale, depth_base=cpu, contrast_hops=(2,),
                         conditional_base={**cpu, "chains": 2, "steps": 3000}, conditional_layers=(3,),
                         conditional_hops=(1,), conditional_seeds=(0, 1))
    if scale == "gpu":
        return gpu_plan()
    if scale == "paper":
        paper = {"vocab": 64, "checkpoint_every": 500, "log_checkpoints": 20}
        second = {"vocab": 64, "steps": 24000, "batch_size": 128, "train_size": 2**18,
                  "checkpoint_every": 1000, "log_checkpoints": 24}
        # D at both ends of every bound step: 1 (1 layer), 2 and 4 (2), 5 and 13 (3), 14 (4)
        return RetrievalPlan(scale=scale, depth_base=paper, layers=tuple(range(1, 9)), hops=(1, 2, 4, 5, 13, 14),
                         seeds=tuple(range(8)), conditional_base=second, conditional_layers=(1, 2, 3, 4),
                         conditional_hops=(1, 2, 4), conditional_seeds=tuple(range(64)))
    raise ConfigError(f"scale = {scale!r} is unknown; choose one of {', '.join(STUDY_SCALES)}")
