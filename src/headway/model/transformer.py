"""E independent GPT-2-style transformers of one shape, run in one forward and backward pass.

Every weight carries a leading instance axis and TransformerLens names (`embed.W_E`,
`blocks.0.attn.W_Q [E, n_heads, d_model, d_head]`, ...). Every activation carries the same
leading axis: `blocks.0.attn.hook_pattern` is [E, batch, head, query_pos, key_pos].
Hooks are plain callables looked up by name; with none given the forward pays nothing for them.
Hook names come from the module tree (`headway.model.hooks`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headway.compute import ATTENTION_CHOICES, auto_attention_kernel
from headway.model.config import ModelConfig
from headway.model.flat import FlatParameters
from headway.model.hooks import (Hook, HookDispatch, HookedModule, NamesFilter, filter_names, is_positionwise,
                                 name_hook_points)
from headway.settings import check_choice, is_integer

if TYPE_CHECKING:
    from headway.model.single import SingleModel

INIT_STD = 0.02
LN_EPS = 1e-5  # LayerNorm's epsilon (torch's default, TransformerLens' eps)


def _param(n: int, *shape: int) -> nn.Parameter:
    return nn.Parameter(torch.zeros(n, *shape))


def batched_affine(bias: Tensor, x: Tensor, weight: Tensor, alpha: float = 1.0) -> Tensor:
    """bias + alpha · (x @ weight) over a leading batch axis. Eager, one `baddbmm` (the product accumulates onto
    the bias, no separate pass); compiled, a `bmm` and an add, which Inductor fuses into the next elementwise
    kernel, where `baddbmm` stays a library call that first copies the broadcast bias into its whole output
    (docs/performance.md, "Why compilation helps torch.func's recipe more than headway")."""
    if torch.compiler.is_compiling():
        product = torch.bmm(x, weight)
        return (product * alpha if alpha != 1.0 else product) + bias
    return torch.baddbmm(bias, x, weight, alpha=alpha)


class LayerNorm(HookedModule):
    """Per-instance LayerNorm (`w`, `b` of shape [E, d_model]); identity when disabled."""

    def __init__(self, n: int, d_model: int, enabled: bool) -> None:
        super().__init__()
        self.enabled = enabled
        if enabled:
            self.w = nn.Parameter(torch.ones(n, d_model))
            self.b = _param(n, d_model)

    def hook_points(self) -> tuple[str, ...]:
        return ("hook_scale", "hook_normalized") if self.enabled else ()

    def forward(self, x: Tensor, run: HookDispatch) -> Tensor:
        if not self.enabled:
            return x
        if run.wants((self.hook["hook_scale"],)):
            # step by step, so a hook can read or replace the scale [..., 1] each position is divided by
            centred = x - x.mean(-1, keepdim=True)
            scale = run(self.hook["hook_scale"], (centred.pow(2).mean(-1, keepdim=True) + LN_EPS).sqrt())
            x = centred / scale
        else:
            x = F.layer_norm(x, x.shape[-1:], eps=LN_EPS)
        x = run(self.hook["hook_normalized"], x)
        shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
        return torch.addcmul(self.b.view(shape), x, self.w.view(shape))


class SplitHeads(torch.autograd.Function):
    """q, k, v as [E·B, H, S, dh] (q at the last position only with `last_query_only`) out of the projection's
    [E, B, S, 3, H, dh]: strided views, which the fused kernel reads and the matmul kernel copies once;
    the backward stacks their gradients straight into the projection's layout in one pass, where torch
    would stack them and then copy the permuted stack again. Written with setup_context and a generated
    vmap rule, so torch.func can batch it (an LLC estimate of a plain module wrapping a headway model)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(qkv: Tensor, last_query_only: bool) -> tuple[Tensor, Tensor, Tensor]:
        e, b, _, _, h, dh = qkv.shape
        q, k, v = qkv.permute(3, 0, 1, 4, 2, 5).unbind(0)  # each [E, B, H, S, dh], strided
        if last_query_only:
            q = q[:, :, :, -1:]
        return tuple(t.reshape(e * b, h, t.shape[3], dh) for t in (q, k, v))

    @staticmethod
    def setup_context(ctx, inputs: tuple[Tensor, bool], output: tuple[Tensor, Tensor, Tensor]) -> None:
        qkv, last_query_only = inputs
        ctx.shape, ctx.last_query_only = qkv.shape, last_query_only

    @staticmethod
    def backward(ctx, grad_q: Tensor, grad_k: Tensor, grad_v: Tensor) -> tuple[Tensor, None]:
        e, b, s, _, h, dh = ctx.shape
        grad_q, grad_k, grad_v = (g.reshape(e, b, h, -1, dh) for g in (grad_q, grad_k, grad_v))
        if ctx.last_query_only:  # the other positions' queries were not used
            grad_q = F.pad(grad_q, (0, 0, s - 1, 0))
        return torch.stack([g.permute(0, 1, 3, 2, 4) for g in (grad_q, grad_k, grad_v)], dim=3), None


