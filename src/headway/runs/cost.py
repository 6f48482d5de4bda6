"""What a run costs to train, for dry runs and projections."""

from __future__ import annotations

from headway.runs.config import RunConfig


def training_flops(run: RunConfig) -> float:
    """Approximate floating-point operations to train `run`: forward and backward (3× forward) of the
    projections, MLP and attention products of every layer, for every token of every step."""
    d, tokens, n_ctx = run.model.d_model, run.train.batch_size * run.task.n_ctx, run.task.n_ctx
    per_layer = 2 * tokens * (4 * d * run.model.heads * run.model.head_dim + 2 * d * run.model.mlp_dim) \
        + 4 * tokens * n_ctx * run.model.heads * run.model.head_dim
    return 3.0 * run.model.layers * per_layer * run.train.steps
