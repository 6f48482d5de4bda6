"""Named scales: flat settings layered over the defaults, per task.

The run defaults are the retrieval paper's recipe; the sorting recipe (docs/sorting-task.md) is
written out here in full because it differs in the model, the optimiser and the loss.
"""

from __future__ import annotations

from typing import Any

from headway.errors import ConfigError

# List sorting: 1 layer, attention-only, 2 heads of width 48 in d_model 96, LayerNorm; Adam (L2 decay
# 0.005, on weight matrices) with lr 1e-3 falling linearly to 1e-4, batch 512, cross-entropy,
# a fixed pool of 150k lists and a 10k validation set, dense log-spaced checkpoints.
SORTING_RECIPE: dict[str, Any] = {
    "task": "sorting", "layers": 1, "heads": 2, "d_model": 96, "d_head": 48, "d_mlp": 0, "layernorm": True,
    "optimizer": "adam", "lr": 1e-3, "schedule": "linear", "final_lr_fraction": 0.1, "weight_decay": 0.005,
    "batch_size": 512, "loss": "cross_entropy", "train_size": 150_000, "val_size": 10_000, "steps": 20_000,
    "eval_every": 100, "checkpoint_every": 2000, "log_checkpoints": 40,
}

SCALES: dict[str, dict[str, dict[str, Any]]] = {
    "retrieval": {
        # The paper: 8 heads, width 128, 10k steps, batch 512, 2^20 examples, Adam 1e-3, wd 0.1, MSE.
        "paper": {},
        # Minutes on a 2-core laptop: narrower, fewer steps, a smaller pool.
        "cpu": {"vocab": 16, "chains": 4, "heads": 4, "d_model": 64, "batch_size": 128, "steps": 1500,
                "train_size": 2**16, "val_size": 1024, "eval_every": 100, "checkpoint_every": 500,
                "log_checkpoints": 10},
    },
    "sorting": {
        "paper": SORTING_RECIPE,
        # The same model and recipe; fewer steps, a smaller batch and validation set.
        "cpu": {**SORTING_RECIPE, "batch_size": 128, "steps": 1500, "val_size": 2000, "eval_every": 50,
                "checkpoint_every": 500, "log_checkpoints": 16},
    },
}


def scale_settings(name: str, task: str = "retrieval") -> dict[str, Any]:
    """The flat settings of a named scale for `task`."""
    if task not in SCALES:
        raise ConfigError(f"task = {task!r} is unknown; choose one of {', '.join(SCALES)}")
    if name not in SCALES[task]:
        raise ConfigError(f"scale = {name!r} is unknown; choose one of {', '.join(SCALES[task])}")
    return dict(SCALES[task][name])