class Attention(HookedModule):
    """Multi-head attention for E instances; causal or bidirectional."""

    INSIDE = ("hook_q", "hook_k", "hook_v", "hook_attn_scores", "hook_pattern")  # only on the explicit path

    def __init__(self, n: int, cfg: ModelConfig, n_ctx: int) -> None:
        super().__init__()
        h, d, dh = cfg.heads, cfg.d_model, cfg.head_dim
        self.causal = cfg.attention == "causal"
        self.W_Q, self.W_K, self.W_V = _param(n, h, d, dh), _param(n, h, d, dh), _param(n, h, d, dh)
        self.b_Q, self.b_K, self.b_V = _param(n, h, dh), _param(n, h, dh), _param(n, h, dh)
        self.W_O = _param(n, h, dh, d)
        self.b_O = _param(n, d)
        mask = torch.ones(n_ctx, n_ctx, dtype=torch.bool).tril() if self.causal else None
        self.register_buffer("mask", mask, persistent=False)
        # the causal mask as an additive bias for the matmul kernel: 0 on and below the diagonal, -inf above
        bias = torch.zeros(n_ctx, n_ctx).masked_fill(~mask, float("-inf")) if self.causal else None
        self.register_buffer("mask_bias", bias, persistent=False)
        self.kernel = "auto"  # how attention is computed when nothing inside it is hooked (ATTENTION_CHOICES)
        self.use_result = False  # whether it emits hook_result, each head's output (TransformerLens' use_attn_result)

    def hook_points(self) -> tuple[str, ...]:
        return (*self.INSIDE, "hook_z", *(("hook_result",) if self.use_result else ()))

    def forward(self, x: Tensor, run: HookDispatch, last_query_only: bool = False) -> Tensor:
        """Attention output [E, B, S, d_model], or [E, B, 1, d_model] for the last query only."""
        e, b, s, d = x.shape
        h, dh = self.W_Q.shape[1], self.W_Q.shape[3]
        w_qkv = torch.cat([self.W_Q, self.W_K, self.W_V], dim=1).transpose(1, 2).reshape(e, d, 3 * h * dh)
        b_qkv = torch.cat([self.b_Q, self.b_K, self.b_V], dim=1).reshape(e, 1, 3 * h * dh)
        qkv = batched_affine(b_qkv, x.reshape(e, b * s, d), w_qkv).view(e, b, s, 3, h, dh)
        if run.wants(self.hook[name] for name in self.INSIDE):
            z = self._explicit(qkv, run)
        else:
            # with the last query only, the last position sees every key, causal or not
            q, k, v = SplitHeads.apply(qkv, last_query_only)
            causal = self.causal and not last_query_only
            kernel = self.kernel
            if kernel == "auto":
                kernel = auto_attention_kernel(x.device, s, torch.is_grad_enabled(), torch.compiler.is_compiling())
            if kernel == "sdpa":
                z = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            else:
                z = self._matmul_attention(q, k, v, causal)
            z = z.view(e, b, h, q.shape[2], dh).transpose(2, 3)  # [E, B, S or 1, H, dh]
        z = run(self.hook["hook_z"], z)
        if self.use_result and run.wants((self.hook["hook_result"],)):
            # each head's output [E, B, S, H, d_model], for a hook to read or replace; their sum is the output
            result = run(self.hook["hook_result"], torch.einsum("ebshd,ehdm->ebshm", z, self.W_O))
            return result.sum(3) + self.b_O[:, None, None]
        positions = z.shape[2]
        out = batched_affine(
            self.b_O.unsqueeze(1), z.reshape(e, b * positions, h * dh), self.W_O.reshape(e, h * dh, d)
        )
        return out.view(e, b, positions, d)

    def _matmul_attention(self, q: Tensor, k: Tensor, v: Tensor, causal: bool) -> Tensor:
        """Attention [N, H, Sq, dh] of q [N, H, Sq, dh] over k, v [N, H, S, dh] as two batched matrix
        products and a softmax, the causal mask added inside the first product (`causal` needs Sq = S)."""
        n, h, sq, dh = q.shape
        s = k.shape[2]
        q, k, v = q.reshape(n * h, sq, dh), k.reshape(n * h, s, dh), v.reshape(n * h, s, dh)
        scale = 1.0 / math.sqrt(dh)
        if causal:
            scores = batched_affine(self.mask_bias[:s, :s], q, k.transpose(1, 2), alpha=scale)
        else:
            scores = torch.bmm(q * scale, k.transpose(1, 2))
        return torch.bmm(torch.softmax(scores, dim=-1), v).view(n, h, sq, dh)

    def _explicit(self, qkv: Tensor, run: HookDispatch) -> Tensor:
        """Attention step by step, so hooks can read or replace q, k, v, scores and pattern."""
        hook, s, dh = self.hook, qkv.shape[2], qkv.shape[-1]
        q, k, v = qkv.unbind(dim=3)  # each [E, B, S, H, dh]
        q, k, v = run(hook["hook_q"], q), run(hook["hook_k"], k), run(hook["hook_v"], v)
        q, k, v = (t.permute(0, 1, 3, 2, 4) for t in (q, k, v))  # [E, B, H, S, dh]
        scores = torch.matmul(q, k.transpose(-1, -2)) * (1.0 / math.sqrt(dh))
        if self.causal:
            scores = scores.masked_fill(~self.mask[:s, :s], float("-inf"))
        scores = run(hook["hook_attn_scores"], scores)
        pattern = run(hook["hook_pattern"], torch.softmax(scores, dim=-1))
        return torch.matmul(pattern, v).permute(0, 1, 3, 2, 4)  # [E, B, S, H, dh]


