"""OV and QK circuits of the heads of a sorting model, with LayerNorm folded in.

A head's OV circuit says which output logits rise when the head attends to a token; its QK circuit
says how much a query token wants to attend to a key token. In a 1-layer attention-only model both
read the token embeddings directly, so they are matrices over tokens (rows × columns below).

Folding choices (the model is pre-LN: ``F.layer_norm`` without affine, then ``x * w + b``):

- Position embeddings are not a token property, so each token gets the *mean* position embedding
  of the positions where it occurs: keys and copied sources the list positions 0 … n-1; queries SEP
  at position n and the numbers the mean of positions n+1 … 2n-1. Given that averaged input, ln1 is
  applied *exactly* (its own mean, standard deviation, w and b).
- The head's output goes through W_O and then ln_final. Centring is exact (LN subtracts the mean of
  the vector, and centring is linear); the division by the residual's standard deviation is not a
  property of the head, so it is replaced by one number per instance, the *mean* standard deviation
  of the final residual at the readout positions on data (``measure_readout_scale``); then ln_final.w
  and W_U. Without it (``readout_scale=None``) the scale is 1 and only the shape of the rows counts.
- The OV circuit leaves out b_V, b_O, ln_final.b and b_U: they add the same vector whatever the
  source token, so they shift every row alike and carry nothing about which number is copied.
  The QK circuit keeps b_Q and b_K (they change which keys a query prefers) and is divided by
  sqrt(d_head), as the attention scores are.
- Only layer 0 is read. For a 1-layer attention-only model (the study model) this is the whole
  circuit; for deeper models it is layer 0's direct path only.

With ``layernorm=False`` nothing is folded: the circuits are the plain weight products.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from headway.errors import ConfigError
from headway.model.transformer import LN_EPS, EnsembleTransformer
from headway.tasks.sorting.task import SortingConfig


def check_model(model: EnsembleTransformer, cfg: SortingConfig) -> None:
    """Refuse a model whose token, context or output sizes do not fit the sorting task `cfg`."""
    expected = {"d_out": cfg.values, "d_vocab": cfg.d_vocab, "n_ctx": cfg.n_ctx}
    for name, value in expected.items():
        actual = getattr(model, name)
        if actual != value:
            raise ConfigError(f"model {name} = {actual} does not fit the sorting task "
                              f"(length {cfg.length}, values {cfg.values}); expected {name} = {value}")


def _ln(x: Tensor, w: Tensor, b: Tensor) -> Tensor:
    """Exact LayerNorm of x [E, ..., d] with per-instance gain and bias [E, d]."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    return F.layer_norm(x, x.shape[-1:]) * w.view(shape) + b.view(shape)


def _ln1(model: EnsembleTransformer, x: Tensor) -> Tensor:
    block = model.blocks[0]
    return _ln(x, block.ln1.w, block.ln1.b) if model.cfg.layernorm else x


def _positions_mean(model: EnsembleTransformer, start: int, stop: int) -> Tensor:
    """Mean position embedding over positions start … stop-1, [E, 1, d]."""
    return model.pos_embed.W_pos[:, start:stop].mean(dim=1, keepdim=True)


def key_inputs(model: EnsembleTransformer, cfg: SortingConfig) -> Tensor:
    """ln1 input of every number as it sits in the list: [E, values, d]."""
    return _ln1(model, model.embed.W_E[:, : cfg.values] + _positions_mean(model, 0, cfg.length))


def query_inputs(model: EnsembleTransformer, cfg: SortingConfig) -> Tensor:
    """ln1 input of every query token, numbers then SEP: [E, values + 1, d]."""
    n = cfg.length
    numbers = model.embed.W_E[:, : cfg.values] + _positions_mean(model, n + 1, 2 * n)
    sep = model.embed.W_E[:, cfg.sep : cfg.sep + 1] + _positions_mean(model, n, n + 1)
    return _ln1(model, torch.cat([numbers, sep], dim=1))


