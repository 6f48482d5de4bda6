"""Learning-rate schedules: the multiplier applied to each instance's base learning rate."""

from __future__ import annotations

import math

from headway.recipe import SCHEDULES


def lr_multiplier(kind: str, step: int, total_steps: int, warmup_steps: int = 0,
                  final_fraction: float = 0.0) -> float:
    """Multiplier for the update that takes the model from `step` to `step + 1`.

    Linear warm-up from 0 over `warmup_steps`, then constant, or a linear / cosine decay that
    reaches `final_fraction` of the base rate at the last step.
    """
    if warmup_steps and step < warmup_steps:
        return (step + 1) / warmup_steps
    if kind == "constant":
        return 1.0
    span = max(total_steps - 1 - warmup_steps, 1)
    progress = min(max(step - warmup_steps, 0) / span, 1.0)
    if kind == "linear":
        return 1.0 - (1.0 - final_fraction) * progress
    if kind == "cosine":
        return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"schedule = {kind!r} is unknown; choose one of {', '.join(SCHEDULES)}")
