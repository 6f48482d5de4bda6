"""TransformerLens' short hook names ("pattern", 0) resolved to full ones ("blocks.0.attn.hook_pattern")."""

from __future__ import annotations

from collections.abc import Sequence

# TransformerLens' layer-type words in `act_name(name, layer, layer_type)`.
LAYER_TYPES = {"a": "attn", "attn": "attn", "attention": "attn", "m": "mlp", "mlp": "mlp", "ln1": "ln1",
               "ln2": "ln2", "b": "", "block": "", "blocks": ""}


def find_hook_name(names: Sequence[str], n_layers: int, name: str, layer: int | None = None,
                   layer_type: str | None = None) -> str:
    """The one name of `names` that the short form (name, layer, layer_type) means; a full name in `names` is
    returned as it is. Unknown, out of range or ambiguous: KeyError naming what is allowed."""
    if layer is None and layer_type is None and name in names:
        return name
    local = name if name.startswith("hook_") else f"hook_{name}"
    found = [n for n in names if n.rsplit(".", 1)[-1] == local]
    if layer is None:
        found = [n for n in found if not n.startswith("blocks.")]
    else:
        if not -n_layers <= layer < n_layers:
            raise KeyError(f"layer = {layer} is out of range; this model has layers 0..{n_layers - 1}")
        found = [n for n in found if n.startswith(f"blocks.{layer % n_layers}.")]
    if layer_type is not None:
        if layer_type not in LAYER_TYPES:
            raise KeyError(f"layer_type = {layer_type!r} is unknown; choose one of {', '.join(LAYER_TYPES)}")
        kind = LAYER_TYPES[layer_type]
        found = [n for n in found if not kind or f".{kind}." in n]
    where = "" if layer is None else f" at layer {layer}"
    if not found:
        raise KeyError(f"no hook point {name!r}{where}; see hook_names()")
    if len(found) > 1:
        raise KeyError(f"{name!r}{where} is ambiguous ({', '.join(found)}); give the layer type, e.g. 'ln1'")
    return found[0]
