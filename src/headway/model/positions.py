"""Which axis of each cached activation is the position axis, and TransformerLens' `pos_slice` applied to it.

Every activation of a single model is [batch, pos, …] except attention scores and patterns, which are
[batch, head, query_pos, key_pos] (their positions are the queries, as in `pattern[:, :, -1]`). The axis is
found by the hook point's name, never by counting from the end, so z [batch, pos, head, d_head] is sliced on
its positions and not its heads. `pos_slice` takes TransformerLens' forms (`transformer_lens.utilities.Slice`):
None (every position), an int (that position, the axis dropped), a slice, a tuple (slice(*tuple): (k,) is
:k, (i, j) is i:j, (i, j, s) is i:j:s), a 1-D list, array or tensor of positions (the axis kept, in that
order) or a boolean mask over the positions, or a `Slice` object holding one of these. Anything else, and
any position out of range, is refused with a ConfigError naming the value.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headway.errors import ConfigError

PosSlice = int | slice | tuple[int | None, ...] | Sequence[int] | np.ndarray | Tensor | None
# The position axis of every hook point, by its local name, counted with the batch axis first.
POSITION_AXIS = {
    **dict.fromkeys(("hook_embed", "hook_pos_embed", "hook_resid_pre", "hook_resid_mid", "hook_resid_post",
                     "hook_attn_out", "hook_mlp_out", "hook_normalized", "hook_q", "hook_k", "hook_v", "hook_z",
                     "hook_post", "hook_result", "hook_scale"), 1),
    "hook_attn_scores": 2,  # [batch, head, query_pos, key_pos]
    "hook_pattern": 2,
}
FORMS = ("None, an int, a slice, a (start, stop[, step]) tuple, or a 1-D list, array or tensor of integer "
         "positions (or a boolean mask over them)")


def position_axis(name: str, has_batch_dim: bool = True) -> int:
    """The position axis of the activation of hook point `name` (a full or local name), with or without the
    batch axis; a hook point whose layout is not known is refused rather than guessed."""
    local = name.rsplit(".", 1)[-1]
    if local not in POSITION_AXIS:
        raise KeyError(f"{name!r} has no known position axis; known kinds: {', '.join(POSITION_AXIS)}")
    return POSITION_AXIS[local] - (0 if has_batch_dim else 1)


def select_positions(tensor: Tensor, axis: int, pos_slice: PosSlice | Any) -> Tensor:
    """`tensor` with `pos_slice` applied to axis `axis` (see the module docstring): an int drops the axis,
    every other form keeps it."""
    if _unwrap(pos_slice) is None:
        return tensor
    chosen = resolve(pos_slice, tensor.shape[axis])
    if isinstance(chosen, int):
        return tensor.select(axis, chosen)
    return tensor.index_select(axis, chosen.to(tensor.device))


def resolve(pos_slice: PosSlice | Any, length: int) -> int | Tensor:
    """The positions `pos_slice` picks out of `length`: an int in 0..length-1 (one position, axis dropped) or
    a 1-D int64 tensor of positions (axis kept); a ConfigError for anything else or out of range."""
    value = _unwrap(pos_slice)
    if value is None:
        return torch.arange(length)
    if isinstance(value, tuple):
        if not 1 <= len(value) <= 3:
            raise ConfigError(f"pos_slice = {shown(pos_slice)}: a tuple is (stop), (start, stop) or (start, stop, "
                              "step), as TransformerLens reads it; give a list for positions")
        value = slice(*value)
    index = _as_int(value)
    if index is not None:
        if not -length <= index < length:
            raise ConfigError(f"pos_slice = {shown(pos_slice)} is out of range for {length} positions "
                              f"(-{length}..{length - 1})")
        return index % length
    if isinstance(value, slice):
        parts = (value.start, value.stop, value.step)
        bounds = [None if part is None else _as_int(part) for part in parts]
        if any(bound is None and part is not None for bound, part in zip(bounds, parts)):
            raise ConfigError(f"pos_slice = {shown(pos_slice)} has a bound that is not an integer; give {FORMS}")
        if bounds[2] == 0:
            raise ConfigError(f"pos_slice = {shown(pos_slice)} has step 0")
        return torch.tensor(list(range(*slice(*bounds).indices(length))), dtype=torch.long)
    if isinstance(value, (list, np.ndarray, Tensor)):
        return _positions_of(value, pos_slice, length)
    raise ConfigError(f"pos_slice = {shown(pos_slice)} is not a position selection; give {FORMS}")


def _positions_of(value: list[Any] | np.ndarray | Tensor, pos_slice: Any, length: int) -> Tensor:
    """A 1-D list, array or tensor of positions (or a boolean mask of `length`) as int64 positions in range."""
    try:
        array = torch.as_tensor(np.asarray(value) if isinstance(value, list) else value).cpu()
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"pos_slice = {shown(pos_slice)} is not a list of integer positions; give {FORMS}") \
            from None
    if array.dim() != 1:
        raise ConfigError(f"pos_slice = {shown(pos_slice)} has shape {tuple(array.shape)}; positions are 1-D")
    if array.dtype == torch.bool:
        if len(array) != length:
            raise ConfigError(f"pos_slice = {shown(pos_slice)} is a mask of {len(array)}; it needs one entry for "
                              f"each of the {length} positions")
        return array.nonzero()[:, 0]
    if array.numel() == 0:
        return torch.zeros(0, dtype=torch.long)
    if array.dtype.is_floating_point or array.dtype.is_complex:
        raise ConfigError(f"pos_slice = {shown(pos_slice)} holds non-integer positions; give {FORMS}")
    # An unsigned position is compared before it becomes int64: 2**64 - 1 would wrap to -1, the last position.
    too_large = not array.dtype.is_signed and int(array.numpy().max()) >= length
    array = array.long()
    if too_large or array.min() < -length or array.max() >= length:
        raise ConfigError(f"pos_slice = {shown(pos_slice)} is out of range for {length} positions "
                          f"(-{length}..{length - 1})")
    return array % length


def _unwrap(pos_slice: Any) -> Any:
    """The value inside a TransformerLens `Slice` object (read by its attributes, so TransformerLens need not be
    installed); any other value as it is."""
    if type(pos_slice).__name__ == "Slice" and hasattr(pos_slice, "mode") and hasattr(pos_slice, "slice"):
        return None if pos_slice.mode == "identity" else pos_slice.slice
    return pos_slice


def _as_int(value: Any) -> int | None:
    """A Python int for an integer scalar (numpy integers and 0-d integer tensors or arrays too), else None;
    booleans are not integers here."""
    if isinstance(value, (bool, np.bool_)):
        return None
    if isinstance(value, (int, np.integer)):
        return int(value)
    if isinstance(value, (Tensor, np.ndarray)) and value.ndim == 0:
        dtype = str(value.dtype)
        if "int" in dtype:
            return int(value.item())
    return None


def shown(value: Any) -> str:
    """`value` on one short line, for a message."""
    text = " ".join(repr(value).split())
    return text if len(text) <= 80 else text[:77] + "..."
