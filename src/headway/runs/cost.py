"""What a run costs to train, for dry runs and projections."""

from __future__ import annotations

from headway.recipe import EVAL_CHUNK
from headway.runs.config import RunConfig


def training_flops(run: RunConfig) -> float:
    """Approximate floating-point operations to train `run`: forward and backward (3× forward) of the
    projections, MLP and attention products of every layer, for every token of every step."""
    d, tokens, n_ctx = run.model.d_model, run.train.batch_size * run.task.n_ctx, run.task.n_ctx
    per_layer = 2 * tokens * (4 * d * run.model.heads * run.model.head_dim + 2 * d * run.model.mlp_dim) \
        + 4 * tokens * n_ctx * run.model.heads * run.model.head_dim
    return 3.0 * run.model.layers * per_layer * run.train.steps

PROCESS_BYTES = 512 * 2**20  # Python, torch and headway loaded, before any tensor
MARGIN = 1.25  # measured peaks reached 1.09× the sum of the terms below (docs/cluster.md)


def training_memory(runs: list[RunConfig]) -> int:
    """Approximate peak bytes of training `runs` as one ensemble, for a cluster to reserve: the process,
    weights with gradients, Adam moments and the copies a checkpoint makes (6 floats per parameter),
    activations kept for the backward pass, those of one evaluation chunk, and the token pools (int64
    tokens and targets) of each data seed."""
    run, n = runs[0], len(runs)
    m, task = run.model, run.task
    d, h, dh, mlp, n_ctx = m.d_model, m.heads, m.head_dim, m.mlp_dim, task.n_ctx
    params = task.d_vocab * d + n_ctx * d + m.layers * (4 * h * dh * d + 2 * d * mlp + mlp + 5 * d) + d * task.d_out
    kept = m.layers * (4 * d + 4 * h * dh + 3 * h * n_ctx + 3 * mlp) + 3 * task.d_out  # floats per token
    evaluated = 6 * d + 2 * h * n_ctx + mlp + task.d_out
    floats = 6 * params + n_ctx * (run.train.batch_size * kept + min(EVAL_CHUNK, run.train.val_size) * evaluated)
    pools = len({r.data_seed for r in runs}) * (run.train.train_size + run.train.val_size) * n_ctx * 8 * 2
    return int(MARGIN * (PROCESS_BYTES + n * 4 * floats + pools))


# Assumed sustained training throughput of one H100 at bf16 for these small-model ensembles: about 30% of
# its 989 TFLOP/s dense bf16 peak. An assumption for sizing plans, not a measurement:
# benchmarks/bench_training.py measures the real number.
ASSUMED_GPU_FLOPS = 100e12


def example_flops(run: RunConfig) -> float:
    """Approximate FLOPs of one forward and backward pass over one example of `run`."""
    return training_flops(run) / (run.train.steps * run.train.batch_size)


def sgld_flops(run: RunConfig, chains: int, steps: int, batch_size: int, pool: int = 0) -> float:
    """Approximate FLOPs of one LLC estimate of `run` at one checkpoint: `chains` × `steps` SGLD steps of
    `batch_size` examples (forward and backward), plus a forward pass over `pool` examples for L(w*)."""
    return example_flops(run) * (chains * steps * batch_size + pool / 3)
