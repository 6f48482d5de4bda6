"""One contiguous [E, P] buffer behind every parameter and gradient of an ensemble.

Parameters stay ordinary `nn.Parameter`s with TransformerLens shapes, but each is a view into
`FlatParameters.data`, and each `.grad` a view into `FlatParameters.grad`. The optimiser step,
per-instance gradient norms, clipping and divergence checks are then a few whole-buffer ops,
whatever the number of parameter tensors.
"""

from __future__ import annotations

import math
import warnings

import torch
from torch import nn

# Gradients accumulate in place into the views below; torch notes that their strides (instance
# stride P) differ from a freshly allocated gradient's, which is expected here and harmless.
warnings.filterwarnings("ignore", message="grad and param do not obey the gradient layout contract")


class FlatLayout:
    """Where each named parameter (shape [R, ...]) lives in the columns of an [R, P] buffer."""

    def __init__(self, names: list[str], shapes: list[tuple[int, ...]], data: torch.Tensor) -> None:
        self.names = names
        self.shapes = shapes
        self.sizes = [math.prod(shape[1:]) for shape in shapes]
        self.offsets = [sum(self.sizes[:i]) for i in range(len(self.sizes))]
        self.data = data

    def mask(self, predicate) -> torch.Tensor:
        """A [P] float mask that is 1 on the columns of parameters whose name satisfies `predicate`."""
        out = torch.zeros(self.data.shape[1], dtype=self.data.dtype, device=self.data.device)
        for name, offset, size in zip(self.names, self.offsets, self.sizes):
            if predicate(name):
                out[offset : offset + size] = 1.0
        return out


class FlatParameters(FlatLayout):
    """Moves a module's parameters (leading instance axis E) into one [E, P] buffer."""

    def __init__(self, module: nn.Module, n_instances: int) -> None:
        named = list(module.named_parameters())
        first = named[0][1]
        total = sum(p[0].numel() for _, p in named)
        super().__init__([name for name, _ in named], [tuple(p.shape) for _, p in named],
                         torch.empty(n_instances, total, dtype=first.dtype, device=first.device))
        self.grad = torch.zeros_like(self.data)
        for (name, param), offset, size in zip(named, self.offsets, self.sizes):
            if param.shape[0] != n_instances:
                raise ValueError(f"parameter {name} has no instance axis of size {n_instances}")
            self.data[:, offset : offset + size].copy_(param.detach().reshape(n_instances, size))
            view = nn.Parameter(self.data[:, offset : offset + size].view(param.shape))
            view.grad = self.grad[:, offset : offset + size].view(param.shape)
            owner_name, _, leaf = name.rpartition(".")
            owner = module.get_submodule(owner_name) if owner_name else module
            setattr(owner, leaf, view)

    def zero_grad(self) -> None:
        """Zero the gradient buffer in place (the parameter `.grad` views must stay attached)."""
        self.grad.zero_()
