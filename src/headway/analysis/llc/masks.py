"""[P] masks over a model's weights for restricted LLCs: by parameter name, per attention head, or by
named weight group."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

from headway.analysis.llc.replication import layout_of
from headway.errors import ConfigError
from headway.model.flat import FlatLayout
from headway.settings import is_integer


def parameter_mask(model: nn.Module, names: Iterable[str] | Mapping[str, Tensor]) -> Tensor:
    """A [P] float mask over the parameters of an ensemble or a plain module (`named_parameters()`
    names): 1 on every coordinate of each listed name, or, from a dict name → mask of that parameter's
    shape (bool or float, devinterp's `optimize_over`, shared by an ensemble's instances), that mask;
    parameters not named are 0."""
    wanted = dict(names) if isinstance(names, Mapping) else dict.fromkeys([names] if isinstance(names, str) else names)
    flat = layout_of(model)
    unknown = sorted(set(wanted) - set(flat.names))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(unknown)}; valid names: {', '.join(flat.names)}")
    out = flat.mask(lambda name: name in wanted and wanted[name] is None)
    for name, part in wanted.items():
        if part is None:
            continue
        i = flat.names.index(name)
        part = torch.as_tensor(part)
        if tuple(part.shape) != flat.shapes[i][1:]:
            raise ConfigError(f"the mask of {name} has shape {tuple(part.shape)}; it must be the parameter's "
                              f"{flat.shapes[i][1:]}")
        out[flat.offsets[i] : flat.offsets[i] + flat.sizes[i]] = part.reshape(-1).to(out)
    return out


def _layer_count(flat: FlatLayout) -> int:
    return sum(1 for name in flat.names if name.startswith("blocks.") and name.endswith(".attn.W_Q"))


def head_mask(model: nn.Module, layer: int, head: int) -> Tensor:
    """A [P] mask on one attention head's own weights: W_Q, W_K, W_V, b_Q, b_K, b_V and W_O at
    [:, head] (the output bias b_O is shared by all heads and left out). Any model whose attention
    weights carry TransformerLens names and shapes has heads: a headway ensemble, or a plain module
    such as a TransformerLens `HookedTransformer`."""
    flat = layout_of(model)
    layers = _layer_count(flat)
    if not layers:
        raise ConfigError(f"{type(model).__name__} has no attention weights named blocks.L.attn.W_Q "
                          "(TransformerLens names); give per-parameter masks with parameter_mask instead")
    if not is_integer(layer) or not 0 <= layer < layers:
        raise ConfigError(f"layer = {layer!r} is invalid; this model has layers 0..{layers - 1}")
    heads = flat.shapes[flat.names.index(f"blocks.{layer}.attn.W_Q")][1]
    if not is_integer(head) or not 0 <= head < heads:
        raise ConfigError(f"head = {head!r} is invalid; layer {layer} has heads 0..{heads - 1}")
    out = torch.zeros(flat.data.shape[1], dtype=flat.data.dtype, device=flat.data.device)
    for leaf in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O"):
        i = flat.names.index(f"blocks.{layer}.attn.{leaf}")
        per_head = math.prod(flat.shapes[i][2:])
        start = flat.offsets[i] + head * per_head
        out[start : start + per_head] = 1.0
    return out


WEIGHT_GROUPS = ("all", "heads", "embed", "unembed")


def weight_masks(model: nn.Module, spec: str) -> dict[str, Tensor | None]:
    """Named masks from a comma list of groups: "all" (no mask), "heads" (one per head, "L0H1"),
    "embed" (W_E and W_pos) and "unembed" (W_U and b_U), e.g. "all,heads"."""
    out: dict[str, Tensor | None] = {}
    flat = layout_of(model)
    for group in (part.strip() for part in spec.split(",")):
        if group == "all":
            out["all"] = None
        elif group == "heads":
            if not _layer_count(flat):
                head_mask(model, 0, 0)  # refuses, naming what is missing
            for layer in range(_layer_count(flat)):
                heads = flat.shapes[flat.names.index(f"blocks.{layer}.attn.W_Q")][1]
                out.update({f"L{layer}H{h}": head_mask(model, layer, h) for h in range(heads)})
        elif group == "embed":
            out["embed"] = parameter_mask(model, ["embed.W_E", "pos_embed.W_pos"])
        elif group == "unembed":
            out["unembed"] = parameter_mask(model, ["unembed.W_U", "unembed.b_U"])
        else:
            raise ConfigError(f"weight group {group!r} is unknown; choose from {', '.join(WEIGHT_GROUPS)}")
    return out
