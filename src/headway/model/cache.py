"""The activations of one forward of a single-model view, with TransformerLens' `ActivationCache` habits.

Keys are hook names ("blocks.0.attn.hook_pattern") or TransformerLens' short forms (`cache["pattern", 0]`,
`cache["normalized", 1, "ln2"]`, `cache["embed"]`). Residual-stream helpers follow TransformerLens'
semantics: `accumulated_resid` (the stream before each layer and after the last), `decompose_resid` (what
each component wrote), `stack_head_results` (what each head wrote, z @ W_O, without b_O), `apply_ln_to_stack`
(centred and divided by the LayerNorm scale of that layer's input) and `logit_attrs`. headway does not fold
LayerNorm into the unembedding, so the residual direction of an output is `ln_final.w ⊙ W_U[:, output]`:
the logit attributions of a full `decompose_resid()` sum to the output less `ln_final.b @ W_U + b_U`.
Every `pos_slice` is applied to the position axis that the activation's hook name says it has, in
TransformerLens' forms (`headway.model.positions`); `cache.sliced(key, pos_slice)` does it for any activation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.model.names import find_hook_name
from headway.model.positions import PosSlice, position_axis, select_positions, shown
from headway.model.transformer import LN_EPS

if TYPE_CHECKING:
    from headway.model.single import SingleModel



class ActivationCache(Mapping[str, Tensor]):
    """Detached activations by hook name, without the instance axis ([batch, pos, …], or [pos, …] after
    `remove_batch_dim`), and the model they came from (for the weights the helpers need)."""

    def __init__(self, activations: dict[str, Tensor], model: SingleModel, has_batch_dim: bool = True) -> None:
        self._activations = activations
        self.model = model
        self.has_batch_dim = has_batch_dim

    def __getitem__(self, key: str | tuple[Any, ...]) -> Tensor:
        return self._activations[self._name(key)]

    def _name(self, key: str | tuple[Any, ...]) -> str:
        """The full hook name of `key` (a name or a TransformerLens short form), which this cache must hold."""
        if isinstance(key, str) and key in self._activations:
            return key
        names = [*self.model.hook_names(), *(n for n in self._activations if n not in self.model.hook_names())]
        name = find_hook_name(names, self.model.cfg.n_layers, *(key if isinstance(key, tuple) else (key,)))
        if name not in self._activations:
            short = "" if name in self.model.hook_names() else " (no such hook point)"
            raise KeyError(f"{name!r} is not in this cache{short}; it holds {len(self)} activations: run "
                           "run_with_cache with a names_filter that selects it")
        return name

    def sliced(self, key: str | tuple[Any, ...], pos_slice: PosSlice = None) -> Tensor:
        """The activation `key` with `pos_slice` applied to its position axis, found by its hook name (the
        query axis of patterns and scores): `cache.sliced(("z", 0), -1)` is z at the last position,
        [batch, head, d_head]. Every helper below slices through here."""
        name = self._name(key)
        return select_positions(self._activations[name], position_axis(name, self.has_batch_dim), pos_slice)

    def __iter__(self) -> Iterator[str]:
        return iter(self._activations)

    def __len__(self) -> int:
        return len(self._activations)

    def __repr__(self) -> str:
        return f"ActivationCache with keys {list(self._activations)}"

    def to(self, device: torch.device | str) -> ActivationCache:
        """The same activations on `device`."""
        return ActivationCache({k: v.to(device) for k, v in self.items()}, self.model, self.has_batch_dim)

    def remove_batch_dim(self) -> ActivationCache:
        """The activations of a batch of one without the batch axis (as TransformerLens' remove_batch_dim)."""
        if not self.has_batch_dim:
            return self
        sizes = {v.shape[0] for v in self.values()}
        if sizes - {1}:
            raise ValueError(f"remove_batch_dim needs a batch of one; this cache holds batches of {sorted(sizes)}")
        return ActivationCache({k: v[0] for k, v in self.items()}, self.model, has_batch_dim=False)

    # --- the residual stream -------------------------------------------------------------------

    def _layer(self, layer: int | None) -> int:
        """A layer index in 0..n_layers (None and -1: n_layers, the input to the unembedding)."""
        n = self.model.cfg.n_layers
        if layer is None or layer == -1:
            return n
        if not 0 <= layer <= n:
            raise ValueError(f"layer = {layer} is out of range; use 0..{n} (n_layers: the final stream), -1 or None")
        return layer

    def _stream(self, name: str, layer: int, pos_slice: PosSlice) -> Tensor:
        """A residual-stream activation (a model-level one for layer -1) at `pos_slice`."""
        return self.sliced((name, layer) if layer >= 0 else name, pos_slice)

    def accumulated_resid(self, layer: int | None = None, incl_mid: bool = False, apply_ln: bool = False,
                          pos_slice: PosSlice = None, mlp_input: bool = False,
                          return_labels: bool = False) -> Tensor | tuple[Tensor, list[str]]:
        """The residual stream before each layer up to `layer` ([components, batch, pos, d_model]; labels
        "0_pre", "0_mid", …, "final_post" for the stream after the last layer). With `apply_ln`, each
        component goes through that layer's LayerNorm scale; at the final layer through the whole
        `ln_final` (gain and bias, statistics of each component: the logit lens, `@ W_U + b_U` gives outputs)."""
        layer, n = self._layer(layer), self.model.cfg.n_layers
        parts, labels = [], []
        for index in range(layer + 1):
            if index == n:
                parts.append(self._stream("resid_post", n - 1, pos_slice))
                labels.append("final_post")
                continue
            parts.append(self._stream("resid_pre", index, pos_slice))
            labels.append(f"{index}_pre")
            if (incl_mid and index < layer) or (mlp_input and index == layer):
                parts.append(self._stream("resid_mid", index, pos_slice))
                labels.append(f"{index}_mid")
        stack = torch.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input, pos_slice, recompute_ln=layer == n)
        return (stack, labels) if return_labels else stack

    def decompose_resid(self, layer: int | None = None, mlp_input: bool = False, mode: str = "all",
                        apply_ln: bool = False, pos_slice: PosSlice = None, incl_embeds: bool = True,
                        return_labels: bool = False) -> Tensor | tuple[Tensor, list[str]]:
        """What each component wrote into the residual stream before `layer` ([components, batch, pos,
        d_model]: "embed", "pos_embed", then "{l}_attn_out" and "{l}_mlp_out"); they sum to the stream there.
        `mode` "attn" or "mlp" keeps one kind; `mlp_input` adds the layer's own attention output."""
        if mode not in ("all", "attn", "mlp"):
            raise ValueError(f"mode = {mode!r} is unknown; choose all, attn or mlp")
        layer = self._layer(layer)
        with_attn, with_mlp = mode != "mlp", mode != "attn" and not self.model.cfg.attn_only
        parts: list[Tensor] = []
        labels: list[str] = []
        if incl_embeds:
            parts += [self._stream("embed", -1, pos_slice), self._stream("pos_embed", -1, pos_slice)]
            labels += ["embed", "pos_embed"]
        for index in range(layer):
            if with_attn:
                parts.append(self._stream("attn_out", index, pos_slice))
                labels.append(f"{index}_attn_out")
            if with_mlp:
                parts.append(self._stream("mlp_out", index, pos_slice))
                labels.append(f"{index}_mlp_out")
        if mlp_input and with_attn:
            parts.append(self._stream("attn_out", layer, pos_slice))
            labels.append(f"{layer}_attn_out")
        stack = torch.stack(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input, pos_slice)
        return (stack, labels) if return_labels else stack

    def stack_head_results(self, layer: int | None = None, return_labels: bool = False,
                           incl_remainder: bool = False, pos_slice: PosSlice = None,
                           apply_ln: bool = False) -> Tensor | tuple[Tensor, list[str]]:
        """What every head of the layers before `layer` wrote (z @ W_O, without b_O), [layers·heads, batch,
        pos, d_model] labelled "L{l}H{h}"; `incl_remainder` adds the rest of the stream at `layer`."""
        layer = self._layer(layer)
        w_o = self.model.W_O
        parts, labels = [], []
        for index in range(layer):
            z = self.sliced(("z", index), pos_slice)  # [batch, pos, head, d_head] less what pos_slice drops
            parts.append(torch.einsum("...hd,hdm->h...m", z, w_o[index]))
            labels += [f"L{index}H{head}" for head in range(self.model.cfg.n_heads)]
        return self._stacked("stack_head_results", "head", parts, labels, layer, incl_remainder, apply_ln, pos_slice,
                             return_labels)

    def compute_head_results(self) -> None:
        """Add each head's output, z @ W_O per head ([batch, pos, head, d_model]), under
        "blocks.L.attn.hook_result" for every layer whose z this cache holds (what `set_use_attn_result`
        would have cached); results already held are kept."""
        w_o = self.model.W_O
        for layer in range(self.model.cfg.n_layers):
            z_name, name = f"blocks.{layer}.attn.hook_z", f"blocks.{layer}.attn.hook_result"
            if z_name in self._activations and name not in self._activations:
                self._activations[name] = torch.einsum("...hd,hdm->...hm", self._activations[z_name], w_o[layer])

    def stack_neuron_results(self, layer: int, pos_slice: PosSlice = None, neuron_slice: PosSlice = None,
                             return_labels: bool = False, incl_remainder: bool = False,
                             apply_ln: bool = False) -> Tensor | tuple[Tensor, list[str]]:
        """What every MLP neuron of the layers before `layer` wrote (post[n] · W_out[n], without b_out),
        [layers·neurons, batch, pos, d_model] labelled "L{l}N{n}"; `neuron_slice` picks neurons as a
        `pos_slice` picks positions; `incl_remainder` adds the rest of the stream at `layer`."""
        if self.model.cfg.attn_only:
            raise ConfigError("stack_neuron_results: this model is attention-only (no MLP neurons)")
        layer = self._layer(layer)
        w_out = self.model.W_out
        neurons = torch.arange(self.model.cfg.d_mlp)
        if neuron_slice is not None:
            neurons = select_positions(neurons, 0, neuron_slice).reshape(-1)
        parts, labels = [], []
        for index in range(layer):
            post = self.sliced(("post", index), pos_slice)[..., neurons.to(w_out.device)]
            parts.append(torch.einsum("...n,nm->n...m", post, w_out[index][neurons.to(w_out.device)]))
            labels += [f"L{index}N{int(n)}" for n in neurons]
        return self._stacked("stack_neuron_results", "neuron", parts, labels, layer, incl_remainder, apply_ln,
                             pos_slice, return_labels)

    def _stacked(self, method: str, writer: str, parts: list[Tensor], labels: list[str], layer: int,
                 incl_remainder: bool, apply_ln: bool, pos_slice: PosSlice,
                 return_labels: bool) -> Tensor | tuple[Tensor, list[str]]:
        """The components `parts` of the stream into `layer` as one stack, with the rest of the stream as
        "remainder" (`incl_remainder`) and that layer's LayerNorm scale applied (`apply_ln`)."""
        if not parts:
            raise ValueError(f"{method} needs layer >= 1: no {writer} writes before layer 0")
        stack = torch.cat(parts)
        if incl_remainder:
            total = self.accumulated_resid(layer, pos_slice=pos_slice)[-1]
            stack = torch.cat([stack, (total - stack.sum(0))[None]])
            labels.append("remainder")
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, pos_slice=pos_slice)
        return (stack, labels) if return_labels else stack

    def get_full_resid_decomposition(self, layer: int | None = None, mlp_input: bool = False,
                                     expand_neurons: bool = True, apply_ln: bool = False, pos_slice: PosSlice = None,
                                     return_labels: bool = False) -> Tensor | tuple[Tensor, list[str]]:
        """The stream into `layer` as every head's output, every neuron's (or, without `expand_neurons`, every
        MLP's), "embed", "pos_embed" and "bias" (the biases those leave out), in TransformerLens' order; the
        components sum to the stream there."""
        layer = self._layer(layer)
        parts: list[Tensor] = []
        labels: list[str] = []
        if layer + mlp_input > 0:
            heads, names = self.stack_head_results(layer + mlp_input, return_labels=True, pos_slice=pos_slice)
            parts.append(heads)
            labels += names
        if not self.model.cfg.attn_only and layer > 0:
            if expand_neurons:
                mlps, names = self.stack_neuron_results(layer, pos_slice=pos_slice, return_labels=True)
            else:
                mlps, names = self.decompose_resid(layer, pos_slice=pos_slice, mode="mlp", incl_embeds=False,
                                                   return_labels=True)
            parts.append(mlps)
            labels += names
        embeds = self.decompose_resid(0, pos_slice=pos_slice)
        parts.append(embeds)
        labels += ["embed", "pos_embed"]
        bias = self.model.accumulated_bias(layer, mlp_input, include_mlp_biases=expand_neurons)
        parts.append(bias.expand(1, *embeds.shape[1:]))
        labels.append("bias")
        stack = torch.cat(parts)
        if apply_ln:
            stack = self.apply_ln_to_stack(stack, layer, mlp_input, pos_slice)
        return (stack, labels) if return_labels else stack

    def stack_activation(self, name: str, layer: int | None = None, sublayer_type: str | None = None,
                         pos_slice: PosSlice = None) -> Tensor:
        """One activation (a short name, e.g. "pattern"; `sublayer_type` as act_name's layer_type, e.g. "ln1")
        of every layer before `layer`, at `pos_slice`, stacked: [layers, …]."""
        return torch.stack([self.sliced((name, index, sublayer_type), pos_slice)
                            for index in range(self._layer(layer))])

    def apply_ln_to_stack(self, residual_stack: Tensor, layer: int | None = None, mlp_input: bool = False,
                          pos_slice: PosSlice = None, batch_slice: PosSlice = None, has_batch_dim: bool = True,
                          recompute_ln: bool = False) -> Tensor:
        """Components of the input to `layer`'s ln1 (ln2 with `mlp_input`; ln_final at n_layers) centred and
        divided by that LayerNorm's scale on the whole stream, as the layer sees them, without its gain and
        bias (TransformerLens' meaning, exact for a folded model); unchanged without LayerNorm. With
        `recompute_ln` at n_layers, the whole `ln_final` (each component's own statistics, gain and bias: the
        logit lens). `pos_slice` must be the one the stack was built with; `batch_slice` picks examples of a
        stack with a batch axis (`has_batch_dim`) and of the stream alike."""
        layer, n = self._layer(layer), self.model.cfg.n_layers
        if batch_slice is not None and has_batch_dim:
            residual_stack = select_positions(residual_stack, 1, batch_slice)
        if self.model.cfg.normalization_type is None:
            return residual_stack
        if recompute_ln and layer == n:
            return self.model.apply_final_ln(residual_stack)
        stream = (self._stream("resid_post", n - 1, pos_slice) if layer == n
                  else self._stream("resid_mid" if mlp_input else "resid_pre", layer, pos_slice))
        if batch_slice is not None and self.has_batch_dim:
            stream = select_positions(stream, 0, batch_slice)
        if residual_stack.dim() < 2 or residual_stack.shape[1:] != stream.shape:
            raise ConfigError(f"a residual stack of shape {tuple(residual_stack.shape)} does not fit the stream at "
                              f"pos_slice = {shown(pos_slice)}, {tuple(stream.shape)}: a stack is [components, "
                              "*that shape]; give the pos_slice the stack was built with")
        scale = (stream.var(-1, unbiased=False, keepdim=True) + LN_EPS).sqrt()
        return (residual_stack - residual_stack.mean(-1, keepdim=True)) / scale

    def logit_attrs(self, residual_stack: Tensor, tokens: int | Tensor, incorrect_tokens: int | Tensor | None = None,
                    pos_slice: PosSlice = None) -> Tensor:
        """Each component's contribution to output `tokens`, less that to `incorrect_tokens` (same shape) when
        given: the final LayerNorm applied to the (raw) stack, dotted with `ln_final.w ⊙ W_U[:, token]`.
        [components, batch, pos] (or fewer axes). As TransformerLens reads them on a [components, batch, pos, d]
        stack, `tokens` is one output index, one per example [batch], one per position [pos] (when pos differs
        from batch; [1, pos] otherwise) or one per example and position [batch, pos]; on a [components, n, d]
        stack, one index or n of them. Other shapes are refused rather than broadcast."""
        directions = self.model.residual_directions(tokens)
        if incorrect_tokens is not None:
            wrong = self.model.residual_directions(incorrect_tokens)
            if wrong.shape != directions.shape:
                raise ConfigError(f"incorrect_tokens of shape {tuple(wrong.shape[:-1])} differ from tokens of shape "
                                  f"{tuple(directions.shape[:-1])}; give both the same shape")
            directions = directions - wrong
        scaled = self.apply_ln_to_stack(residual_stack, pos_slice=pos_slice)
        inner, given = tuple(scaled.shape[1:-1]), tuple(directions.shape[:-1])
        if len(inner) == 2 and given == inner[:1]:
            directions = directions[:, None]  # one token per example: the same at every position
        elif given not in ((), inner) and not (len(inner) == 2 and given in (inner[1:], (1, inner[1]))):
            raise ConfigError(f"tokens of shape {given} do not fit a stack of {tuple(scaled.shape)} "
                              "([components, *positions, d_model]): give one output index, one per example, one per "
                              "position, or one per example and position")
        return (scaled * directions).sum(-1)
