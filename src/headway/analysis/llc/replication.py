"""Models as the sampler sees them: a flat [rows, P] weight buffer, and copies of an ensemble's instances
as further rows (one per chain)."""

from __future__ import annotations

import copy

import torch
from torch import nn

from headway.analysis.llc.module_ensemble import ModuleEnsemble, plain_layout
from headway.model.flat import FlatLayout, FlatParameters
from headway.settings import check_int


def is_ensemble(model: nn.Module) -> bool:
    """Whether `model` keeps its instances' weights in a flat [E, P] buffer (a headway ensemble, or a
    `ModuleEnsemble`); any other module is sampled as one plain model."""
    return isinstance(getattr(model, "flat", None), FlatLayout)


def layout_of(model: nn.Module) -> FlatLayout:
    """The flat layout of an ensemble's weights, or the [1, P] one of a plain module's."""
    return model.flat if is_ensemble(model) else plain_layout(model)


def replicate(model: nn.Module, copies: int, instances: tuple[int, int] | None = None) -> nn.Module:
    """A deep copy of `model` holding every instance (or those in [start, stop) of `instances`) `copies`
    times, instance-major (row e·copies + c is copy c of instance e), with its own `flat` buffer and
    `n_instances`; `model` is untouched."""
    copies = check_int("copies", copies, 1)
    start, stop = instances or (0, model.n_instances)
    if isinstance(model, ModuleEnsemble):
        if (start, stop) == (0, model.n_instances):
            return model.replicated(copies)
        return ModuleEnsemble(model.inner[0], model.loss_fn,
                              model.flat.data.detach()[start:stop].repeat_interleave(copies, dim=0).clone())
    clone = copy.deepcopy(model, {id(model.flat): None})  # the old flat buffer is rebuilt below
    with torch.no_grad():
        for name, param in list(clone.named_parameters()):
            owner_name, _, leaf = name.rpartition(".")
            owner = clone.get_submodule(owner_name) if owner_name else clone
            setattr(owner, leaf, nn.Parameter(param[start:stop].repeat_interleave(copies, dim=0), param.requires_grad))
    clone.n_instances = (stop - start) * copies
    clone.flat = FlatParameters(clone, clone.n_instances)
    return clone
