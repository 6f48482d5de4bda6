"""One model without the instance axis, used the way a TransformerLens user uses a HookedTransformer.

`EnsembleTransformer.instance(e)` or `headway.runs.store.load_single(path, run_id=...)` gives a model whose tokens
are [batch, pos] (or [batch, pos, slots]), whose outputs, weights and activations have no instance axis,
and whose names are TransformerLens': `cfg.n_layers`, `W_Q` stacked over layers ([n_layers, n_heads,
d_model, d_head]), `blocks[0].attn.W_Q`, `run_with_cache(tokens, names_filter=...)` returning an
`ActivationCache` (`cache["pattern", 0]`), `run_with_hooks(tokens, fwd_hooks=[(name or filter, fn)])` with
hook functions `fn(activation, hook)` (`hook.name`), `add_hook` / `reset_hooks` / `hooks(...)`. It runs the
one-instance ensemble underneath, so its numbers are the ensemble's.

The forward returns the outputs at every position ([batch, pos, d_out], TransformerLens' habit) unless
`readout` says otherwise ("last" or a number of last positions, as the ensemble takes it).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from headway.errors import ConfigError
from headway.model.cache import ActivationCache
from headway.model.config import LensConfig
from headway.model.hooks import NamesFilter, filter_names
from headway.model.transformer import EnsembleTransformer

# A TransformerLens-style hook function: fn(activation, hook) -> a replacement, or None to keep it.
HookFn = Callable[..., Tensor | None]
HookSpec = tuple[str | Callable[[str], bool], HookFn]
# Weights TransformerLens stacks over layers, and the block module each lives in.
LAYER_WEIGHTS = {**dict.fromkeys(("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"), "attn"),
                 **dict.fromkeys(("W_in", "b_in", "W_out", "b_out"), "mlp")}
MODEL_WEIGHTS = {"W_E": ("embed", "W_E"), "W_pos": ("pos_embed", "W_pos"), "W_U": ("unembed", "W_U"),
                 "b_U": ("unembed", "b_U")}
MODULES = ("blocks", "embed", "pos_embed", "ln_final", "unembed")
# TransformerLens' layer-type words in `act_name(name, layer, layer_type)`.
LAYER_TYPES = {"a": "attn", "attn": "attn", "attention": "attn", "m": "mlp", "mlp": "mlp", "ln1": "ln1",
               "ln2": "ln2", "b": "", "block": "", "blocks": ""}


@dataclass(frozen=True)
class HookPoint:
    """What a hook function receives as `hook`: the hook point's name and its layer."""

    name: str

    def layer(self) -> int | None:
        """The block index of this hook point (None for a model-level point such as hook_embed)."""
        parts = self.name.split(".")
        return int(parts[1]) if parts[0] == "blocks" else None


class Unstacked:
    """A read-only view of an ensemble module whose parameters come without the instance axis
    (`model.blocks[0].attn.W_Q` is [n_heads, d_model, d_head]); submodules come the same way."""

    def __init__(self, module: nn.Module) -> None:
        object.__setattr__(self, "_module", module)

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._module, name)
        if isinstance(value, nn.Parameter):
            return value[0]
        if isinstance(value, nn.ModuleList):
            return [Unstacked(module) for module in value]
        return Unstacked(value) if isinstance(value, nn.Module) else value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("weights of the single-model view are read-only attributes; change them in place "
                             "(model.blocks[0].attn.W_Q[1] = 0 under torch.no_grad()) or with load_state_dict")

    def __dir__(self) -> list[str]:
        return [name for name, _ in self._module.named_parameters(recurse=False)] + list(self._module._modules)

    def __repr__(self) -> str:
        return f"Unstacked({type(self._module).__name__})"


