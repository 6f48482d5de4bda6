"""Head ablation and patching, for any task: a head's output is its slice of `hook_z`
([E, B, S, H, d_head]), so replacing that slice removes exactly that head's contribution.

Selections are [E, L, H] boolean masks, so every instance of an ensemble can have its own heads
replaced in the same forward pass. A selected slice is set to zero (`zero`), to its mean over a
set of examples at each position (`mean`), to its activation on another example of the same set
(`resample`: a value the head really produces, unlike the mean), or to the activation of a chosen
corrupted input (`patch`). A replacement may be confined to chosen positions (e.g. every position
but the read-out one), so a head's work there is removed and its work elsewhere kept.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.model.hooks import Hook, positionwise
from headway.model.transformer import EnsembleTransformer

KINDS = ("zero", "mean", "resample", "patch")
Z = "attn.hook_z"  # the per-layer hook point every selection acts on


def z_names(model: EnsembleTransformer) -> list[str]:
    """The hook_z name of every layer, in layer order."""
    return [model.hook_name(Z, layer) for layer in range(model.cfg.layers)]


def single_heads(model: EnsembleTransformer) -> Iterator[tuple[int, int, Tensor]]:
    """(layer, head, mask) selecting that one head in every instance."""
    for layer in range(model.cfg.layers):
        for head in range(model.cfg.heads):
            mask = torch.zeros(model.n_instances, model.cfg.layers, model.cfg.heads, dtype=torch.bool)
            mask[:, layer, head] = True
            yield layer, head, mask


@torch.no_grad()
def head_outputs(model: EnsembleTransformer, tokens: Tensor, chunk: int | None = None) -> dict[str, Tensor]:
    """Every layer's hook_z on `tokens` [E, N, ...], by name ([E, N, S, H, d_head] each)."""
    names = z_names(model)
    chunk = chunk or tokens.shape[1]
    parts: dict[str, list[Tensor]] = {name: [] for name in names}
    for start in range(0, tokens.shape[1], chunk):
        _, cache = model.run_with_cache(tokens[:, start : start + chunk], names)
        for name in names:
            parts[name].append(cache[name])
    return {name: torch.cat(values, dim=1) for name, values in parts.items()}


@torch.no_grad()
def mean_outputs(model: EnsembleTransformer, tokens: Tensor, chunk: int | None = None) -> dict[str, Tensor]:
    """Every layer's hook_z averaged over the examples of `tokens` at each position, by name
    ([E, 1, S, H, d_head]): the replacement of mean ablation. Summed `chunk` examples at a time."""
    names = z_names(model)
    chunk = chunk or tokens.shape[1]
    totals: dict[str, Tensor] = {}
    for start in range(0, tokens.shape[1], chunk):
        _, cache = model.run_with_cache(tokens[:, start : start + chunk], names)
        for name in names:
            part = cache[name].sum(dim=1, keepdim=True)
            totals[name] = part if name not in totals else totals[name] + part
    return {name: total / tokens.shape[1] for name, total in totals.items()}


def ablation_hooks(model: EnsembleTransformer, mask: Tensor, kind: str, source: dict[str, Tensor] | None = None,
                   positions: Tensor | None = None) -> dict[str, Hook]:
    """Hooks replacing the heads selected by `mask` [E, L, H]: with zero (`zero`) or with `source[name]`
    (`mean`: from `mean_outputs`; `resample` and `patch`: from `head_outputs` of the resampled or
    patching input), broadcast to z; at the positions `positions` only, when given: [S] bool for every example
    alike, or [B, S] bool, each example its own."""
    if kind not in KINDS:
        raise ConfigError(f"ablation kind = {kind!r} is unknown; choose one of {', '.join(KINDS)}")
    if kind != "zero" and source is None:
        raise ConfigError(f"ablation kind {kind!r} needs the replacement activations (source)")
    expected = (model.n_instances, model.cfg.layers, model.cfg.heads)
    if tuple(mask.shape) != expected:
        raise ConfigError(f"head mask has shape {tuple(mask.shape)}; expected {list(expected)} (instances, layers, heads)")
    device = next(model.parameters()).device
    mask = mask.to(device)
    where = None if positions is None else positions.to(device).reshape(1, -1, positions.shape[-1], 1, 1)
    hooks = {}
    for layer, name in enumerate(z_names(model)):
        if mask[:, layer].any():
            hooks[name] = _replace(mask[:, layer], None if kind == "zero" else source[name], where)
    return hooks


def _replace(heads: Tensor, source: Tensor | None, where: Tensor | None = None) -> Hook:
    """A hook_z hook setting the heads [E, H] to `source` (zero when None), at the positions `where`
    ([1, 1 or B, S, 1, 1] bool) when given, else everywhere. Position by position, so a z of the last P positions
    (the final layer's, when only the read-out position is computed) takes the last P of `source` and `where`."""
    select = heads.view(heads.shape[0], 1, 1, heads.shape[1], 1)  # [E, 1, 1, H, 1]
    if where is not None:
        select = select & where

    def replace(z: Tensor, name: str) -> Tensor:
        tail = z.shape[2]
        value = torch.zeros((), dtype=z.dtype, device=z.device) if source is None else source[:, :, -tail:].to(z.dtype)
        return torch.where(select[:, :, -tail:], value, z)

    return positionwise(replace)
