"""Checked inputs for the sampler: the pool's shapes, a plain module wrapped as a 1-instance ensemble,
the loss at the chosen precision, and the loss a `loss_fn` returns."""

from __future__ import annotations

from torch import Tensor, nn

from headway.analysis.llc.masks import parameter_mask
from headway.analysis.llc.replication import is_ensemble
from headway.analysis.llc.settings import LossFn, SGLDSettings
from headway.analysis.llc.module_ensemble import ModuleEnsemble, ModuleLossFn, devinterp_loss, ensemble_loss
from headway.compute import ComputeSettings, at_precision
from headway.errors import ConfigError


def prepared(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
             settings: SGLDSettings, mask: Tensor | None,
             precision: str) -> tuple[nn.Module, LossFn, Tensor, Tensor, Tensor | None]:
    """The checked ensemble, loss (at `precision`) and pool on the model's device (a plain module wrapped
    as a 1-instance `ModuleEnsemble`; devinterp's `evaluate(model, batch)` taken as the loss), and a plain
    module's trainable-parameter mask."""
    trainable = None
    loss_fn = devinterp_loss(loss_fn)
    if not is_ensemble(model):
        _check_pool(tokens, targets, 1, "[examples, ...] (a plain module's pool)")
        trainable = _trainable(model)
        model, loss_fn = ModuleEnsemble.wrap(model, loss_fn), ensemble_loss
        tokens, targets = tokens.unsqueeze(0), targets.unsqueeze(0)
    _check_inputs(model, tokens, targets, settings, mask)
    device = model.flat.data.device
    loss_fn = at_precision(loss_fn, ComputeSettings(precision=precision).resolved_precision(device), device)
    return model, loss_fn, tokens.to(device), targets.to(device), trainable


def _trainable(module: nn.Module) -> Tensor | None:
    """The mask of a plain module's parameters that require grad, None when all do: like devinterp,
    SGLD leaves frozen parameters where they are."""
    names = [name for name, param in module.named_parameters() if param.requires_grad]
    if len(names) == len(list(module.parameters())):
        return None
    if not names:
        raise ConfigError(f"every parameter of {type(module).__name__} has requires_grad=False; SGLD moves only "
                          "trainable parameters")
    return parameter_mask(module, names)


def checked_loss(loss: Tensor, rows: int) -> Tensor:
    """`loss` when it holds one loss per row [rows]; refused otherwise, naming its shape."""
    if loss.shape != (rows,):
        raise ConfigError(f"loss_fn returned shape {tuple(loss.shape)}; it must return one loss per instance, "
                          f"shape ({rows},)")
    return loss


def _check_pool(tokens: Tensor, targets: Tensor, axes: int, shape: str) -> None:
    """Refuse a pool that is not two tensors with at least `axes` axes (`shape` says which)."""
    for name, value in (("tokens", tokens), ("targets", targets)):
        if not isinstance(value, Tensor) or value.dim() < axes:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ConfigError(f"{name} is {got}; it must be a tensor {shape}")


def _check_inputs(model: nn.Module, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                  mask: Tensor | None) -> None:
    _check_pool(tokens, targets, 2, "[instances, examples, ...]")
    e, p = model.flat.data.shape
    if tokens.shape[0] != e or targets.shape[0] != e:
        raise ConfigError(f"tokens {tuple(tokens.shape)} and targets {tuple(targets.shape)} must have the "
                          f"model's {e} instances on axis 0")
    if tokens.shape[1] != targets.shape[1]:
        raise ConfigError(f"tokens hold {tokens.shape[1]} examples per instance but targets {targets.shape[1]}")
    if settings.batch_size > tokens.shape[1]:
        raise ConfigError(f"batch_size = {settings.batch_size} is invalid; use at most the pool size "
                          f"{tokens.shape[1]}")
    if mask is not None and mask.shape != (p,):
        raise ConfigError(f"mask has shape {tuple(mask.shape)}; it must be ({p},), one entry per parameter")
