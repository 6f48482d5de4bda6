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
from headway.model.factored import FactoredMatrix
from headway.model.hooks import HookDispatch, HookedModule, NamesFilter, filter_names
from headway.model.names import find_hook_name
from headway.model.transformer import EnsembleTransformer, LayerNorm
from headway.settings import check_choice, is_integer

# A TransformerLens-style hook function: fn(activation, hook) -> a replacement, or None to keep it.
HookFn = Callable[..., Tensor | None]
HookSpec = tuple[str | Callable[[str], bool], HookFn]
# Weights TransformerLens stacks over layers, and the block module each lives in.
LAYER_WEIGHTS = {**dict.fromkeys(("W_Q", "W_K", "W_V", "W_O", "b_Q", "b_K", "b_V", "b_O"), "attn"),
                 **dict.fromkeys(("W_in", "b_in", "W_out", "b_out"), "mlp")}
MODEL_WEIGHTS = {"W_E": ("embed", "W_E"), "W_pos": ("pos_embed", "W_pos"), "W_U": ("unembed", "W_U"),
                 "b_U": ("unembed", "b_U")}
MODULES = ("blocks", "embed", "pos_embed", "ln_final", "unembed")
RETURN_TYPES = ("logits", "loss", "both", None)
HOOK_DIRECTIONS = ("fwd", "bwd", "both")


@dataclass(frozen=True)
class ViewConfig(LensConfig):
    """A single model's `cfg`: its shape under TransformerLens' names, and `device`, where its weights are."""

    device: str = "cpu"


class HookPoint:
    """What a hook function receives as `hook`, and what `model.hook_dict[name]` or an attribute such as
    `model.blocks[0].attn.hook_z` gives: the point's name, its layer, a `ctx` dict that persists across calls
    (until `clear_contexts`), and `add_hook` / `remove_hooks` on the model that owns it."""

    def __init__(self, name: str, owner: SingleModel | None = None) -> None:
        self.name, self.owner, self.ctx = name, owner, {}

    def layer(self) -> int | None:
        """The block index of this hook point (None for a model-level point such as hook_embed)."""
        parts = self.name.split(".")
        return int(parts[1]) if parts[0] == "blocks" else None

    def add_hook(self, hook: HookFn, dir: str = "fwd", is_permanent: bool = False) -> None:  # noqa: A002 - TL's
        """Keep `hook` on this point for every later call of its model (see `SingleModel.add_hook`)."""
        self._model().add_hook(self.name, hook, dir=dir, is_permanent=is_permanent)

    def remove_hooks(self, dir: str = "fwd", including_permanent: bool = False) -> None:  # noqa: A002 - TL's
        """Remove the hooks on this point (forward, backward or both)."""
        self._model()._remove(lambda name: name == self.name, dir, including_permanent)

    def clear_context(self) -> None:
        """Empty `ctx`."""
        self.ctx.clear()

    def _model(self) -> SingleModel:
        if self.owner is None:
            raise ConfigError(f"hook point {self.name} belongs to no model here; add hooks through the model")
        return self.owner

    def __repr__(self) -> str:
        return f"HookPoint({self.name!r})"


