"""The LLC over training of chosen runs of a study: the local learning coefficient at saved
checkpoints (whole model and restricted weight groups), written checkpoint by checkpoint so an
interrupted trace resumes where it stopped. Any task; the sorting and modular studies use it."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd
import torch

from headway.analysis.development import trace_steps
from headway.analysis.llc import SGLDSettings, anchor_loss, estimate_llc, weight_masks
from headway.analysis.llc.resolution import PROBES, RESOLUTION_ROWS, STEPS
from headway.analysis.llc.validity import ValidityLimits
from headway.errors import ConfigError, TimeLimitReached
from headway.progress import tracked
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.schema import TableSchema
from headway.runs.store import load_model
from headway.tasks.objective import readout_loss, run_loss

if TYPE_CHECKING:
    from headway.analysis.llc.known_answers import SuiteBias

SETTINGS = "settings.json"  # what the traced checkpoints were estimated with


def estimator_bias(settings: SGLDSettings, budget: int | None = None, at_scale: bool = True) -> float:
    """The worst relative error of the LLC estimator at `settings` (with a `budget`: of settings chosen from them
    within it) on the known-answer suite (models of known λ; `headway.analysis.llc.known_answers`), measured on the
    CPU in seconds to a minute: the bias a study allows for beside its own estimates (`development(bias=...)`) and
    shows beside its LLC tables. `at_scale`: against what each estimate targets at its own nβ and γ (the suite's
    `max_abs_scale_error`, for claims that read λ̂ at its stated scale), else against the LLC itself (for claims that
    read resolved estimates only). The suite is kept per settings for the process (its seeds are fixed), so a study
    judged again, under either reading, does not measure it again."""
    bias = _suite(settings, budget)
    return bias.max_abs_scale_error if at_scale else bias.max_abs_relative_error


@functools.lru_cache(maxsize=8)
def _suite(settings: SGLDSettings, budget: int | None) -> SuiteBias:
    """The known-answer suite at `settings` (and `budget`), on the CPU, once per process."""
    from headway.analysis.llc.known_answers import suite_bias

    return suite_bias(settings, device="cpu", budget=budget)


def uniform_guess_loss(run: RunConfig, targets: torch.Tensor) -> float:
    """The training loss of a uniform guess (every output zero: equal logits, or no one-hot predicted) on the
    pool's targets [E, N, T]: the chance level against which `estimate_llc` judges whether chains left the
    basin of w*."""
    task = run.task
    zeros = torch.zeros(*targets[:1].shape, task.vocab, device=targets.device).flatten(2)
    return float(readout_loss(zeros, targets[:1], task.vocab, run.train.loss, task.train_targets_masked))


def training_pool(run: RunConfig, n_instances: int, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The run's training pool, shared by `n_instances` instances (a view, no copy), for SGLD."""
    train = run.task.split(run.train.train_size, run.train.val_size, run.data_seed)[0]
    tokens = torch.from_numpy(train.tokens).to(device)
    targets = torch.from_numpy(train.targets).to(device)
    return tokens.expand(n_instances, *tokens.shape), targets.expand(n_instances, *targets.shape)


def resumable_checkpoints(folder: Path, settings_file: str, prefix: str, settings: dict, steps: list[int],
                          schema: TableSchema, desc: str, of: str, deadline: float | None = None,
                          progress: bool = False) -> Iterator[tuple[int, Path, pd.DataFrame | None]]:
    """Each of `steps` with the file under `folder` its estimates are saved in (`<prefix>_<step>.parquet`) and, when
    that file holds them already, the saved frame (else None: the caller estimates it and writes it there). Saved
    files are first deleted when `settings_file` says they were made from other `settings` than these, which it then
    records. Once `deadline` (a `time.time()` value) has passed, no further checkpoint is handed out to estimate:
    TimeLimitReached, naming `desc`, what it is `of` (an ensemble) and how many were done. `progress` shows a bar
    (`desc`)."""
    folder.mkdir(parents=True, exist_ok=True)
    if (folder / settings_file).is_file() and layout.read_json(folder / settings_file) != settings:
        for stale in folder.glob(f"{prefix}_*.parquet"):
            stale.unlink()
    layout.write_json(folder / settings_file, settings)
    for done, step in enumerate(tracked(steps, desc, "checkpoint", enabled=progress)):
        path = folder / f"{prefix}_{step:07d}.parquet"
        if path.is_file():
            yield step, path, layout.read_table(path, schema)
            continue
        TimeLimitReached.check(deadline, f"in the {desc} of {of} ({done} of {len(steps)} checkpoints done)")
        yield step, path, None


