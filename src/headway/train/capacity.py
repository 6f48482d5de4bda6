"""How many runs of one shape fit in one ensemble on a device: measured, not guessed.

`headway.runs.cost.training_memory` is an analytic estimate, good enough for a cluster to reserve
memory but not to decide how far a GPU can be filled: allocator rounding, precision, kernels' own
buffers and the task's data all move the true peak. So the capacity of a shape is measured: a real
`EnsembleTrainer.setup()`, one `train_step` and one evaluation chunk run for two small ensemble
sizes (`PROBE_SIZES`), their peak bytes are fitted as base + per_instance·E
(`headway.execution.memory`), and the largest E whose predicted peak fits the device's budget is the
capacity. Measurements are cached per shape and device for the life of the process, and are only
taken for a group whose analytic estimate reaches `MEASURE_ABOVE` of the budget, so a grid that
plainly fits (every CPU test, most CPU sweeps) never pays for them.
"""

from __future__ import annotations

import dataclasses
import json
import tempfile
from collections.abc import Callable

import torch

from headway.compute import ComputeSettings, precision_context
from headway.execution.memory import Footprint, check_fits, fit_footprint, memory_budget, peak_bytes
from headway.limits import MAX_RUNS, MAX_SEED
from headway.recipe import EVAL_CHUNK
from headway.runs.config import RunConfig
from headway.runs.cost import MARGIN, PROCESS_BYTES, training_memory, training_memory_terms
from headway.settings import check_int
from headway.tasks.objective import evaluate
from headway.train.trainer import EnsembleTrainer

PROBE_SIZES = (1, 2)  # ensemble sizes whose peaks are measured
MEASURE_ABOVE = 0.25  # measure a group only when its analytic estimate reaches this fraction of the budget

_footprints: dict[tuple[str, str, bool, str], Footprint] = {}


# What to lower for each part of the training memory (`headway.runs.cost.training_memory_terms`).
LOWER = {"model": "d_model, d_mlp, heads, layers or vocab", "batch": "batch_size", "evaluation": "val_size",
         "pools": "train_size or val_size"}


def check_max_ensemble(value: int | None) -> int | None:
    """A user's cap on the runs per ensemble: None (the measured capacity) or a whole number in 1..MAX_RUNS."""
    return None if value is None else check_int("max_ensemble", value, 1, MAX_RUNS)


def check_training_fits(runs: list[RunConfig], device: torch.device | str) -> None:
    """Refuse, before anything is allocated, runs one of which needs more memory to train alone than `device`
    can give (`training_memory`, analytic): an ensemble too large is split to fit, a single run cannot be."""
    shapes = {json.dumps(run.ensemble_key(), sort_keys=True): run for run in runs}
    for run in shapes.values():
        terms = training_memory_terms([run])
        part = max(terms, key=terms.__getitem__)
        check_fits(training_memory([run]), device, f"training one run like {run.run_id} (its {part}: "
                   f"{terms[part] / 2**30:.1f} GiB)", LOWER[part])


def probe_runs(run: RunConfig, size: int, shared_data: bool) -> list[RunConfig]:
    """`size` runs of the shape of `run` (seeds counted up from its own), sharing its data seed or not."""
    return [dataclasses.replace(run, seed=(run.seed + i) % (MAX_SEED + 1),
                                data_seed=(run.data_seed + (0 if shared_data else i)) % (MAX_SEED + 1))
            for i in range(size)]


def one_step(runs: list[RunConfig], device: torch.device, precision: str, attention_kernel: str = "auto") -> None:
    """What an ensemble of `runs` holds at its peak: setup, one training step, one evaluation chunk."""
    with tempfile.TemporaryDirectory() as folder:
        trainer = EnsembleTrainer(runs, folder, device, progress=False,
                                  compute=ComputeSettings(precision=precision, compile="off",
                                                          attention_kernel=attention_kernel))
        data, model, optim, state = trainer.setup()
        trainer.train_step(model, data, optim, state, 0)
        tokens, targets = data.val_tokens[:, :EVAL_CHUNK], data.val_targets[:, :EVAL_CHUNK]
        with torch.no_grad(), precision_context(trainer.precision, device):
            evaluate(model, tokens, targets, trainer.vocab, trainer.cfg.loss, positions=trainer.task.readout_positions)


def training_footprint(run: RunConfig, device: torch.device | str, shared_data: bool = True,
                       compute: ComputeSettings | None = None) -> Footprint:
    """Measured peak bytes of training an ensemble of E runs of `run`'s shape on `device`, as base +
    per_instance·E; members share one data seed when `shared_data` (else each has its own pool).
    Measured once per shape, data sharing, precision, attention kernel and device in this process."""
    device = torch.device(device)
    compute = compute or ComputeSettings()
    precision = compute.resolved_precision(device)
    key = (json.dumps(run.ensemble_key(), sort_keys=True), str(device), shared_data, precision, compute.attention_kernel)
    if key not in _footprints:
        peaks = [peak_bytes(lambda size=size: one_step(probe_runs(run, size, shared_data), device, precision,
                                                       compute.attention_kernel), device)
                 for size in PROBE_SIZES]
        _footprints[key] = fit_footprint(list(PROBE_SIZES), peaks)
    return _footprints[key]


def ensemble_capacity(runs: list[RunConfig], device: torch.device | str, compute: ComputeSettings | None = None,
                      budget: int | None = None) -> int:
    """The most runs like `runs` (one shape) that one ensemble may hold on `device` within `budget` bytes
    (default: `memory_budget(device)`); at least 1."""
    budget = memory_budget(device) if budget is None else budget
    footprint = training_footprint(runs[0], device, len({run.data_seed for run in runs}) == 1, compute)
    return max(1, footprint.capacity(budget))


def ensemble_limit(device: torch.device | str | None, max_ensemble: int | None = None,
                   compute: ComputeSettings | None = None) -> Callable[[list[RunConfig]], int | None]:
    """The cap `group_runs(limit=...)` puts on a group of one shape: `max_ensemble` when given; else, with a
    `device`, the measured capacity of a group whose analytic estimate could not plainly fit; else none."""
    max_ensemble = check_max_ensemble(max_ensemble)

    def limit(members: list[RunConfig]) -> int | None:
        if max_ensemble is not None or device is None:
            return max_ensemble
        budget = memory_budget(device)
        if training_memory(members) - MARGIN * PROCESS_BYTES < MEASURE_ABOVE * budget:  # the process is resident
            return None
        return ensemble_capacity(members, device, compute, budget)

    return limit