class Unstacked:
    """A read-only view of an ensemble module whose parameters come without the instance axis
    (`model.blocks[0].attn.W_Q` is [n_heads, d_model, d_head]); submodules and hook points (`.hook_z`) come the
    same way. Called, it runs the module on one model's activations as TransformerLens' module would
    (`model.ln_final(resid)`, `model.blocks[1](resid)`, `model.unembed(resid)`, `model.embed(tokens)`), with the
    model's hooks on."""

    def __init__(self, module: nn.Module, owner: SingleModel, call: Callable[..., Tensor] | None = None) -> None:
        object.__setattr__(self, "_module", module)
        object.__setattr__(self, "_owner", owner)
        object.__setattr__(self, "_call", call)

    def __getattr__(self, name: str) -> Any:
        module = self._module
        if isinstance(module, HookedModule) and name in getattr(module, "hook", {}):
            return self._owner.hook_dict[module.hook[name]]
        value = getattr(module, name)
        if isinstance(value, nn.Parameter):
            return value[0]
        if isinstance(value, nn.ModuleList):
            return [Unstacked(child, self._owner) for child in value]
        return Unstacked(value, self._owner) if isinstance(value, nn.Module) else value

    def __call__(self, *inputs: Tensor) -> Tensor:
        if self._call is not None:
            return self._call(*inputs)
        module = self._module
        if not isinstance(module, HookedModule) or not inputs:
            raise TypeError(f"{type(module).__name__} is not a module headway can run on its own; call the model")
        x = inputs[0]
        if any(other is not x and other is not None for other in inputs[1:]):
            raise ConfigError(f"{type(module).__name__} reads one stream: its queries, keys and values all come from "
                              "the first input; give the others as the same tensor or leave them out")
        d_model, any_rank = self._owner.cfg.d_model, isinstance(module, LayerNorm)
        if not isinstance(x, Tensor) or x.dim() < 1 or x.shape[-1] != d_model or (not any_rank and x.dim() != 3):
            shape = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
            need = "[..., d_model]" if any_rank else "[batch, pos, d_model]"
            raise ConfigError(f"{type(module).__name__} takes {need} with d_model = {d_model}; got {shape}")
        return module(x[None], self._owner._dispatch())[0]

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
        self._lens = LensConfig.of(ensemble.cfg, ensemble.n_ctx, ensemble.d_vocab, ensemble.d_out)
        self.n_slots, self.slot_vocab = _slots(run, n_slots, ensemble.d_vocab)
        self._hooks: dict[str, list[HookFn]] = {}
        self._bwd_hooks: dict[str, list[HookFn]] = {}
        self._permanent: set[tuple[str, str, int]] = set()  # (direction, point, id(fn)) that reset_hooks keeps
        self._points: dict[str, HookPoint] = {}

    @property
    def cfg(self) -> ViewConfig:
        """The model's shape under TransformerLens' config names, and `device`."""
        return ViewConfig(**vars(self._lens), device=str(self.device))

    # --- weights under TransformerLens' names ------------------------------------------------------

    def __getattr__(self, name: str) -> Any:
        if name in LAYER_WEIGHTS:
            return self._stacked(LAYER_WEIGHTS[name], name)
        if name in MODEL_WEIGHTS:
            module, weight = MODEL_WEIGHTS[name]
            return getattr(getattr(self.ensemble, module), weight)[0]
        if name in MODULES:
            calls = {"embed": self._embed, "pos_embed": self._pos_embed, "unembed": self._unembed}
            module = getattr(self.ensemble, name)
            if isinstance(module, nn.ModuleList):
                return [Unstacked(child, self) for child in module]
            return Unstacked(module, self, calls.get(name))
        if name.startswith("hook_") and name in self.ensemble.hook_names():
            return self.hook_dict[name]
        return super().__getattr__(name)

    def _stacked(self, module: str, weight: str) -> Tensor:
        """A block weight of every layer, [n_layers, …]."""
        if module == "mlp" and self.cfg.attn_only:
            raise AttributeError(f"{weight}: this model is attention-only (no MLP)")
        return torch.stack([getattr(getattr(block, module), weight)[0] for block in self.ensemble.blocks])

    @property
    def OV(self) -> FactoredMatrix:  # noqa: N802 - TransformerLens' name
        """W_V @ W_O of every head, factored: [n_layers, n_heads, d_model, d_model] (`model.OV[l, h].AB`)."""
        return FactoredMatrix(self.W_V, self.W_O)

    @property
    def QK(self) -> FactoredMatrix:  # noqa: N802 - TransformerLens' name
        """W_Q @ W_K^T of every head, factored: [n_layers, n_heads, d_model, d_model]; the attention score of
        query residual x and key residual y is x @ QK @ y / sqrt(d_head), biases and LayerNorm aside."""
        return FactoredMatrix(self.W_Q, self.W_K.transpose(-2, -1))

    @property
    def W_E_pos(self) -> Tensor:  # noqa: N802 - TransformerLens' name
        """The token and position embeddings stacked, [d_vocab + n_ctx, d_model]."""
        return torch.cat([self.W_E, self.W_pos])

    def all_head_labels(self) -> list[str]:
        """"L{layer}H{head}" for every head, in the order `stack_head_results` stacks them."""
        return [f"L{layer}H{head}" for layer in range(self.cfg.n_layers) for head in range(self.cfg.n_heads)]

    def accumulated_bias(self, layer: int, mlp_input: bool = False, include_mlp_biases: bool = True) -> Tensor:
        """The biases the blocks before `layer` add to the residual stream (b_O, and b_out with
        `include_mlp_biases`), plus that layer's b_O with `mlp_input`: [d_model]."""
        n = self.cfg.n_layers
        if not is_integer(layer) or not 0 <= layer <= n or (mlp_input and layer == n):
            raise ConfigError(f"layer = {layer!r} is out of range; give 0..{n} (0..{n - 1} with mlp_input)")
        total = torch.zeros(self.cfg.d_model, device=self.device)
        for index in range(layer + (1 if mlp_input else 0)):
            total = total + self.b_O[index]
            if include_mlp_biases and index < layer and not self.cfg.attn_only:
                total = total + self.b_out[index]
        return total

    def set_use_attn_result(self, use_attn_result: bool) -> None:
        """Whether attention emits `blocks.L.attn.hook_result`, each head's output [batch, pos, head, d_model]
        (z @ W_O per head; their sum plus b_O is hook_attn_out), to read, cache or replace."""
        self.ensemble.use_attention_results(use_attn_result)

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

    def tokens_to_residual_directions(self, outputs: int | Tensor) -> Tensor:
        """TransformerLens' name for `residual_directions` (headway's outputs are indices, not strings)."""
        return self.residual_directions(outputs)

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

    def forward(self, tokens: Tensor | np.ndarray, return_type: str | None = "logits", readout: str | int = "all",
                *, targets: Tensor | np.ndarray | None = None) -> Any:
        """Outputs [batch, pos, d_out] at every position (`readout="last"`: [batch, d_out]; k: the last k).
        `return_type` as TransformerLens': "logits", "loss" (the run's training loss of these tokens against
        `targets` [batch, n_targets], as the trainer computes it), "both" ((outputs, loss)) or None."""
        return self._run(tokens, self._hooks, self._bwd_hooks, readout, return_type, targets)

    def _run(self, tokens: Tensor | np.ndarray, hooks: dict[str, list[HookFn]], bwd_hooks: dict[str, list[HookFn]],
             readout: str | int, return_type: str | None = "logits", targets: Any = None) -> Any:
        """The ensemble's forward on `tokens` with forward and backward `hooks` (name → functions, in order),
        returning what `return_type` asks for."""
        if return_type not in RETURN_TYPES:
            raise ConfigError(f"return_type = {return_type!r} is unknown; choose 'logits', 'loss', 'both' or None")
        tokens = self._tokens(tokens)
        dispatch = self._adapted(hooks, bwd_hooks)
        if return_type in ("logits", None):
            out = self.ensemble(tokens, hooks=dispatch or None, readout=readout)[0]
            return out if return_type else None
        loss_fn, targets = self._loss(targets, tokens.shape[1])
        outputs = self.ensemble(tokens, hooks=dispatch or None, readout="all")  # [1, batch, pos, d_out]
        loss = loss_fn(lambda _tokens, readout="last": outputs[:, :, -1] if readout == "last"
                       else outputs[:, :, -readout:], tokens, targets)[0]
        if return_type == "loss":
            return loss
        chosen = (outputs[0] if readout == "all" else outputs[0, :, -1] if readout == "last"
                  else outputs[0, :, -readout:])
        return chosen, loss

    def _loss(self, targets: Any, batch: int) -> tuple[Callable[..., Tensor], Tensor]:
        """The run's training loss function and `targets` as [1, batch, n_targets] on the model's device."""
        if self.run is None:
            raise ConfigError("return_type 'loss' needs the model's run (its task and loss): load it with load_single")
        if targets is None:
            raise ConfigError("return_type 'loss' needs targets=[batch, n_targets]: headway's tasks are not "
                              "next-token prediction, so the loss is not read off the tokens (run.validation_data()"
                              " gives tokens and targets)")
        targets = _integers(targets, "targets")
        task = self.run.task
        want = (batch, task.train_readout_positions * task.d_out // task.vocab)  # blocks of vocab outputs read
        if tuple(targets.shape) != want:
            raise ConfigError(f"targets of shape {tuple(targets.shape)} do not fit: this run trains on {want[1]} "
                              f"targets per example, [batch, {want[1]}] = {list(want)}")
        return self.run.training_loss(), targets.to(self.device)[None]

    def _adapted(self, hooks: dict[str, list[HookFn]], bwd_hooks: dict[str, list[HookFn]]) -> dict[str, Any]:
        """The ensemble hooks running these TransformerLens-style forward and backward hooks."""
        points = self.hook_dict
        return {name: _adapter(points[name], hooks.get(name, []), bwd_hooks.get(name, []))
                for name in {*hooks, *bwd_hooks} if hooks.get(name) or bwd_hooks.get(name)}

    def _dispatch(self) -> HookDispatch:
        """The model's kept hooks as the dispatch a module of the ensemble runs with."""
        return HookDispatch(self._adapted(self._hooks, self._bwd_hooks))

    def _embed(self, tokens: Tensor | np.ndarray) -> Tensor:
        """The token embeddings of `tokens` (slots summed), [batch, pos, d_model]: TransformerLens' `embed`."""
        ids = self._tokens(tokens)[0]
        rows = self.W_E[ids]
        return rows.sum(-2) if ids.dim() == 3 else rows

    def _pos_embed(self, tokens: Tensor | np.ndarray) -> Tensor:
        """The position embeddings of `tokens`' positions, [batch, pos, d_model]: TransformerLens' `pos_embed`."""
        ids = self._tokens(tokens)[0]
        batch, pos = ids.shape[:2]
        return self.W_pos[:pos].expand(batch, pos, -1)

    def _unembed(self, residual: Tensor) -> Tensor:
        """`residual @ W_U + b_U` on [..., d_model]: TransformerLens' `unembed` (apply `ln_final` first)."""
        if not isinstance(residual, Tensor) or residual.dim() < 1 or residual.shape[-1] != self.cfg.d_model:
            shape = tuple(residual.shape) if isinstance(residual, Tensor) else type(residual).__name__
            raise ConfigError(f"unembed takes [..., d_model] with d_model = {self.cfg.d_model}; got {shape}")
        return residual @ self.W_U + self.b_U

    def run_with_cache(self, tokens: Tensor | np.ndarray, names_filter: NamesFilter = None,
                       readout: str | int = "all", remove_batch_dim: bool = False, return_type: str | None = "logits",
                       *, targets: Tensor | np.ndarray | None = None) -> tuple[Any, ActivationCache]:
        """(outputs, cache): the forward's outputs (or what `return_type` asks for) and the activations
        `names_filter` selects (all by default; a name, a list of names or a predicate), recorded after any
        hooks added with `add_hook`."""
        store: dict[str, Tensor] = {}
        hooks = {name: list(fns) for name, fns in self._hooks.items()}
        for name in filter_names(names_filter, self.hook_names()):
            hooks.setdefault(name, []).append(_recorder(store))
        out = self._run(tokens, hooks, self._bwd_hooks, readout, return_type, targets)
        if "hook_pos_embed" in store:  # the same for every example: [batch, pos, d_model] as a view, as TL has it
            store["hook_pos_embed"] = store["hook_pos_embed"].expand(self._tokens(tokens).shape[1], -1, -1)
        cache = ActivationCache(store, self)
        return out, cache.remove_batch_dim() if remove_batch_dim else cache

    def run_with_hooks(self, tokens: Tensor | np.ndarray, fwd_hooks: Sequence[HookSpec] = (),
                       bwd_hooks: Sequence[HookSpec] = (), reset_hooks_end: bool = True, clear_contexts: bool = False,
                       return_type: str | None = "logits", readout: str | int = "all",
                       *, targets: Tensor | np.ndarray | None = None) -> Any:
        """The forward with `fwd_hooks` added for this call: (hook name or predicate on names, fn) pairs,
        fn(activation, hook) returning a replacement or None (in-place edits of the activation count).
        `bwd_hooks` get the gradient at their point when the output is differentiated (fn(grad, hook), a
        replacement or None). With `reset_hooks_end=False` both stay on the model, as in TransformerLens."""
        with self.hooks(fwd_hooks, bwd_hooks, reset_hooks_end, clear_contexts):
            return self._run(tokens, self._hooks, self._bwd_hooks, readout, return_type, targets)

    def add_hook(self, name: str | Callable[[str], bool], hook: HookFn, dir: str = "fwd",  # noqa: A002 - TL's
                 is_permanent: bool = False) -> None:
        """Keep `hook` on the hook point `name` (or every point a predicate accepts) for every later call: a
        forward hook (`dir="fwd"`) or a backward one (`"bwd"`, given the gradient there); a permanent one
        survives `reset_hooks()`."""
        check_choice("dir", dir, ("fwd", "bwd"))
        kept = self._hooks if dir == "fwd" else self._bwd_hooks
        for point, fn in self._expand([(name, hook)]):
            kept.setdefault(point, []).append(fn)
            if is_permanent:
                self._permanent.add((dir, point, id(fn)))

    def reset_hooks(self, clear_contexts: bool = True, direction: str = "both",
                    including_permanent: bool = False) -> None:
        """Remove the hooks added with `add_hook` (forward, backward or both; permanent ones only with
        `including_permanent`) and, by default, empty every hook point's `ctx`."""
        self._remove(lambda _name: True, direction, including_permanent)
        if clear_contexts:
            self.clear_contexts()

    def _remove(self, which: Callable[[str], bool], direction: str, including_permanent: bool) -> None:
        """Drop the kept hooks on the points `which` accepts, in `direction` (fwd, bwd or both)."""
        check_choice("direction", direction, HOOK_DIRECTIONS)
        for kind, kept in (("fwd", self._hooks), ("bwd", self._bwd_hooks)):
            if direction not in (kind, "both"):
                continue
            for point in [name for name in kept if which(name)]:
                kept[point] = [fn for fn in kept[point]
                               if not including_permanent and (kind, point, id(fn)) in self._permanent]
                if not kept[point]:
                    del kept[point]
            if including_permanent:
                self._permanent = {entry for entry in self._permanent if entry[0] != kind or not which(entry[1])}

    def clear_contexts(self) -> None:
        """Empty the `ctx` dict of every hook point."""
        for point in self._points.values():
            point.clear_context()

    @contextmanager
    def hooks(self, fwd_hooks: Sequence[HookSpec] = (), bwd_hooks: Sequence[HookSpec] = (),
              reset_hooks_end: bool = True, clear_contexts: bool = False) -> Iterator[SingleModel]:
        """Within the block, `fwd_hooks` and `bwd_hooks` apply to every call; afterwards the model's hooks are
        as before (unless `reset_hooks_end=False`)."""
        before = ({name: list(fns) for name, fns in self._hooks.items()},
                  {name: list(fns) for name, fns in self._bwd_hooks.items()})
        try:
            for name, fn in fwd_hooks:
                self.add_hook(name, fn)
            for name, fn in bwd_hooks:
                self.add_hook(name, fn, dir="bwd")
            yield self
        finally:
            if reset_hooks_end:
                self._hooks, self._bwd_hooks = before
            if clear_contexts:
                self.clear_contexts()

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
        """Hook name → HookPoint, as TransformerLens' `model.hook_dict` (the same objects every time, so a
        point's `ctx` persists)."""
        for name in self.hook_names():
            if name not in self._points:
                self._points[name] = HookPoint(name, self)
        return {name: self._points[name] for name in self.hook_names()}

    @property
    def mod_dict(self) -> dict[str, Any]:
        """Module name → module (weights without the instance axis) and hook name → HookPoint, as
        TransformerLens' `model.mod_dict`."""
        modules = {name: Unstacked(module, self) for name, module in self.ensemble.named_modules() if name}
        return {**modules, **self.hook_dict}

    def act_name(self, name: str, layer: int | None = None, layer_type: str | None = None) -> str:
        """The full hook name of a TransformerLens short name: act_name("pattern", 0) is
        "blocks.0.attn.hook_pattern", act_name("normalized", 1, "ln2") "blocks.1.ln2.hook_normalized",
        act_name("embed") "hook_embed"; a full name is returned as it is. Unknown or ambiguous: KeyError."""
        return find_hook_name(self.hook_names(), self.cfg.n_layers, name, layer, layer_type)


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


def _adapter(point: HookPoint, fns: list[HookFn], bwd_fns: list[HookFn]) -> Callable[[Tensor, str], Tensor | None]:
    """The ensemble hook running TransformerLens-style forward `fns` in order on the activation of its one
    instance, each replacement checked against the activation's shape, and registering `bwd_fns` on its
    gradient."""

    def run(tensor: Tensor, _: str) -> Tensor | None:
        value, replaced = tensor[0], False
        for fn in fns:
            out = fn(value, hook=point)
            if out is None:
                continue
            if not isinstance(out, Tensor) or out.shape != value.shape:
                got = f"shape {list(out.shape)}" if isinstance(out, Tensor) else f"a {type(out).__name__}"
                raise ConfigError(f"the hook {getattr(fn, '__name__', fn)!r} on {point.name} returned {got}; the "
                                  f"activation there is {list(value.shape)} (no instance axis): return a tensor of "
                                  "that shape, or None after editing it in place")
            value, replaced = out, True
        kept = value[None] if replaced else tensor
        if bwd_fns and kept.requires_grad:
            kept.register_hook(_gradient_hook(point, bwd_fns))
        return kept if replaced or bwd_fns else None

    return run


def _gradient_hook(point: HookPoint, fns: list[HookFn]) -> Callable[[Tensor], Tensor | None]:
    """A tensor hook running backward `fns` in order on the gradient of one instance's activation."""

    def run(grad: Tensor) -> Tensor | None:
        value, replaced = grad[0], False
        for fn in fns:
            out = fn(value, hook=point)
            if out is not None:
                value, replaced = out, True
        return value[None] if replaced else None

    return run