def llc_trace(run_dir: Path, folder: Path, runs: list[RunConfig], instances: list[int], sgld: SGLDSettings,
              count: int | None, device: torch.device | str, progress: bool, schema: TableSchema,
              validity: ValidityLimits, weights: str = "all", tag: Callable[[pd.DataFrame], pd.DataFrame] | None = None,
              stamp: dict | None = None, precision: str = "fp32", deadline: float | None = None,
              choice: str = "", refused: str = "", compile_mode: str | None = None, first_step: int = 0
              ) -> pd.DataFrame:
    """LLC of `instances` (which share a task and data) at every saved checkpoint from step `first_step` on (or
    `count` log-spaced ones of them), for each weight group of `weights` ("all,heads": the whole model and each head
    alone; see `weight_masks`), with each chain's loss trace. Rows: step, weights, then `LLCResult.to_frame()`'s
    columns with the resolution's (instance indexing `instances`; the chance loss is `uniform_guess_loss`, so
    `invalid` says when chains left the basin, and `limited` when the settings cannot see the basin), passed
    through `tag`, whose columns `schema` declares (`llc_schema.LLC_TRACE` and the tags).
    `validity` holds the limits the diagnostics and `invalid` judge the chains by (a study's rules). Each
    checkpoint is saved to `folder` as it finishes and reused while `stamp` (with the SGLD settings, the validity
    limits and runs) is unchanged. `choice` says why `sgld` (`study_settings.StudySettings.reason`; a column of every
    row), and `refused`, when the settings were chosen per model and none qualified, makes every estimate invalid
    with that reason. Losses are evaluated at `precision` (`headway.compute`), the sampler's compiled in
    `compile_mode` (None: eager). Once `deadline` (a `time.time()` value) has passed, no further checkpoint is
    started: TimeLimitReached, with every finished checkpoint kept for the next call."""
    if not instances:
        return pd.DataFrame()
    first = runs[instances[0]]
    if any(repr(runs[i].task) != repr(first.task) or runs[i].data_seed != first.data_seed for i in instances):
        raise ValueError("the traced instances must share their task and data")
    saved = [step for step in checkpoint_steps(run_dir) if step >= first_step]
    if not saved:
        raise ConfigError(f"llc_first_step = {first_step} is after every saved checkpoint of {run_dir.name} (the last "
                          f"is step {max(checkpoint_steps(run_dir), default=0)}); choose an earlier step")
    steps = saved if count is None else trace_steps(saved, count)
    model = load_model(run_dir, instances, device=device)
    pool_tokens, pool_targets = training_pool(first, len(instances), device)
    masks = weight_masks(model, weights)
    loss = run_loss(first.task, first.train.loss)
    chance = uniform_guess_loss(first, pool_targets)
    # traces from before the basin check lack chance_loss, those before the validity rules validity, and those before
    # the resolution check its ceiling and shortfall: each is traced again
    settings = {"sgld": sgld.stored_dict(), "runs": [runs[i].run_id for i in instances], "chance_loss": chance,
                "validity": validity.to_dict(),
                "resolution": {"rows": RESOLUTION_ROWS, "probes": PROBES, "steps": STEPS},
                **({"refused": refused} if refused else {}), **(stamp or {})}
    frames = []
    for step, path, cached in resumable_checkpoints(folder, SETTINGS, "step", settings, steps, schema, "LLC trace",
                                                    run_dir.name, deadline, progress):
        if cached is not None:
            frames.append(cached)
            continue
        model.load_instances(load_checkpoint(run_dir, step, runs, model), instances)
        parts = []
        anchor = anchor_loss(model, loss, pool_tokens, pool_targets, sgld, precision)  # one w* for every weight group
        for name, mask in masks.items():
            result = estimate_llc(model, loss, pool_tokens, pool_targets, sgld, mask=mask, init_loss=anchor,
                                  precision=precision, chance_loss=chance, validity=validity, resolve=True,
                                  resolution_rows=RESOLUTION_ROWS, compile_mode=compile_mode)
            frame = replace(result, refused=refused).to_frame().assign(choice=choice)
            frame["loss_trace"] = [chains.tolist() for chains in result.loss_trace]  # [chains][draws]
            frame.insert(0, "weights", name)
            frame.insert(0, "step", step)
            parts.append(frame)
        frame = pd.concat(parts, ignore_index=True)
        frame = tag(frame) if tag else frame
        layout.write_table(path, frame, schema)
        frames.append(frame)
    return pd.concat(frames, ignore_index=True)