class SingleModel(nn.Module):
    """One transformer of an ensemble, used without the instance axis (see the module docstring)."""

    def __init__(self, ensemble: EnsembleTransformer, run: Any = None) -> None:
        """`ensemble` holds the one instance; `run` is its RunConfig where known (`load_single` sets it)."""
        super().__init__()
        if ensemble.n_instances != 1:
            raise ConfigError(f"a SingleModel holds one instance; this ensemble has {ensemble.n_instances}: use "
                              "ensemble.instance(e)")
        self.ensemble = ensemble
        self.run = run
        self.cfg = LensConfig.of(ensemble.cfg, ensemble.n_ctx, ensemble.d_vocab, ensemble.d_out)
        self._hooks: dict[str, list[HookFn]] = {}

    # --- weights under TransformerLens' names ------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name in LAYER_WEIGHTS:
            return self._stacked(LAYER_WEIGHTS[name], name)
        if name in MODEL_WEIGHTS:
            module, weight = MODEL_WEIGHTS[name]
            return getattr(getattr(self.ensemble, module), weight)[0]
        if name in MODULES:
            return getattr(Unstacked(self.ensemble), name)
        return super().__getattr__(name)

    def _stacked(self, module: str, weight: str) -> Tensor:
        """A block weight of every layer, [n_layers, …]."""
        if module == "mlp" and self.cfg.attn_only:
            raise AttributeError(f"{weight}: this model is attention-only (no MLP)")
        return torch.stack([getattr(getattr(block, module), weight)[0] for block in self.ensemble.blocks])

    def state_dict(self) -> dict[str, Tensor]:
        """The weights under TransformerLens' names and shapes (no instance axis), as detached views."""
        return {name: param.detach()[0] for name, param in self.ensemble.named_parameters()}

    def load_state_dict(self, state: dict[str, Tensor]) -> None:
        """Load weights of TransformerLens' shapes (what `state_dict` returns); every name must be there."""
        self.ensemble.load_instances({name: tensor[None] for name, tensor in state.items()})

    @property
    def device(self) -> torch.device:
        """Where the weights are."""
        return self.ensemble.embed.W_E.device

    def residual_directions(self, outputs: int | Tensor) -> Tensor:
        """The residual-stream direction of output index (or indices) `outputs`: `ln_final.w ⊙ W_U[:, o]`
        ([…, d_model]); the LayerNorm gain is folded in here, as TransformerLens folds it into W_U."""
        directions = self.W_U.T[torch.as_tensor(outputs, device=self.device).long()]
        return directions * self.ensemble.ln_final.w[0] if self.cfg.normalization_type else directions

    def apply_final_ln(self, stack: Tensor) -> Tensor:
        """`ln_final` (statistics, gain and bias) applied to each row of `stack` [..., d_model]."""
        if self.cfg.normalization_type is None:
            return stack
        ln = self.ensemble.ln_final
        return torch.addcmul(ln.b[0], F.layer_norm(stack, stack.shape[-1:]), ln.w[0])

    # --- running ---------------------------------------------------------------------------------

    def _tokens(self, tokens: Tensor | np.ndarray) -> Tensor:
        """Tokens as int64 on the model's device, checked to be [batch, pos] or [batch, pos, slots]."""
        tokens = torch.as_tensor(tokens, device=self.device)
        if tokens.dim() not in (2, 3) or tokens.dtype.is_floating_point or tokens.dtype == torch.bool:
            raise ConfigError(f"tokens of shape {tuple(tokens.shape)} and dtype {tokens.dtype}: a single model takes "
                              "integer tokens [batch, pos] or [batch, pos, slots], with no instance axis")
        return tokens.long()[None]

    def forward(self, tokens: Tensor | np.ndarray, readout: str | int = "all") -> Tensor:
        """Outputs [batch, pos, d_out] at every position (`readout="last"`: [batch, d_out]; k: the last k)."""
        return self._run(tokens, self._hooks, readout)

    def _run(self, tokens: Tensor | np.ndarray, hooks: dict[str, list[HookFn]], readout: str | int) -> Tensor:
        """The ensemble's forward on `tokens` with `hooks` (name → functions, run in order)."""
        adapted = {name: _adapter(name, fns) for name, fns in hooks.items() if fns}
        return self.ensemble(self._tokens(tokens), hooks=adapted or None, readout=readout)[0]

    def run_with_cache(self, tokens: Tensor | np.ndarray, names_filter: NamesFilter = None,
                       readout: str | int = "all", remove_batch_dim: bool = False) -> tuple[Tensor, ActivationCache]:
        """(outputs, cache): the forward's outputs and the activations `names_filter` selects (all by default;
        a name, a list of names or a predicate), recorded after any hooks added with `add_hook`."""
        store: dict[str, Tensor] = {}
        hooks = {name: list(fns) for name, fns in self._hooks.items()}
        for name in filter_names(names_filter, self.ensemble.hook_names()):
            hooks.setdefault(name, []).append(_recorder(store))
        out = self._run(tokens, hooks, readout)
        cache = ActivationCache(store, self)
        return out, cache.remove_batch_dim() if remove_batch_dim else cache

    def run_with_hooks(self, tokens: Tensor | np.ndarray, fwd_hooks: Sequence[HookSpec] = (),
                       readout: str | int = "all") -> Tensor:
        """The forward with `fwd_hooks` added for this call: (hook name or predicate on names, fn) pairs,
        fn(activation, hook) returning a replacement or None (in-place edits of the activation count)."""
        hooks = {name: list(fns) for name, fns in self._hooks.items()}
        for name, fn in self._expand(fwd_hooks):
            hooks.setdefault(name, []).append(fn)
        return self._run(tokens, hooks, readout)

    def add_hook(self, name: str | Callable[[str], bool], hook: HookFn) -> None:
        """Keep `hook` on the hook point `name` (or every point a predicate accepts) for every later call."""
        for point, fn in self._expand([(name, hook)]):
            self._hooks.setdefault(point, []).append(fn)

    def reset_hooks(self) -> None:
        """Remove every hook added with `add_hook`."""
        self._hooks = {}

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[HookSpec] = ()) -> Iterator[SingleModel]:
        """Within the block, `fwd_hooks` apply to every call; afterwards the model's hooks are as before."""
        before = {name: list(fns) for name, fns in self._hooks.items()}
        try:
            for name, fn in fwd_hooks:
                self.add_hook(name, fn)
            yield self
        finally:
            self._hooks = before

    def _expand(self, specs: Sequence[HookSpec]) -> list[tuple[str, HookFn]]:
        """(hook name, fn) for every hook point each (name or predicate, fn) pair selects."""
        pairs = []
        for name, fn in specs:
            if not callable(fn):
                raise ConfigError(f"the hook for {name!r} is {type(fn).__name__}, not a function fn(activation, hook)")
            pairs += [(point, fn) for point in filter_names(name, self.ensemble.hook_names())]
        return pairs

    # --- hook names ------------------------------------------------------------------------------

    def hook_names(self) -> list[str]:
        """Every hook point, in module-tree order (the ensemble's names)."""
        return self.ensemble.hook_names()

    @property
    def hook_dict(self) -> dict[str, HookPoint]:
        """Hook name → HookPoint, as TransformerLens' `model.hook_dict`."""
        return {name: HookPoint(name) for name in self.hook_names()}

    def act_name(self, name: str, layer: int | None = None, layer_type: str | None = None) -> str:
        """The full hook name of a TransformerLens short name: act_name("pattern", 0) is
        "blocks.0.attn.hook_pattern", act_name("normalized", 1, "ln2") "blocks.1.ln2.hook_normalized",
        act_name("embed") "hook_embed"; a full name is returned as it is. Unknown or ambiguous: KeyError."""
        names = self.hook_names()
        if layer is None and layer_type is None and name in names:
            return name
        local = name if name.startswith("hook_") else f"hook_{name}"
        found = [n for n in names if n.rsplit(".", 1)[-1] == local]
        if layer is None:
            found = [n for n in found if not n.startswith("blocks.")]
        else:
            n_layers = self.cfg.n_layers
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


def _recorder(store: dict[str, Tensor]) -> HookFn:
    """A hook function that keeps a detached copy of the activation under its hook name."""
    def record(activation: Tensor, hook: HookPoint) -> None:
        store[hook.name] = activation.detach()
    return record


def _adapter(name: str, fns: list[HookFn]) -> Callable[[Tensor, str], Tensor | None]:
    """The ensemble hook running TransformerLens-style `fns` in order on the activation of its one instance."""
    point = HookPoint(name)

    def run(tensor: Tensor, _: str) -> Tensor | None:
        value, replaced = tensor[0], False
        for fn in fns:
            out = fn(value, hook=point)
            if out is not None:
                value, replaced = out, True
        return value[None] if replaced else None

    return run
