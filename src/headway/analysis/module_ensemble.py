"""Copies of a plain `nn.Module` run as one batched model (torch.func), so the LLC estimator can sample
any model's chains the way it samples a headway ensemble's instances.

The copies' weights live in one [R, P] buffer with the layout of an ensemble's `FlatParameters`
(parameters in `named_parameters()` order, each flattened), so SGLD's whole-buffer step, the masks and
the diagnostics are the same code for both kinds of model. One call of `batched_loss` evaluates every
copy on its own batch with `vmap` over `functional_call`; buffers (e.g. BatchNorm statistics) are a
private copy taken when the copies are made, shared by them and never written back to the module.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from headway.errors import ConfigError
from headway.model.flat import FlatLayout

# loss_fn(model, inputs, targets) -> the scalar mean loss of one batch, as devinterp's `evaluate`.
ModuleLossFn = Callable[[Callable[..., Any], Tensor, Tensor], Tensor]

_VMAP_ADVICE = ("put the model in eval mode (dropout and BatchNorm statistics cannot run batched) and keep "
                "loss_fn free of .item() and of Python branches on tensor values")


class StackedParameters(FlatLayout):
    """R copies of a module's parameters as one [R, P] leaf tensor whose `.grad` autograd fills."""

    def __init__(self, names: list[str], shapes: list[tuple[int, ...]], data: Tensor) -> None:
        super().__init__(names, [(data.shape[0], *shape) for shape in shapes], data)
        self.data.requires_grad_(True)
        self.data.grad = torch.zeros_like(self.data)

    @property
    def grad(self) -> Tensor:
        """The gradient buffer [R, P] (autograd accumulates into it in place)."""
        return self.data.grad

    def zero_grad(self) -> None:
        """Zero the gradient buffer in place."""
        self.data.grad.zero_()

    def views(self) -> dict[str, Tensor]:
        """Every parameter as a [R, *shape] view of the buffer, by name."""
        return {name: self.data[:, offset : offset + size].view(shape)
                for name, shape, offset, size in zip(self.names, self.shapes, self.offsets, self.sizes)}


def plain_layout(module: nn.Module) -> FlatLayout:
    """The [1, P] layout of a plain module's parameters (a copy of its weights), in the same order as
    `ModuleEnsemble` stacks them, for building masks."""
    named = list(module.named_parameters())
    if not named:
        raise ConfigError(f"{type(module).__name__} has no parameters; the LLC needs some to sample")
    dtypes = {param.dtype for _, param in named}
    if len(dtypes) > 1:
        raise ConfigError(f"{type(module).__name__} mixes parameter dtypes {sorted(map(str, dtypes))}; "
                          "cast it to one dtype (e.g. model.float())")
    data = torch.cat([param.detach().reshape(1, -1) for _, param in named], dim=1)
    return FlatLayout([name for name, _ in named], [(1, *param.shape) for _, param in named], data)


class ModuleEnsemble(nn.Module):
    """R copies of `module`, each with its own weights (a row of `flat.data`), evaluated together by
    `batched_loss`; `module` itself is left untouched and only its structure and buffers are used."""

    def __init__(self, module: nn.Module, loss_fn: ModuleLossFn, weights: Tensor) -> None:
        super().__init__()
        layout = plain_layout(module)
        self.inner = [module]  # a list, so its parameters are not registered as this module's
        self.loss_fn = loss_fn
        self.flat = StackedParameters(layout.names, [shape[1:] for shape in layout.shapes], weights)
        self.n_instances = weights.shape[0]
        self.buffer_copies = {name: buffer.detach().clone() for name, buffer in module.named_buffers()}

    @classmethod
    def wrap(cls, module: nn.Module, loss_fn: ModuleLossFn) -> ModuleEnsemble:
        """One copy holding `module`'s current weights."""
        return cls(module, loss_fn, plain_layout(module).data.clone())

    def replicated(self, copies: int) -> ModuleEnsemble:
        """Every copy `copies` times, copy-major (row r·copies + c is copy c of row r)."""
        return ModuleEnsemble(self.inner[0], self.loss_fn,
                              self.flat.data.detach().repeat_interleave(copies, dim=0).clone())

    def batched_loss(self, inputs: Tensor, targets: Tensor) -> Tensor:
        """Loss [R] of every copy on its own batch (`inputs`, `targets` [R, B, ...])."""
        try:
            with _unfused_attention():
                loss = torch.func.vmap(self._loss)(self.flat.views(), inputs, targets)
        except ConfigError:
            raise
        except Exception as err:  # the user's module and loss: any failure becomes one readable line
            raise self._explain(err, inputs[0], targets[0]) from None
        if loss.shape != (self.n_instances,):
            raise ConfigError(f"loss_fn returned shape {tuple(loss.shape[1:])} per batch; for a plain module it "
                              "must return the batch's mean loss, a scalar")
        return loss

    def _loss(self, params: dict[str, Tensor], inputs: Tensor, targets: Tensor) -> Tensor:
        """loss_fn on one copy, the module called with `params` and the private buffers."""
        module = self.inner[0]

        def call(*args: Any, **kwargs: Any) -> Any:
            return torch.func.functional_call(module, {**params, **self.buffer_copies}, args, kwargs)

        return self.loss_fn(call, inputs, targets)

    def _explain(self, batched: Exception, inputs: Tensor, targets: Tensor) -> ConfigError:
        """Why the batched call failed: loss_fn fails on one copy alone (the inputs or the loss), or only
        when batched by vmap (randomness, buffer updates, .item())."""
        try:
            with torch.no_grad():
                self._loss({name: view[0] for name, view in self.flat.views().items()}, inputs, targets)
        except Exception as alone:
            return ConfigError(f"loss_fn(model, inputs, targets) fails on a batch of inputs {tuple(inputs.shape)} and "
                               f"targets {tuple(targets.shape)}: {error_line(alone)}")
        return ConfigError(f"the model and loss_fn cannot run as a batch of copies under torch.func.vmap "
                           f"({error_line(batched)}); {_VMAP_ADVICE}")


def error_line(err: Exception) -> str:
    """An exception as one line (its type and first message line), for a ConfigError that names it."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


@contextmanager
def _unfused_attention() -> Iterator[None]:
    """Turn off torch's fused inference kernels of nn.MultiheadAttention and nn.TransformerEncoderLayer:
    under vmap they cannot see that the weights need gradients and take a kernel without a derivative."""
    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def ensemble_loss(model: ModuleEnsemble, inputs: Tensor, targets: Tensor) -> Tensor:
    """The estimator's loss contract ([R] losses of an ensemble) for a `ModuleEnsemble`."""
    return model.batched_loss(inputs, targets)
