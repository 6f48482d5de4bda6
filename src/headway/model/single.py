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

Tokens are checked against the token slots the model sums per position (`n_slots`, known from its run or given):
a model of several slots takes [batch, pos, slots] only — [batch, pos] ids and an unbatched [pos, slots] prompt
are refused, never read as something else (`to_tokens` builds the tokens from symbol ids per slot); a model of
one slot takes [batch, pos], [batch, pos, 1] or one prompt [pos]. Without a known slot count (an
ensemble built without `n_slots`), tokens need the batch axis and their slot axis is taken as given.
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
from headway.settings import is_integer

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

    def __init__(self, ensemble: EnsembleTransformer, run: Any = None, n_slots: int | None = None) -> None:
        """`ensemble` holds the one instance; `run` is its RunConfig where known (`load_single` sets it), which
        gives the token slots per position; without a run, `n_slots` gives them (None: not known, not checked)."""
        super().__init__()
        if ensemble.n_instances != 1:
            raise ConfigError(f"a SingleModel holds one instance; this ensemble has {ensemble.n_instances}: use "
                              "ensemble.instance(e)")
        self.ensemble = ensemble
        self.run = run
        self.cfg = LensConfig.of(ensemble.cfg, ensemble.n_ctx, ensemble.d_vocab, ensemble.d_out)
        self.n_slots, self.slot_vocab = _slots(run, n_slots, ensemble.d_vocab)
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
        index = _integers(outputs, "outputs")
        if index.numel() and (index.min() < 0 or index.max() >= self.cfg.d_vocab_out):
            raise ConfigError(f"output index {_out_of(index, 0, self.cfg.d_vocab_out)} is out of range; this model "
                              f"has outputs 0..{self.cfg.d_vocab_out - 1}")
        directions = self.W_U.T[index.to(self.device)]
        return directions * self.ensemble.ln_final.w[0] if self.cfg.normalization_type else directions

    def apply_final_ln(self, stack: Tensor) -> Tensor:
        """`ln_final` (statistics, gain and bias) applied to each row of `stack` [..., d_model]."""
        if self.cfg.normalization_type is None:
            return stack
        ln = self.ensemble.ln_final
        return torch.addcmul(ln.b[0], F.layer_norm(stack, stack.shape[-1:]), ln.w[0])

    # --- running ---------------------------------------------------------------------------------

    def _tokens(self, tokens: Tensor | np.ndarray) -> Tensor:
        """Tokens as int64 [1, batch, pos(, slots)] on the model's device, checked against the slots the model
        sums per position and the ids each slot holds (see the module docstring)."""
        tokens = _integers(tokens, "tokens")
        shape, k = tuple(tokens.shape), self.n_slots
        if k is None:
            fits = tokens.dim() in (2, 3)
            need = "takes [batch, pos] or [batch, pos, slots], with no instance axis"
        elif k == 1:
            fits = tokens.dim() in (1, 2) or (tokens.dim() == 3 and shape[-1] == 1)
            need = "embeds one token per position and takes [batch, pos], [batch, pos, 1] or one prompt [pos]"
            tokens = tokens[None] if tokens.dim() == 1 else tokens
        else:
            fits = tokens.dim() == 3 and shape[-1] == k
            need = (f"sums {k} token slots per position and takes [batch, pos, {k}] (one prompt: [1, pos, {k}], e.g. "
                    "tokens[None]); model.to_tokens(ids) builds them from symbol ids per slot")
        if not fits:
            raise ConfigError(f"tokens of shape {shape} do not fit this model: it {need}")
        self._check_ids(tokens)
        return tokens.to(self.device)[None]

    def _check_ids(self, tokens: Tensor) -> None:
        """Refuse token ids the model does not embed, or (several slots) ids outside their slot's range."""
        if not tokens.numel():
            return
        if self.slot_vocab is not None and self.n_slots > 1:
            relative = tokens - self._slot_offsets(tokens.device)
            outside = (relative < 0) | (relative >= self.slot_vocab)
            if outside.any():
                where = outside.nonzero()[0]
                sv = self.slot_vocab
                raise ConfigError(f"token id {int(tokens[tuple(where)])} in slot {int(where[-1])} is outside that "
                                  f"slot's range: slot s holds s·{sv} … (s+1)·{sv} − 1; model.to_tokens(ids) adds the "
                                  "offsets to symbol ids per slot")
        elif tokens.min() < 0 or tokens.max() >= self.cfg.d_vocab:
            raise ConfigError(f"token id {_out_of(tokens, 0, self.cfg.d_vocab)} is out of range; this model embeds "
                              f"ids 0..{self.cfg.d_vocab - 1}")

    def _slot_offsets(self, device: torch.device) -> Tensor:
        """What slot s adds to its symbol ids, s·slot_vocab (`Task.slot_vocab`): [n_slots]."""
        return torch.arange(self.n_slots, device=device) * self.slot_vocab

    def to_tokens(self, ids: Tensor | np.ndarray | Sequence[Any]) -> Tensor:
        """Model tokens from symbol ids per slot (each 0..slot_vocab-1): [pos, slots] (one prompt) or [batch, pos,
        slots] gives [batch, pos, slots] with slot s offset by s·slot_vocab (the packed layouts' encoding); on a
        one-slot model, [pos] or [batch, pos] gives [batch, pos]. A task's own examples (`run.tokens(n)`,
        `run.validation_data().tokens`) are already model tokens."""
        if self.n_slots is None:
            raise ConfigError("this model does not know its token slots (its ensemble was built without "
                              "n_slots): load it with load_single, or build SingleModel(ensemble, n_slots=...)")
        ids = _integers(ids, "ids")
        k = self.n_slots
        if k == 1:
            if ids.dim() not in (1, 2):
                raise ConfigError(f"ids of shape {tuple(ids.shape)}: this model takes one id per position, [pos] or "
                                  "[batch, pos]")
            tokens = ids if ids.dim() == 2 else ids[None]
        else:
            if ids.dim() not in (2, 3) or ids.shape[-1] != k:
                raise ConfigError(f"ids of shape {tuple(ids.shape)}: give symbol ids per slot, [pos, {k}] for one "
                                  f"prompt or [batch, pos, {k}]")
            if ids.numel() and (ids.min() < 0 or ids.max() >= self.slot_vocab):
                raise ConfigError(f"symbol id {_out_of(ids, 0, self.slot_vocab)} is out of range; each slot holds "
                                  f"ids 0..{self.slot_vocab - 1}")
            tokens = (ids if ids.dim() == 3 else ids[None]) + self._slot_offsets(ids.device)
        self._check_ids(tokens)
        return tokens.to(self.device)

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