class MLP(HookedModule):
    """GELU MLP (exact erf form; see docs/decisions.md) for E instances."""

    def __init__(self, n: int, d_model: int, d_mlp: int) -> None:
        super().__init__()
        self.W_in, self.b_in = _param(n, d_model, d_mlp), _param(n, d_mlp)
        self.W_out, self.b_out = _param(n, d_mlp, d_model), _param(n, d_model)

    def hook_points(self) -> tuple[str, ...]:
        return ("hook_post",)

    def forward(self, x: Tensor, run: HookDispatch) -> Tensor:
        e, b, s, d = x.shape
        pre = batched_affine(self.b_in.unsqueeze(1), x.reshape(e, b * s, d), self.W_in)
        width = self.W_in.shape[-1]  # named, not -1: an empty batch has no size to infer
        post = run(self.hook["hook_post"], F.gelu(pre).view(e, b, s, width))
        out = batched_affine(self.b_out.unsqueeze(1), post.reshape(e, b * s, width), self.W_out)
        return out.view(e, b, s, d)


class Block(HookedModule):
    """Pre-LN residual block: attention, then (optionally) an MLP."""

    def __init__(self, n: int, cfg: ModelConfig, n_ctx: int) -> None:
        super().__init__()
        self.ln1 = LayerNorm(n, cfg.d_model, cfg.layernorm)
        self.attn = Attention(n, cfg, n_ctx)
        self.has_mlp = cfg.mlp_dim > 0
        if self.has_mlp:
            self.ln2 = LayerNorm(n, cfg.d_model, cfg.layernorm)
            self.mlp = MLP(n, cfg.d_model, cfg.mlp_dim)

    def hook_points(self) -> tuple[str, ...]:
        mlp = ("hook_resid_mid", "hook_mlp_out") if self.has_mlp else ()
        return ("hook_resid_pre", "hook_attn_out", *mlp, "hook_resid_post")

    def forward(self, x: Tensor, run: HookDispatch, last_only: bool = False) -> Tensor:
        """The block on every position, or (`last_only`) its output at the last position alone:
        keys and values still come from every position, but nothing else is computed for them."""
        hook = self.hook
        x = run(hook["hook_resid_pre"], x)
        attn_out = run(hook["hook_attn_out"], self.attn(self.ln1(x, run), run, last_only))
        x = (x[:, :, -1:] if last_only else x) + attn_out
        if self.has_mlp:
            x = run(hook["hook_resid_mid"], x)
            x = x + run(hook["hook_mlp_out"], self.mlp(self.ln2(x, run), run))
        return run(hook["hook_resid_post"], x)


