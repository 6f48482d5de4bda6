"""Named scales: flat settings layered over the defaults (which are the paper's recipe)."""

from __future__ import annotations

from typing import Any

from headway.errors import ConfigError

SCALES: dict[str, dict[str, Any]] = {
    # The paper: 8 heads, width 128, 10k steps, batch 512, 2^20 examples, Adam 1e-3, wd 0.1, MSE.
    "paper": {},
    # Minutes on a 2-core laptop: narrower, fewer steps, a smaller pool.
    "cpu": {"vocab": 16, "chains": 4, "heads": 4, "d_model": 64, "batch_size": 128, "steps": 1500,
            "train_size": 2**16, "val_size": 1024, "eval_every": 100, "checkpoint_every": 500,
            "log_checkpoints": 10},
}


def scale_settings(name: str) -> dict[str, Any]:
    """The flat settings of a named scale."""
    if name not in SCALES:
        raise ConfigError(f"scale = {name!r} is unknown; choose one of {', '.join(SCALES)}")
    return dict(SCALES[name])
