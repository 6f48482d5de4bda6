"""Copies of a plain `nn.Module` run as one batched model (torch.func), so the LLC estimator can sample
any model's chains the way it samples a headway ensemble's instances.

The copies' weights live in one [R, P] buffer with the layout of an ensemble's `FlatParameters`
(parameters in `named_parameters()` order, each flattened), so SGLD's whole-buffer step, the masks and
the diagnostics are the same code for both kinds of model. One call of `batched_loss` evaluates every
copy on its own batch with `vmap` over `functional_call`; buffers (e.g. BatchNorm statistics) are a
private copy taken when the copies are made and never written back to the module. In train mode (as
devinterp samples) each copy draws its own dropout masks (`vmap(randomness="different")`, from torch's
global generator, which `module_mode` seeds) and BatchNorm normalises by each copy's batch, updating a
per-call copy of the statistics that is then dropped, as it changes no train-mode output.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import Tensor, nn

from headway.errors import ConfigError
from headway.model.flat import FlatLayout

# loss_fn(model, inputs, targets) -> the scalar mean loss of one batch, as devinterp's `evaluate`.
ModuleLossFn = Callable[[nn.Module, Tensor, Tensor], Tensor]

_VMAP_ADVICE = "keep loss_fn free of .item(), of in-place changes to the module and of Python branches on tensor values"


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
        self.scored = [_Scored(module, loss_fn)]  # a list, as `inner`: the loss's module, built once

    @classmethod
    def wrap(cls, module: nn.Module, loss_fn: ModuleLossFn) -> ModuleEnsemble:
        """One copy holding `module`'s current weights."""
        return cls(module, loss_fn, plain_layout(module).data.clone())

    def replicated(self, copies: int) -> ModuleEnsemble:
        """Every copy `copies` times, copy-major (row r·copies + c is copy c of row r)."""
        return ModuleEnsemble(self.inner[0], self.loss_fn,
                              self.flat.data.detach().repeat_interleave(copies, dim=0).clone())

    def batched_loss(self, inputs: Tensor, targets: Tensor) -> Tensor:
        """Loss [R] of every copy on its own batch (`inputs`, `targets` [R, B, ...]); in train mode each copy
        updates a copy of the buffers of its own, made for this call."""
        training = self.inner[0].training and bool(self.buffer_copies)
        buffers = ({name: b.expand(self.n_instances, *b.shape).clone() for name, b in self.buffer_copies.items()}
                   if training else self.buffer_copies)
        try:
            with _unfused_attention():
                loss = torch.func.vmap(self._loss, in_dims=(0, 0 if training else None, 0, 0),
                                       randomness="different")(self.flat.views(), buffers, inputs, targets)
        except ConfigError:
            raise
        except Exception as err:  # the user's module and loss: any failure becomes one readable line
            raise self._explain(err, inputs[0], targets[0]) from None
        if loss.shape != (self.n_instances,):
            raise ConfigError(f"loss_fn returned shape {tuple(loss.shape[1:])} per batch; for a plain module it "
                              "must return the batch's mean loss, a scalar")
        return loss

    def _loss(self, params: dict[str, Tensor], buffers: dict[str, Tensor], inputs: Tensor, targets: Tensor) -> Tensor:
        """loss_fn on one copy: the module itself, its parameters and buffers swapped for `params` and `buffers`
        while the loss runs, so that a loss may call it or use its attributes and submodules (devinterp's
        `evaluate(model, batch)` receives the module)."""
        weights = {f"module.{name}": value for name, value in {**params, **buffers}.items()}
        return torch.func.functional_call(self.scored[0], weights, (inputs, targets))

    def _explain(self, batched: Exception, inputs: Tensor, targets: Tensor) -> ConfigError:
        """Why the batched call failed: loss_fn fails on one copy alone (the inputs or the loss), or only
        when batched by vmap (randomness, buffer updates, .item())."""
        try:
            with torch.no_grad():
                buffers = {name: b.clone() for name, b in self.buffer_copies.items()}
                self._loss({name: view[0] for name, view in self.flat.views().items()}, buffers, inputs, targets)
        except Exception as alone:
            return ConfigError(f"loss_fn(model, inputs, targets) fails on a batch of inputs {tuple(inputs.shape)} and "
                               f"targets {tuple(targets.shape)}: {error_line(alone)}")
        return ConfigError(f"the model and loss_fn cannot run as a batch of copies under torch.func.vmap "
                           f"({error_line(batched)}); {_VMAP_ADVICE}")


