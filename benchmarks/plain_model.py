"""A plain single-model PyTorch transformer with the architecture of one headway instance, for the
training benchmark's baselines (what a researcher would write without headway).

GPT-2 style, pre-LN: token embedding (summed over the slots axis of packed tokens [B, pos, slots]),
learned positional embedding, blocks of attention (causal or bidirectional, through
`F.scaled_dot_product_attention` or, with `attention="explicit"`, a matmul, a mask and a softmax: vmap has
no batching rule for SDPA on some devices and falls back to a loop) and a GELU MLP (exact erf form), a
final LayerNorm and an unembedding with bias, read out at the last position (or the last k positions,
concatenated).

`from_instance` builds one from a headway `EnsembleTransformer` instance (TransformerLens names:
`blocks.0.attn.W_Q [H, d, dh]`, ...), so the benchmark's ways start from the same weights.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

ATTENTION_PATHS = ("sdpa", "explicit")  # how a PlainBlock computes attention


def _layer_norm(d_model: int, enabled: bool) -> nn.Module:
    """nn.LayerNorm(d_model), or the identity when the model has no LayerNorm."""
    return nn.LayerNorm(d_model) if enabled else nn.Identity()


class PlainBlock(nn.Module):
    """One pre-LN residual block: multi-head attention, then (if `d_mlp` > 0) a GELU MLP."""

    def __init__(self, d_model: int, heads: int, d_head: int, d_mlp: int, layernorm: bool, causal: bool,
                 attention: str = "sdpa") -> None:
        super().__init__()
        if attention not in ATTENTION_PATHS:
            raise ValueError(f"attention = {attention!r}; choose from {', '.join(ATTENTION_PATHS)}")
        self.heads, self.d_head, self.causal, self.attention = heads, d_head, causal, attention
        self.ln1 = _layer_norm(d_model, layernorm)
        self.qkv = nn.Linear(d_model, 3 * heads * d_head)
        self.proj = nn.Linear(heads * d_head, d_model)
        self.has_mlp = d_mlp > 0
        if self.has_mlp:
            self.ln2 = _layer_norm(d_model, layernorm)
            self.fc_in = nn.Linear(d_model, d_mlp)
            self.fc_out = nn.Linear(d_mlp, d_model)

    def forward(self, x: Tensor, last_only: bool = False) -> Tensor:
        """The block's output [B, S, d] (or [B, 1, d] at the last position when `last_only`)."""
        b, s, _ = x.shape
        qkv = self.qkv(self.ln1(x)).view(b, s, 3, self.heads, self.d_head).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]  # each [B, H, S, dh]
        if last_only:  # the last query sees every key, so no mask is needed
            q = q[:, :, -1:]
            x = x[:, -1:]
        z = self.attend(q, k, v, causal=self.causal and not last_only)
        x = x + self.proj(z.transpose(1, 2).reshape(b, q.shape[2], self.heads * self.d_head))
        if self.has_mlp:
            x = x + self.fc_out(F.gelu(self.fc_in(self.ln2(x))))
        return x

    def attend(self, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        """Attention outputs [B, H, Sq, dh] through SDPA or written out (scores, mask, softmax, mix)."""
        if self.attention == "sdpa":
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        scores = q @ k.transpose(-1, -2) / self.d_head**0.5
        if causal:
            s = scores.shape[-1]
            future = torch.ones(s, s, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        return scores.softmax(dim=-1) @ v


class PlainTransformer(nn.Module):
    """One GPT-2-style transformer; `forward(tokens)` gives the readout [B, positions * d_out].

    `last_only` computes the final block at the last position only (headway's shortcut; off by
    default, as an ordinary model computes every position and then slices); `attention` is "sdpa" or
    "explicit" (see PlainBlock.attend)."""

    def __init__(self, d_vocab: int, n_ctx: int, d_out: int, layers: int, heads: int, d_model: int,
                 d_head: int, d_mlp: int, layernorm: bool = True, causal: bool = True,
                 last_only: bool = False, attention: str = "sdpa") -> None:
        super().__init__()
        self.last_only = last_only
        self.embed = nn.Embedding(d_vocab, d_model)
        self.pos_embed = nn.Embedding(n_ctx, d_model)
        self.blocks = nn.ModuleList(PlainBlock(d_model, heads, d_head, d_mlp, layernorm, causal, attention)
                                    for _ in range(layers))
        self.ln_final = _layer_norm(d_model, layernorm)
        self.unembed = nn.Linear(d_model, d_out)

    def forward(self, tokens: Tensor, positions: int = 1) -> Tensor:
        """Outputs [B, positions * d_out] of the last `positions` positions of tokens [B, S] or [B, S, slots]."""
        x = self.embed(tokens)
        if tokens.dim() == 3:
            x = x.sum(dim=2)
        s = tokens.shape[1]
        x = x + self.pos_embed.weight[:s]
        shortcut = self.last_only and positions == 1
        for i, block in enumerate(self.blocks):
            x = block(x, last_only=shortcut and i == len(self.blocks) - 1)
        out = self.unembed(self.ln_final(x[:, -positions:]))
        return out.reshape(out.shape[0], -1)


def mse_readout_loss(out: Tensor, targets: Tensor, vocab: int) -> Tensor:
    """Mean squared error of outputs [B, T*vocab] against one-hot target symbols [B, T] (float32)."""
    onehot = F.one_hot(targets, vocab).float().reshape(out.shape)
    return (out.float() - onehot).pow(2).mean()


def decay_groups(named: Mapping[str, Tensor] | Any, weight_decay: float, matrix_dim: int = 2) -> list[dict]:
    """AdamW parameter groups: weight decay on the weight matrices (tensors of at least `matrix_dim`
    dims: embeddings and linear weights), none on biases and LayerNorm gains (as headway decays W_*)."""
    items = list(named.items()) if isinstance(named, Mapping) else list(named)
    decay = [p for _, p in items if p.dim() >= matrix_dim]
    keep = [p for _, p in items if p.dim() < matrix_dim]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": keep, "weight_decay": 0.0}]


@torch.no_grad()
def load_transformerlens_state(model: PlainTransformer, state: Mapping[str, Tensor]) -> None:
    """Copy one instance's TransformerLens-named weights (no instance axis) into `model`."""
    def put(target: Tensor, value: Tensor) -> None:
        if target.shape != value.shape:
            raise ValueError(f"shape {tuple(value.shape)} does not fit {tuple(target.shape)}")
        target.copy_(value)

    put(model.embed.weight, state["embed.W_E"])
    put(model.pos_embed.weight, state["pos_embed.W_pos"])
    for i, block in enumerate(model.blocks):
        p = f"blocks.{i}."
        # W_Q [H, d, dh] -> rows (h, j) of the [3*H*dh, d] weight of the fused projection
        d_model = state[p + "attn.W_Q"].shape[1]
        put(block.qkv.weight, torch.cat([state[p + f"attn.W_{n}"].permute(0, 2, 1).reshape(-1, d_model)
                                         for n in "QKV"]))
        put(block.qkv.bias, torch.cat([state[p + f"attn.b_{n}"].reshape(-1) for n in "QKV"]))
        w_o = state[p + "attn.W_O"]  # [H, dh, d]
        put(block.proj.weight, w_o.reshape(-1, w_o.shape[-1]).T)
        put(block.proj.bias, state[p + "attn.b_O"])
        if isinstance(block.ln1, nn.LayerNorm):
            put(block.ln1.weight, state[p + "ln1.w"])
            put(block.ln1.bias, state[p + "ln1.b"])
        if block.has_mlp:
            put(block.fc_in.weight, state[p + "mlp.W_in"].T)
            put(block.fc_in.bias, state[p + "mlp.b_in"])
            put(block.fc_out.weight, state[p + "mlp.W_out"].T)
            put(block.fc_out.bias, state[p + "mlp.b_out"])
            if isinstance(block.ln2, nn.LayerNorm):
                put(block.ln2.weight, state[p + "ln2.w"])
                put(block.ln2.bias, state[p + "ln2.b"])
    if isinstance(model.ln_final, nn.LayerNorm):
        put(model.ln_final.weight, state["ln_final.w"])
        put(model.ln_final.bias, state["ln_final.b"])
    put(model.unembed.weight, state["unembed.W_U"].T)
    put(model.unembed.bias, state["unembed.b_U"])


def from_instance(ensemble: Any, index: int, last_only: bool = False, attention: str = "sdpa") -> PlainTransformer:
    """A plain model with the shape and the weights of instance `index` of a headway ensemble, on its device
    (`attention`: "sdpa" or "explicit")."""
    cfg = ensemble.cfg
    model = PlainTransformer(ensemble.d_vocab, ensemble.n_ctx, ensemble.d_out, cfg.layers, cfg.heads, cfg.d_model,
                             cfg.head_dim, cfg.mlp_dim, layernorm=cfg.layernorm, causal=cfg.attention == "causal",
                             last_only=last_only, attention=attention)
    model.to(ensemble.embed.W_E.device)
    load_transformerlens_state(model, ensemble.instance_state(index))
    return model
