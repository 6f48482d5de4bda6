"""What a run costs to train, for dry runs and projections."""

from __future__ import annotations

from headway.compute import TrainingWork
from headway.recipe import EVAL_CHUNK
from headway.runs.config import RunConfig


def training_flops(run: RunConfig) -> float:
    """Approximate floating-point operations to train `run`: forward and backward (3× forward) of the
    projections, MLP and attention products of every layer, for every token of every step."""
    d, tokens, n_ctx = run.model.d_model, run.train.batch_size * run.task.n_ctx, run.task.n_ctx
    per_layer = 2 * tokens * (4 * d * run.model.heads * run.model.head_dim + 2 * d * run.model.mlp_dim) \
        + 4 * tokens * n_ctx * run.model.heads * run.model.head_dim
    return 3.0 * run.model.layers * per_layer * run.train.steps


def training_work(runs: list[RunConfig]) -> TrainingWork:
    """What training `runs` as one ensemble asks of the device: its steps and the FLOPs of one step of all of them,
    from which `--compile auto` decides whether compiling the CPU step repays itself."""
    steps = runs[0].train.steps
    return TrainingWork(steps, len(runs) * training_flops(runs[0]) / max(steps, 1))


PROCESS_BYTES = 512 * 2**20  # Python, torch and headway loaded, before any tensor
MARGIN = 1.25  # measured peaks reached 1.09× the sum of the terms below (docs/cluster.md)


def training_memory(runs: list[RunConfig]) -> int:
    """Approximate peak bytes of training `runs` as one ensemble, for a cluster to reserve: the process,
    weights with gradients, Adam moments and the copies a checkpoint makes (6 floats per parameter),
    activations kept for the backward pass, those of one evaluation chunk, and the token pools (int64
    tokens and targets) of each data seed."""
    return int(MARGIN * (PROCESS_BYTES + sum(training_memory_terms(runs).values())))


def training_memory_terms(runs: list[RunConfig]) -> dict[str, int]:
    """The parts of `training_memory` (before its margin and the process) by the setting that drives each:
    `model` (weights, gradients, moments: the shape), `batch` (activations of a training step), `evaluation`
    (of one evaluation chunk) and `pools` (the training pools and validation sets)."""
    run, n = runs[0], len(runs)
    m, task = run.model, run.task
    d, h, dh, mlp, n_ctx = m.d_model, m.heads, m.head_dim, m.mlp_dim, task.n_ctx
    params = task.d_vocab * d + n_ctx * d + m.layers * (4 * h * dh * d + 2 * d * mlp + mlp + 5 * d) + d * task.d_out
    kept = m.layers * (4 * d + 4 * h * dh + 3 * h * n_ctx + 3 * mlp) + 3 * task.d_out  # floats per token
    evaluated = 6 * d + 2 * h * n_ctx + mlp + task.d_out
    pools = len({r.data_seed for r in runs}) * (run.train.train_size + run.train.val_size) * n_ctx * 8 * 2
    return {"model": n * 4 * 6 * params, "batch": n * 4 * n_ctx * run.train.batch_size * kept,
            "evaluation": n * 4 * n_ctx * min(EVAL_CHUNK, run.train.val_size) * evaluated, "pools": pools}


# Measured on one H100 (torch 2.11, bf16 autocast, eager step; benchmarks/RESULTS.md "GPU: one H100"):
# an ensemble of 64 paper-shape models trains at 29.7e12 training_flops units per second (FlopCounterMode
# counted 19.3 TFLOP/s, and training_flops counts 1.54x what it counts at that shape), and a step of a small
# ensemble (8 models, width 128, 2-3 layers) is bound by kernel latency: 8.0-15.8 ms whatever its FLOPs,
# fitted as GPU_STEP_BASE_S + GPU_STEP_PER_LAYER_S per layer (mean 9.2 ms at 2 layers, 12.1 ms at 3).
GPU_TRAINING_FLOPS = 29.7e12
GPU_STEP_BASE_S = 3.4e-3
GPU_STEP_PER_LAYER_S = 2.9e-3
# A step under each `--compile` mode as a fraction of the eager one: measured on one H200 (torch 2.11, bf16) on an
# 8-run, three-layer ensemble of a depth cell, 30 bare trainer steps each (benchmarks/bench_step_latency.py): eager
# 13.28 ms, compiled 7.61 ms (after 8.9 s of warm-up), CUDA graphs 6.66 ms (after 21.9 s), below even the eager
# FLOP term of that ensemble (8.5 ms), so compilation raises the FLOP rate too and the fraction scales the whole
# step. Inside a study the evaluations and checkpoints between steps took compiled steps back to about the eager
# projection (docs/performance.md, "On a lent GPU"), so study projections keep the eager step.
GPU_STEP_FRACTION = {"off": 1.0, "on": 7.61 / 13.28, "graphs": 6.66 / 13.28}


def gpu_step_seconds(run: RunConfig, ensemble_size: int, compile_mode: str = "off") -> float:
    """Projected seconds of one bare training step of an ensemble of `ensemble_size` runs like `run` on one
    H100: the measured latency floor of its layers, or its FLOPs at the measured rate, whichever is larger,
    times the measured fraction of `compile_mode` (off, on, graphs)."""
    floor = GPU_STEP_BASE_S + GPU_STEP_PER_LAYER_S * run.model.layers
    eager = max(floor, ensemble_size * training_flops(run) / run.train.steps / GPU_TRAINING_FLOPS)
    return GPU_STEP_FRACTION[compile_mode] * eager


def gpu_training_seconds(ensembles: list[list[RunConfig]]) -> float:
    """Projected seconds to train `ensembles` (each a list of runs of one shape) one after another on one H100."""
    return sum(members[0].train.steps * gpu_step_seconds(members[0], len(members)) for members in ensembles)


def example_flops(run: RunConfig) -> float:
    """Approximate FLOPs of one forward and backward pass over one example of `run`."""
    return training_flops(run) / (run.train.steps * run.train.batch_size)


def sgld_flops(run: RunConfig, chains: int, steps: int, batch_size: int, pool: int = 0) -> float:
    """Approximate FLOPs of one LLC estimate of `run` at one checkpoint: `chains` × `steps` SGLD steps of
    `batch_size` examples (forward and backward), plus a forward pass over `pool` examples for L(w*)."""
    return example_flops(run) * (chains * steps * batch_size + pool / 3)