class _Scored(nn.Module):
    """A module and its loss as one module, whose forward is the loss: `torch.func.functional_call` on it swaps a
    copy's weights into the module for as long as the loss runs."""

    def __init__(self, module: nn.Module, loss_fn: ModuleLossFn) -> None:
        super().__init__()
        self.module = module
        self.loss_fn = loss_fn

    def forward(self, inputs: Tensor, targets: Tensor) -> Tensor:
        return self.loss_fn(self.module, inputs, targets)


@contextmanager
def module_mode(module: nn.Module, train: bool | None, seed: int) -> Iterator[None]:
    """Within the block `module` is in train mode (True: dropout on, BatchNorm on batch statistics, as devinterp
    samples), eval mode (False) or as it is (None), and torch's global generator, which dropout under vmap
    draws from, starts from `seed`; afterwards both are as they were."""
    before = {sub: sub.training for sub in module.modules()}
    devices = [p.device for p in module.parameters() if p.device.type == "cuda"][:1]
    try:
        with torch.random.fork_rng(devices=devices):
            torch.manual_seed(seed)
            if train is not None:
                module.train(train)
            yield
    finally:
        for sub, training in before.items():
            sub.training = training


def devinterp_loss(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as the estimator's loss_fn(model, inputs, targets): a function of two positional parameters is
    devinterp's `evaluate(model, batch)`, called with batch = (inputs, targets), whose result may be the loss,
    a (loss, ...) tuple, a dict with "loss" or an object with `.loss`; any other `fn` is returned as it is."""
    try:
        parameters = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # a builtin or C callable: take it as loss_fn
        return fn
    kinds = [p.kind for p in parameters]
    positional = [k for k in kinds if k in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    if len(positional) != 2 or inspect.Parameter.VAR_POSITIONAL in kinds:
        return fn

    def loss_fn(model: Any, inputs: Tensor, targets: Tensor) -> Tensor:
        return _loss_of(fn(model, (inputs, targets)))

    return loss_fn


def _loss_of(result: Any) -> Tensor:
    """The loss in what a devinterp-style evaluate returned."""
    if isinstance(result, Tensor):
        return result
    if isinstance(result, tuple | list) and result and isinstance(result[0], Tensor):
        return result[0]
    if isinstance(result, dict) and isinstance(result.get("loss"), Tensor):
        return result["loss"]
    if isinstance(getattr(result, "loss", None), Tensor):
        return result.loss
    raise ConfigError(f"evaluate(model, batch) returned {type(result).__name__}; return the loss (a tensor), a "
                      "(loss, ...) tuple, a dict with 'loss' or an object with .loss, as devinterp takes")


def error_line(err: Exception) -> str:
    """An exception as one line (its type and first message line), for a ConfigError that names it."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


@contextmanager
def _unfused_attention() -> Iterator[None]:
    """Turn off torch's fused inference kernels of nn.MultiheadAttention and nn.TransformerEncoderLayer (under vmap
    they cannot see that the weights need gradients and take a kernel without a derivative), and run
    `scaled_dot_product_attention` as its math (matmul and softmax), which vmap batches over the copies: the fused
    CPU kernels have no batching rule, so vmap would call them once per copy, with a warning each time."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    before = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        with sdpa_kernel(SDPBackend.MATH):
            yield
    finally:
        torch.backends.mha.set_fastpath_enabled(before)


def ensemble_loss(model: ModuleEnsemble, inputs: Tensor, targets: Tensor) -> Tensor:
    """The estimator's loss contract ([R] losses of an ensemble) for a `ModuleEnsemble`."""
    return model.batched_loss(inputs, targets)