class EnsembleTransformer(HookedModule):
    """E same-shaped transformers; instance e sees only tokens[e] and its own weights.

    `tokens` is [E, batch, pos] or [E, batch, pos, slots]: with slots, the embeddings of the
    slot ids at one position are summed (e.g. the two role embeddings of a packed link).
    The output is the unembedded residual at the last position ([E, batch, d_out]), at every
    position ([E, batch, pos, d_out]) with `readout="all"`, or at the last k positions
    ([E, batch, k, d_out]) with `readout=k`. `n_slots`: the token slots per position of the task it was
    built for (None: not known), which `instance` hands to the single model so that it checks token shapes.
    """

    def __init__(self, cfg: ModelConfig, d_vocab: int, n_ctx: int, d_out: int, n_instances: int,
                 device: torch.device | str | None = None, n_slots: int | None = None) -> None:
        super().__init__()
        self.cfg, self.d_vocab, self.n_ctx, self.d_out = cfg, d_vocab, n_ctx, d_out
        self.n_instances, self.n_slots = n_instances, n_slots
        n, d = n_instances, cfg.d_model
        with torch.device(device or "cpu"):
            self.embed = nn.Module()
            self.embed.W_E = _param(n, d_vocab, d)
            self.pos_embed = nn.Module()
            self.pos_embed.W_pos = _param(n, n_ctx, d)
            self.blocks = nn.ModuleList(Block(n, cfg, n_ctx) for _ in range(cfg.layers))
            self.ln_final = LayerNorm(n, d, cfg.layernorm)
            self.unembed = nn.Module()
            self.unembed.W_U = _param(n, d, d_out)
            self.unembed.b_U = _param(n, d_out)
        self.flat = FlatParameters(self, n_instances)
        self._name_hooks()

    @classmethod
    def from_seeds(cls, cfg: ModelConfig, d_vocab: int, n_ctx: int, d_out: int, seeds: Sequence[int],
                   device: torch.device | str | None = None, n_slots: int | None = None) -> EnsembleTransformer:
        """Build an ensemble whose instance e is initialised exactly as a lone model with seeds[e]."""
        model = cls(cfg, d_vocab, n_ctx, d_out, len(seeds), device, n_slots)
        model.initialise(seeds)
        return model

    @torch.no_grad()
    def initialise(self, seeds: Sequence[int]) -> None:
        """GPT-2 initialisation per instance from its own seed: N(0, 0.02·init_scale), residual outputs
        scaled by 1/sqrt(2·layers), biases 0, LayerNorm gains 1. Drawn on the CPU so every device
        gets the same numbers."""
        std = INIT_STD * self.cfg.init_scale
        residual_std = std / math.sqrt(2 * self.cfg.layers)
        for e, seed in enumerate(seeds):
            gen = torch.Generator().manual_seed(int(seed))
            for name, param in self.named_parameters():
                leaf = name.rsplit(".", 1)[-1]
                if leaf.startswith("W_"):
                    values = torch.randn(param.shape[1:], generator=gen) * (
                        residual_std if leaf in ("W_O", "W_out") else std)
                elif leaf == "w":
                    values = torch.ones(param.shape[1:])
                else:
                    values = torch.zeros(param.shape[1:])
                param[e].copy_(values)

    def forward(self, tokens: Tensor, *, hooks: Mapping[str, Hook] | None = None,
                readout: str | int = "last") -> Tensor:
        if hooks:
            unknown = sorted(set(hooks) - self._hook_set)
            if unknown:
                raise KeyError(f"unknown hook names {unknown}; see EnsembleTransformer.hook_names()")
        run = HookDispatch(hooks)
        e, b, s = tokens.shape[:3]
        if e != self.n_instances:
            raise ValueError(f"tokens of shape {tuple(tokens.shape)} have {e} on axis 0, the instance axis, but this "
                             f"ensemble has {self.n_instances} instance(s): give tokens [instances, batch, pos(, "
                             "slots)], or use model.instance(e) for one model without the instance axis")
        if s > self.n_ctx:
            raise ValueError(f"sequence length {s} exceeds n_ctx = {self.n_ctx}")
        offsets = torch.arange(e, device=tokens.device).view(e, *([1] * (tokens.dim() - 1))) * self.d_vocab
        table = self.embed.W_E.reshape(e * self.d_vocab, -1)
        x = F.embedding(tokens + offsets, table)
        if tokens.dim() == 4:
            x = x.sum(dim=3)
        x = run(self.hook["hook_embed"], x)
        x = x + run(self.hook["hook_pos_embed"], self.pos_embed.W_pos[:, None, :s, :])
        if readout not in ("last", "all") and not (isinstance(readout, int) and 1 <= readout <= s):
            raise ValueError(f"readout = {readout!r}; choose 'last', 'all' or a number of last positions 1..{s}")
        # With only the last position read out, the final block need not compute the other positions (a third
        # or more of a small model's work), unless a hook there needs them.
        shortcut = readout == "last" and self._tail_suffices(hooks)
        for i, block in enumerate(self.blocks):
            x = block(x, run, last_only=shortcut and i == len(self.blocks) - 1)
        if readout != "all":
            x = x[:, :, -(1 if readout == "last" else readout):, :]
        x = self.ln_final(x, run)
        rows = x.reshape(e, x.shape[1] * x.shape[2], x.shape[-1])  # sizes named: an empty batch has none to infer
        out = batched_affine(self.unembed.b_U.unsqueeze(1), rows, self.unembed.W_U)
        return out.view(e, b, self.d_out) if readout == "last" else out.view(e, b, x.shape[2], self.d_out)

    def _name_hooks(self) -> None:
        """Name every hook point the modules now emit, and what the forward's shortcut needs to know of them."""
        self._hook_names = name_hook_points(self)
        self._hook_set = frozenset(self._hook_names)
        self._tail_points, self._all_position_points = self._final_block_points()

    def _final_block_points(self) -> tuple[frozenset[str], frozenset[str]]:
        """The final block's hook points that see the last position alone when it computes only that one (its
        input and first LayerNorm still see every position, which its keys and values need), and those inside
        its attention, whose hooks need every query."""
        if not self.blocks:
            return frozenset(), frozenset()
        final = self.blocks[-1]
        at_input = {final.hook["hook_resid_pre"], *final.ln1.hook.values()}
        inside = frozenset(final.attn.hook[name] for name in final.attn.INSIDE)
        final_points = {name for module in final.modules() if isinstance(module, HookedModule)
                        for name in module.hook.values()}
        return frozenset(final_points - at_input - inside), inside

    def _tail_suffices(self, hooks: Mapping[str, Hook] | None) -> bool:
        """Whether the final block may compute the last position alone under `hooks`: none inside its attention,
        and every one on its other points `positionwise`."""
        if not hooks:
            return True
        return not any(name in self._all_position_points or (name in self._tail_points and not is_positionwise(hook))
                       for name, hook in hooks.items())

    @property
    def attention_kernel(self) -> str:
        """How unhooked attention is computed: 'sdpa' (torch's fused kernel), 'matmul' (two batched matrix
        products and a softmax; the same numbers to float rounding) or, for a new model, 'auto' (per pass,
        `headway.compute.auto_attention_kernel`: by device, sequence length, whether gradients are taken and
        whether the pass is compiled)."""
        return self.blocks[0].attn.kernel if len(self.blocks) else "auto"

    def use_attention_kernel(self, kernel: str) -> None:
        """Compute unhooked attention with `kernel` (one of ATTENTION_CHOICES) from now on."""
        check_choice("attention kernel", kernel, ATTENTION_CHOICES)
        for block in self.blocks:
            block.attn.kernel = kernel

    def use_attention_results(self, enabled: bool) -> None:
        """Whether every attention layer emits `hook_result` (each head's output before the sum,
        [E, B, pos, head, d_model]; TransformerLens' `use_attn_result`): off by default, since it costs a
        d_model-wide tensor per head whenever it is hooked or cached."""
        for block in self.blocks:
            block.attn.use_result = bool(enabled)
        self._name_hooks()

    def run_with_cache(self, tokens: Tensor, names: NamesFilter = None,
                       readout: str | int = "last") -> tuple[Tensor, dict[str, Tensor]]:
        """Forward that also returns the named activations: all hook points by default, or those `names`
        selects (a name, a list of names or a predicate on the name, like TransformerLens' names_filter)."""
        cache: dict[str, Tensor] = {}

        def store(tensor: Tensor, name: str) -> None:
            cache[name] = tensor.detach()

        wanted = filter_names(names, self._hook_names)
        out = self.forward(tokens, hooks={name: store for name in wanted}, readout=readout)
        return out, cache

    def hook_points(self) -> tuple[str, ...]:
        return ("hook_embed", "hook_pos_embed")

    def hook_names(self) -> list[str]:
        """Every hook point of this model, in module-tree order (see `headway.model.hooks`)."""
        return list(self._hook_names)

    def hook_name(self, point: str, layer: int | None = None) -> str:
        """The full name of a hook point, checked: `hook_name("attn.hook_z", 0)` is
        "blocks.0.attn.hook_z", `hook_name("hook_resid_post", -1)` the last block's output and
        `hook_name("hook_embed")` a model-level point."""
        if layer is None:
            name = point
        else:
            layers = len(self.blocks)
            if not is_integer(layer) or not -layers <= layer < layers:
                raise KeyError(f"layer = {layer!r} is out of range; this model has layers 0..{layers - 1}")
            name = f"blocks.{layer % layers}.{point}"
        if name not in self._hook_set:
            raise KeyError(f"unknown hook point {name!r}; see EnsembleTransformer.hook_names()")
        return name

    def instance(self, index: int) -> SingleModel:
        """Instance `index` as a single model without the instance axis, with TransformerLens' names and
        habits (`headway.model.single`); it holds a copy of that instance's weights."""
        from headway.model.single import SingleModel

        if not is_integer(index) or not -self.n_instances <= index < self.n_instances:
            raise IndexError(f"instance {index!r} is out of range; this ensemble has instances "
                             f"0..{self.n_instances - 1}")
        one = EnsembleTransformer(self.cfg, self.d_vocab, self.n_ctx, self.d_out, 1, self.embed.W_E.device,
                                  self.n_slots)
        one.load_instances({name: param.detach() for name, param in self.named_parameters()}, [int(index)])
        one.use_attention_kernel(self.attention_kernel)
        return SingleModel(one, n_slots=self.n_slots)

    def instance_state(self, index: int) -> dict[str, Tensor]:
        """The weights of one instance, without the instance axis (TransformerLens shapes)."""
        return {name: p[index].detach().clone() for name, p in self.named_parameters()}

    @torch.no_grad()
    def load_instances(self, state: Mapping[str, Tensor], indices: Sequence[int] | None = None) -> None:
        """Copy weights with a leading instance axis into this ensemble (optionally a selection)."""
        for name, param in self.named_parameters():
            if name not in state:
                raise KeyError(f"checkpoint has no tensor {name!r}")
            values = state[name] if indices is None else state[name][list(indices)]
            if values.shape != param.shape:
                raise ValueError(f"{name}: checkpoint shape {tuple(values.shape)} != model shape {tuple(param.shape)}")
            param.copy_(values.to(param.device, param.dtype))
