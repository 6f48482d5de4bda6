"""Adam / AdamW over a flat [E, P] parameter buffer, with a learning rate and weight decay per instance."""

from __future__ import annotations

import torch
from torch import Tensor

from headway.model.flat import FlatParameters
from headway.compute import maybe_compiled


def adam_update(data: Tensor, grad: Tensor, exp_avg: Tensor, exp_avg_sq: Tensor, lr: Tensor, decay: Tensor,
                active: Tensor, step: Tensor, beta1: float, beta2: float, eps: float, decoupled: bool) -> None:
    """One Adam(W) update of every row of `data` in place; rows where `active` is False keep their
    weights and moments exactly (their gradient, which may not be finite, is read as 0 and their
    learning rate and moment decay as 0). `lr` [E, 1] holds each row's scheduled rate, `step` the
    update count after this update (a 0-d float64 tensor on the device, so no host sync is needed)."""
    keep = active[:, None]
    if not decoupled:
        grad = grad + data * decay
    grad = torch.where(keep, grad, 0.0)
    lr = torch.where(keep, lr, 0.0)
    exp_avg.lerp_(grad, torch.where(keep, 1 - beta1, 0.0))
    exp_avg_sq.mul_(torch.where(keep, beta2, 1.0)).addcmul_(grad, grad, value=1 - beta2)
    denom = exp_avg_sq.sqrt().div_((1 - beta2**step) ** 0.5).add_(eps)
    update = exp_avg.div(denom).mul_(lr / (1 - beta1**step))
    if decoupled:
        data.mul_(1 - lr * decay)
    data.sub_(update)


class EnsembleAdam:
    """Adam with per-instance hyper-parameters; matches `torch.optim.AdamW` (decoupled=True) or
    `torch.optim.Adam` with L2 `weight_decay` (decoupled=False) run on each instance alone.

    Weight decay applies only where `decay_mask` is 1 (weight matrices, not biases or gains). The
    update is a handful of whole-buffer ops, compiled into one kernel or a few with `compile_mode`
    (a `torch.compile` mode; None: eager).
    """

    def __init__(self, flat: FlatParameters, lr: Tensor, weight_decay: Tensor, decay_mask: Tensor,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, decoupled: bool = True,
                 compile_mode: str | None = None) -> None:
        self.flat = flat
        self.lr = lr.to(flat.data)[:, None]
        self.decay = weight_decay.to(flat.data)[:, None] * decay_mask.to(flat.data)[None, :]
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.decoupled = decoupled
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.steps_taken = 0
        self._step = torch.zeros((), dtype=torch.float64, device=flat.data.device)
        self._update = maybe_compiled(adam_update, compile_mode, "optimiser update")

    @torch.no_grad()
    def step(self, lr_scale: float, active: Tensor) -> None:
        """One update; instances where `active` is False are left exactly as they are."""
        self.steps_taken += 1
        self._step += 1
        self._update(self.flat.data, self.flat.grad, self.exp_avg, self.exp_avg_sq, self.lr * lr_scale, self.decay,
                     active, self._step, self.beta1, self.beta2, self.eps, self.decoupled)

    def state_tensors(self) -> dict[str, Tensor]:
        """Moment buffers for a resume checkpoint."""
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    @torch.no_grad()
    def load_state(self, tensors: dict[str, Tensor], steps_taken: int) -> None:
        """Moments and the update count of a resume checkpoint."""
        self.exp_avg.copy_(tensors["exp_avg"])
        self.exp_avg_sq.copy_(tensors["exp_avg_sq"])
        self.steps_taken = steps_taken
        self._step.fill_(steps_taken)