def unembed_direction(model: EnsembleTransformer, out: Tensor, scale: Tensor) -> Tensor:
    """Logits [E, ..., d_out] of residual-stream vectors out [E, ..., d] through ln_final with a frozen
    per-vector standard deviation `scale` (broadcastable to out[..., 0]): centre, divide, gain, W_U."""
    e = out.shape[0]
    if model.cfg.layernorm:
        gain = model.ln_final.w.view((e,) + (1,) * (out.dim() - 2) + (-1,))
        out = (out - out.mean(dim=-1, keepdim=True)) / scale.unsqueeze(-1) * gain
    flat = out.reshape(e, -1, out.shape[-1])
    return torch.bmm(flat, model.unembed.W_U).view(*out.shape[:-1], -1)


@torch.no_grad()
def ov_circuits(model: EnsembleTransformer, cfg: SortingConfig, readout_scale: Tensor | None = None) -> Tensor:
    """Full OV circuit of every head, [E, H, values, values]: row = source number the head attends to,
    column = output number whose logit it raises (LayerNorm folded as the module docstring says)."""
    check_model(model, cfg)
    e = model.n_instances
    scale = torch.ones(e) if readout_scale is None else torch.as_tensor(readout_scale, dtype=torch.float32)
    if scale.shape != (e,):
        raise ConfigError(f"readout_scale has shape {tuple(scale.shape)}; expected [{e}] (one per instance)")
    attn = model.blocks[0].attn
    x = key_inputs(model, cfg).unsqueeze(1)  # [E, 1, V, d]
    out = torch.matmul(torch.matmul(x, attn.W_V), attn.W_O)  # [E, H, V, d]
    scale = scale.to(out.device, out.dtype).view(e, 1, 1)
    return unembed_direction(model, out, scale)


def check_tokens(model: EnsembleTransformer, tokens: Tensor, cfg: SortingConfig) -> None:
    """Refuse tokens that are not [E, B, 2n] for this ensemble and task."""
    e, s = model.n_instances, cfg.n_ctx
    if tokens.dim() != 3 or tokens.shape[0] != e or tokens.shape[2] != s:
        raise ConfigError(f"tokens have shape {tuple(tokens.shape)}; expected [{e}, batch, {s}]")


@torch.no_grad()
def measure_readout_scale(model: EnsembleTransformer, tokens: Tensor, cfg: SortingConfig,
                          chunk: int = 1024) -> Tensor:
    """Mean standard deviation [E] of the final residual at the readout positions n … 2n-1 over
    tokens [E, B, 2n] (the per-token ln_final divisor that `ov_circuits` replaces by one number)."""
    check_model(model, cfg)
    check_tokens(model, tokens, cfg)
    final = model.hook_name("hook_resid_post", -1)
    total = torch.zeros(model.n_instances, device=tokens.device)
    for start in range(0, tokens.shape[1], chunk):
        _, cache = model.run_with_cache(tokens[:, start : start + chunk], [final], readout="all")
        resid = cache[final][:, :, cfg.length :]
        std = (resid.var(dim=-1, unbiased=False) + LN_EPS).sqrt()
        total += std.sum(dim=(1, 2))
    return (total / (tokens.shape[1] * cfg.length)).cpu()


@torch.no_grad()
def qk_circuits(model: EnsembleTransformer, cfg: SortingConfig) -> Tensor:
    """QK circuit of every head, [E, H, values + 1, values]: attention score (before softmax) of a query
    token (rows: numbers 0 … values-1, then SEP) on a key number in the list (columns)."""
    check_model(model, cfg)
    attn = model.blocks[0].attn
    q = torch.matmul(query_inputs(model, cfg).unsqueeze(1), attn.W_Q) + attn.b_Q.unsqueeze(2)  # [E, H, V+1, dh]
    k = torch.matmul(key_inputs(model, cfg).unsqueeze(1), attn.W_K) + attn.b_K.unsqueeze(2)  # [E, H, V, dh]
    return torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(attn.W_Q.shape[-1])