def _slots(run: Any, n_slots: int | None, d_vocab: int) -> tuple[int | None, int | None]:
    """(token slots per position, ids per slot) from the run's task, or from `n_slots` (ids per slot: d_vocab
    split evenly, the convention of `Task.slot_vocab`); (None, None) when neither is given."""
    if run is not None:
        task = run.task
        if n_slots is not None and n_slots != task.n_slots:
            raise ConfigError(f"n_slots = {n_slots}, but this run's task has {task.n_slots} token slots per position")
        return task.n_slots, task.slot_vocab
    if n_slots is None:
        return None, None
    if not is_integer(n_slots) or n_slots < 1 or d_vocab % n_slots:
        raise ConfigError(f"n_slots = {n_slots!r}: give a positive integer dividing d_vocab = {d_vocab}")
    return int(n_slots), d_vocab // int(n_slots)


def _integers(values: Any, what: str) -> Tensor:
    """`values` as an int64 tensor (on the device it is on); refused, naming `what`, unless they are integers."""
    if isinstance(values, str):
        raise ConfigError(f"{what} = {values!r}: headway models have no tokenizer; give integer ids")
    try:
        tensor = torch.as_tensor(np.asarray(values) if isinstance(values, (list, tuple)) else values)
    except (TypeError, ValueError, RuntimeError):
        raise ConfigError(f"{what} of type {type(values).__name__} are not integer ids") from None
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise ConfigError(f"{what} of dtype {tensor.dtype}: give integer ids")
    return tensor.long()


def _out_of(values: Tensor, low: int, high: int) -> int:
    """The first of `values` outside low..high-1, to name in a message."""
    return int(values[(values < low) | (values >= high)].flatten()[0])


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
