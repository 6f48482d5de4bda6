"""How stable an LLC estimate is on the model itself: λ̂ again at half the step (over the same sampling time) and at
twice the batch, beside the plan's own setting, at chosen checkpoints of traced runs, all three from one L(w*)
(`llc_stability`); and the bias a turning-point test weighs from it (`model_stability`).

To first order the bias of a setting is twice what halving its step (or doubling its batch) changes, and only the
part of it that differs between checkpoints can make or hide a rise or a fall: a relative bias shared by every
checkpoint scales a curve's start, peak and end alike. So the bias weighed is twice the largest difference, over the
runs and the two variants, between the relative changes at two checkpoints of a run: by default its first valid
and its last (the sorting study, whose test reads start, peak and end), or its peak and its last (the modular
study, whose test reads the fall from the peak; its first valid λ̂ is a few units, where the chains' noise alone is
10-40% of it). The studies weigh it when their rule `llc_bias_source` is "model" (docs/decisions.md).

That largest difference is a maximum of noisy numbers, so it grows with the runs. The statistic "pooled" weighs
instead twice the upper 95% bound of the mean difference over the runs (each variant's, signed; Student's t over
their spread), the part the runs share, which narrows as runs are added (docs/study-sorting.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.analysis.development import valid_llc
from headway.analysis.llc import SGLDSettings, anchor_loss, estimate_llc
from headway.analysis.llc.calibration import calibration_grid
from headway.analysis.llc.trace import resumable_checkpoints, training_pool, uniform_guess_loss
from headway.analysis.llc.validity import BIAS_STATISTICS, ValidityLimits
from headway.analysis.statistics import t_quantile
from headway.runs import layout
from headway.runs.checkpoints import load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.schema import TableSchema
from headway.runs.store import load_model
from headway.settings import check_choice
from headway.tasks.objective import run_loss

VARIANTS = {"plan": (1.0, 1), "half_step": (0.5, 1), "double_batch": (1.0, 2)}  # name → (ε factor, batch factor)
SETTINGS = "stability.json"  # what the saved stability checkpoints were estimated with
# checkpoints of a traced run its stability can be measured at (`stability_steps` says which step each is)
FIRST, PEAK, LAST, SETTLED = "first_valid", "peak", "last", "settled"
POINTS = (FIRST, LAST)  # the two a study measures unless it says otherwise
SAID = {FIRST: "first valid", PEAK: "peak", LAST: "last", SETTLED: "settled"}  # each in words, and its columns' stem
POOLED_LEVEL = 0.95  # the one-sided confidence of the pooled statistic's bound on the runs' mean difference


def variant_settings(sgld: SGLDSettings) -> dict[str, SGLDSettings]:
    """The plan's setting and its two variants (`VARIANTS`), each ε over the plan's sampling time ε·steps."""
    return {name: calibration_grid(sgld, [sgld.lr * lr], [sgld.batch_size * batch], [sgld.localization])[0]
            for name, (lr, batch) in VARIANTS.items()}


def points_text(points: tuple[str, str]) -> str:
    """The two checkpoints `points` names, in words ("first valid and last checkpoint")."""
    return f"{SAID[points[0]]} and {SAID[points[1]]} checkpoint"


def stability_steps(trace: pd.DataFrame, validity: ValidityLimits,
                    points: tuple[str, str] = POINTS) -> dict[str, dict[str, int]]:
    """Per traced run of a trace table: each of `points` → its step: first_valid, the first whole-model checkpoint
    valid by `validity`'s sampler checks; peak, the valid one of highest λ̂; last, the last traced checkpoint;
    settled, the last valid one after the peak where training had settled (`settled_step`). A run with no valid
    checkpoint, or without a settled one when `points` asks for it, is left out (it cannot be tested)."""
    out = {}
    for run_id, rows in trace[trace.weights == "all"].groupby("run_id"):
        rows = rows.sort_values("step")
        valid = rows[(valid_llc(rows, validity) == "").to_numpy()]
        if len(valid):
            peak = int(valid.step.loc[valid.llc_mean.idxmax()])
            steps = {FIRST: int(valid.step.iloc[0]), PEAK: peak, LAST: int(rows.step.iloc[-1]),
                     SETTLED: settled_step(rows, valid, peak) if SETTLED in points else None}
            if all(steps[point] is not None for point in points):
                out[str(run_id)] = {point: steps[point] for point in points}
    return out


def settled_step(rows: pd.DataFrame, valid: pd.DataFrame, after: int) -> int | None:
    """The last of `valid` (one run's valid whole-model trace rows) after step `after` whose training loss at w*
    (`init_loss`) is no higher than at the traced checkpoint before it in `rows` (all its rows, by step), or None.
    Full-batch training spikes once its loss is tiny, and mid-spike w* is no minimum; a loss that rose since the
    previous checkpoint marks one (docs/study-modular.md, "Reading the fall where training has settled"). A loss
    missing (NaN) at either checkpoint settles nothing."""
    loss = rows.set_index("step").init_loss.astype(float)
    before = loss.shift(1)
    settled = [int(step) for step in valid.step if step > after and loss[step] <= before[step]]
    return settled[-1] if settled else None


def llc_stability(run_dir: Path, folder: Path, runs: list[RunConfig], instances: list[int],
                  wanted: dict[int, dict[str, int]], sgld: SGLDSettings, device: torch.device | str,
                  validity: ValidityLimits, schema: TableSchema, tag: Callable[[pd.DataFrame], pd.DataFrame],
                  stamp: dict | None = None, precision: str = "fp32", deadline: float | None = None,
                  progress: bool = False, compile_mode: str | None = None) -> pd.DataFrame:
    """λ̂ of `instances` (one training pool) at every setting of `variant_settings(sgld)`, at the checkpoints
    `wanted` names for each instance (position in `instances` → {role: step}, the roles of `stability_steps`), all
    settings of a checkpoint from one L(w*). Each checkpoint is saved to `folder` as it finishes and reused while
    what it was made from (`stamp` included) is unchanged; past `deadline` no further one starts
    (TimeLimitReached). Rows, passed through `tag` and declared by `schema`: step, checkpoint (its role:
    first_valid, peak or last), variant, lr, batch_size, burnin, draws, instance (indexing `instances`), llc_mean,
    llc_se, acceptance, invalid, change (λ̂ over the plan setting's, minus 1)."""
    steps = sorted({step for points in wanted.values() for step in points.values()})
    if not steps:
        return pd.DataFrame()
    first = runs[instances[0]]
    settings = variant_settings(sgld)
    pool_tokens, pool_targets = training_pool(first, len(instances), device)
    made_from = {"sgld": sgld.stored_dict(), "runs": [runs[i].run_id for i in instances], "variants": VARIANTS,
                 "validity": validity.to_dict(), **(stamp or {})}
    model = load_model(run_dir, instances, device=device)
    loss = run_loss(first.task, first.train.loss)
    chance = uniform_guess_loss(first, pool_targets)
    frames = []
    for step, path, cached in resumable_checkpoints(folder, SETTINGS, "stability", made_from, steps, schema,
                                                    "LLC stability", run_dir.name, deadline, progress):
        if cached is not None:
            frames.append(cached)
            continue
        model.load_instances(load_checkpoint(run_dir, step, runs, model), instances)
        anchor = anchor_loss(model, loss, pool_tokens, pool_targets, sgld, precision)
        parts = []
        for name, variant in settings.items():
            frame = estimate_llc(model, loss, pool_tokens, pool_targets, variant, init_loss=anchor,
                                 precision=precision, chance_loss=chance, validity=validity,
                                 compile_mode=compile_mode).to_frame()
            parts.append(frame[["instance", "llc_mean", "llc_se", "acceptance", "invalid"]].assign(
                variant=name, lr=variant.lr, batch_size=variant.batch_size, burnin=variant.burnin, draws=variant.draws))
        frame = pd.concat(parts, ignore_index=True)
        plan = frame[frame.variant == "plan"].set_index("instance").llc_mean
        with np.errstate(divide="ignore", invalid="ignore"):
            frame["change"] = frame.llc_mean.to_numpy() / plan.loc[frame.instance].to_numpy() - 1
        frame.insert(0, "step", step)
        frame = tag(_checkpoint_roles(frame, wanted))
        layout.write_table(path, frame, schema)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)


def _checkpoint_roles(frame: pd.DataFrame, wanted: dict[int, dict[str, int]]) -> pd.DataFrame:
    """The rows of `frame` (one step) at a checkpoint its instance wants, each with that checkpoint's role (both
    roles of a run whose first valid checkpoint is its last), in `VARIANTS` order."""
    rows = []
    for instance, points in wanted.items():
        for role, step in points.items():
            mine = frame[(frame.instance == instance) & (frame.step == step)]
            rows.append(mine.assign(checkpoint=role))
    out = pd.concat(rows, ignore_index=True) if rows else frame.iloc[:0].assign(checkpoint="")
    front = ["step", "checkpoint", "variant", "lr", "batch_size", "burnin", "draws", "instance"]
    return out[front + [c for c in out.columns if c not in front]]


@dataclass(frozen=True)
class ModelStability:
    """The model's own stability as a turning-point test weighs it: `bias`, by `statistic` twice the largest
    difference over runs and variants between a run's relative change at its two measured checkpoints ("largest"),
    or twice the largest upper bound of a variant's mean signed difference over the runs ("pooled", `pooled_bound`);
    NaN when a run in `missing` lacks one or its value, or, pooled, with fewer than two runs; `largest_change`, the
    largest |change| (reported, not weighed); `table`, one row per run × variant (run_id, variant, then each
    checkpoint's step and change, as first_step, first_change for the first valid one, peak_… or last_…, then
    difference, the absolute one)."""

    bias: float
    largest_change: float
    missing: list[str] = field(default_factory=list)  # traced runs that can be tested but lack their stability
    table: pd.DataFrame = field(default_factory=pd.DataFrame)
    statistic: str = "largest"

    def summary(self) -> dict:
        """The JSON view for summary.json."""
        return {"bias": None if math.isnan(self.bias) else self.bias, "statistic": self.statistic,
                "largest_change": None if math.isnan(self.largest_change) else self.largest_change,
                "missing": self.missing}


def pooled_bound(differences: np.ndarray, level: float = POOLED_LEVEL) -> float:
    """The upper `level` bound of |mean| of one variant's signed differences over the runs: |mean| plus Student's t
    quantile times their standard error (NaN with fewer than two runs, whose spread is unknown)."""
    values = np.asarray(differences, dtype=float)
    if len(values) < 2:
        return math.nan
    spread = float(values.std(ddof=1)) / math.sqrt(len(values))
    return abs(float(values.mean())) + t_quantile(level, len(values) - 1) * spread


def model_stability(table: pd.DataFrame, trace: pd.DataFrame, validity: ValidityLimits,
                    points: tuple[str, str] = POINTS, statistic: str = "largest") -> ModelStability:
    """The `ModelStability` of the runs of `trace` (an LLC trace table) from their `llc_stability` rows at `points`,
    its bias by `statistic` (`BIAS_STATISTICS`): every run with a valid checkpoint (`stability_steps`) must have both
    checkpoints' variants, else it is `missing` and the bias is NaN (never weighed as 0)."""
    check_choice("statistic", statistic, BIAS_STATISTICS)
    testable = stability_steps(trace, validity, points) if len(trace) else {}
    one, two = (SAID[point].split()[0] for point in points)
    rows, missing = [], []
    for run_id in sorted(testable):
        mine = table[table.run_id == run_id] if len(table) else table
        changes = {(r.checkpoint, r.variant): (int(r.step), float(r.change)) for r in mine.itertuples()}
        pairs = [(variant, changes.get((points[0], variant)), changes.get((points[1], variant)))
                 for variant in VARIANTS if variant != "plan"]
        if any(first is None or last is None or math.isnan(first[1] - last[1]) for _, first, last in pairs):
            missing.append(run_id)  # not measured, or a change without a value (the plan setting's λ̂ was 0)
            continue
        rows += [{"run_id": run_id, "variant": variant, f"{one}_step": first[0], f"{one}_change": first[1],
                  f"{two}_step": last[0], f"{two}_change": last[1], "difference": abs(first[1] - last[1])}
                 for variant, first, last in pairs]
    frame = pd.DataFrame(rows, columns=["run_id", "variant", f"{one}_step", f"{one}_change", f"{two}_step",
                                        f"{two}_change", "difference"])
    if missing or not len(frame):
        return ModelStability(math.nan, math.nan, missing, frame, statistic)
    largest = float(np.nanmax(np.abs(frame[[f"{one}_change", f"{two}_change"]].to_numpy(dtype=float))))
    if statistic == "pooled":
        signed = frame[f"{one}_change"] - frame[f"{two}_change"]
        bound = float(np.max([pooled_bound(signed[frame.variant == variant].to_numpy())
                              for variant in frame.variant.unique()]))
        return ModelStability(2 * bound, largest, missing, frame, statistic)
    return ModelStability(2 * float(frame.difference.max()), largest, missing, frame, statistic)
