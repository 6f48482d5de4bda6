"""Adam / AdamW over a flat [E, P] parameter buffer, with a learning rate and weight decay per instance."""

from __future__ import annotations

import torch
from torch import Tensor

from headway.model.flat import FlatParameters


class EnsembleAdam:
    """Adam with per-instance hyper-parameters; matches `torch.optim.AdamW` (decoupled=True) or
    `torch.optim.Adam` with L2 `weight_decay` (decoupled=False) run on each instance alone.

    Weight decay applies only where `decay_mask` is 1 (weight matrices, not biases or gains).
    """

    def __init__(self, flat: FlatParameters, lr: Tensor, weight_decay: Tensor, decay_mask: Tensor,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8, decoupled: bool = True) -> None:
        self.flat = flat
        self.lr = lr.to(flat.data)
        self.weight_decay = weight_decay.to(flat.data)
        self.decay_mask = decay_mask.to(flat.data)
        self.beta1, self.beta2 = betas
        self.eps = eps
        self.decoupled = decoupled
        self.exp_avg = torch.zeros_like(flat.data)
        self.exp_avg_sq = torch.zeros_like(flat.data)
        self.steps_taken = 0

    @torch.no_grad()
    def step(self, lr_scale: float | Tensor, active: Tensor) -> None:
        """One update; instances where `active` is False are left exactly as they are."""
        grad, data = self.flat.grad, self.flat.data
        lr = (self.lr * lr_scale)[:, None]
        decay = self.weight_decay[:, None] * self.decay_mask[None, :]
        if not self.decoupled:
            grad = grad.add(data * decay)
        self.steps_taken += 1
        t = self.steps_taken
        exp_avg = torch.lerp(self.exp_avg, grad, 1 - self.beta1)
        exp_avg_sq = self.exp_avg_sq.mul(self.beta2).addcmul_(grad, grad, value=1 - self.beta2)
        denom = exp_avg_sq.sqrt().div_((1 - self.beta2**t) ** 0.5).add_(self.eps)
        update = exp_avg.div(denom).mul_(lr / (1 - self.beta1**t))
        new = data * (1 - lr * decay) if self.decoupled else data.clone()
        new.sub_(update)
        keep = active[:, None]
        data.copy_(torch.where(keep, new, data))
        self.exp_avg.copy_(torch.where(keep, exp_avg, self.exp_avg))
        self.exp_avg_sq.copy_(torch.where(keep, exp_avg_sq, self.exp_avg_sq))

    def state_tensors(self) -> dict[str, Tensor]:
        """Moment buffers for a resume checkpoint."""
        return {"exp_avg": self.exp_avg, "exp_avg_sq": self.exp_avg_sq}

    @torch.no_grad()
    def load_state(self, tensors: dict[str, Tensor], steps_taken: int) -> None:
        self.exp_avg.copy_(tensors["exp_avg"])
        self.exp_avg_sq.copy_(tensors["exp_avg_sq"])
        self.steps_taken = steps_taken
