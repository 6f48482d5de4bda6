"""Path patching between the layers of a circuit: does a layer-t circuit head read what the layer-(t−1)
circuit heads wrote?

The *senders* (circuit heads of layer t−1) take their output on another example (the resample
source of `HeadIntervention`), but only along the path into the *receivers* (circuit heads of layer
t): the receivers' queries, keys and values (`channel` "q", "k", "v" or all three, "qkv") are
computed from the clean residual stream plus the change the senders' resampled outputs write into
it, through layer t's LayerNorm; every other head of layer t, and the direct path from the senders
to the readout, see the clean stream. The accuracy lost (`path_drop`) says the receivers read the
senders' output through that channel. Beside it: the senders resampled along every path
(`direct_drop`, the most there is to carry) and, as the null, the same senders patched into the
heads of layer t outside the circuit (`other_drop`, NaN when the circuit holds all of them).

Why another example and not the root-swapped one: in a stacked circuit the layer-1 head moves the
hop-1 symbol, which a root swap leaves unchanged, so only the last layer would ever show an effect.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headway.analysis.ablation import head_outputs, z_names
from headway.model.hooks import Hook, HookDispatch
from headway.model.transformer import EnsembleTransformer
from headway.analysis.retrieval.interventions import HeadIntervention

CHANNELS = ("qkv", "q", "k", "v")
COLUMNS = ("instance", "sender_layer", "receiver_layer", "senders", "receivers", "channel", "path_drop",
           "direct_drop", "other_drop")


def path_patching(heads: pd.DataFrame, intervention: HeadIntervention) -> pd.DataFrame:
    """One row per (instance, receiver layer t ≥ 1, channel) where layers t−1 and t both hold circuit heads."""
    model = intervention.model
    n, layers, n_heads = model.n_instances, intervention.layers, intervention.heads
    circuit = np.zeros((n, layers, n_heads), dtype=bool)
    inside = heads[heads.in_circuit]
    circuit[inside.instance.to_numpy(), inside.layer.to_numpy(), inside["head"].to_numpy()] = True
    clean_z = head_outputs(model, intervention.tokens)
    corrupt_z = intervention.sources["resample"]
    names = [model.hook_name("hook_resid_pre", layer) for layer in range(layers)]
    with torch.no_grad():
        resid = model.run_with_cache(intervention.tokens, names)[1]
    clean = intervention.accuracy(intervention.clean_prediction)
    rows = []
    for t in range(1, layers):
        senders, receivers = circuit[:, t - 1], circuit[:, t]
        present = senders.any(axis=1) & receivers.any(axis=1)
        if not present.any():
            continue
        sender_mask = torch.zeros(n, layers, n_heads, dtype=torch.bool)
        sender_mask[:, t - 1] = torch.as_tensor(senders)
        direct = clean - intervention.accuracy(intervention.run(sender_mask, "resample"))
        delta = _sender_delta(model, t - 1, senders, clean_z[z_names(model)[t - 1]], corrupt_z[z_names(model)[t - 1]])
        patched_input = model.blocks[t].ln1(resid[names[t]] + delta, HookDispatch(None))
        others = ~receivers
        other_drop = np.full(n, np.nan)
        if others.any():
            prediction = intervention.run_with(_receiver_hooks(model, t, others, patched_input, "qkv"))
            other_drop = np.where(others.any(axis=1), clean - intervention.accuracy(prediction), np.nan)
        for channel in CHANNELS:
            prediction = intervention.run_with(_receiver_hooks(model, t, receivers, patched_input, channel))
            drop = clean - intervention.accuracy(prediction)
            for e in np.flatnonzero(present):
                rows.append((e, t - 1, t, _names(t - 1, senders[e]), _names(t, receivers[e]), channel, drop[e],
                             direct[e], other_drop[e]))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _sender_delta(model: EnsembleTransformer, layer: int, senders: np.ndarray, clean: Tensor, corrupted: Tensor) -> Tensor:
    """What the senders' corrupted outputs change in the residual stream, [E, B, S, d_model]."""
    select = torch.as_tensor(senders, device=clean.device).view(senders.shape[0], 1, 1, -1, 1)
    change = torch.where(select, corrupted - clean, torch.zeros((), dtype=clean.dtype, device=clean.device))
    return torch.einsum("ebshk,ehkd->ebsd", change, model.blocks[layer].attn.W_O)


def _receiver_hooks(model: EnsembleTransformer, layer: int, receivers: np.ndarray, patched_input: Tensor, channel: str) -> dict[str, Hook]:
    """Hooks giving the `receivers` [E, H] of `layer` their q/k/v computed from `patched_input`."""
    attn = model.blocks[layer].attn
    select = torch.as_tensor(receivers, device=patched_input.device).view(receivers.shape[0], 1, 1, -1, 1)
    hooks = {}
    for part in channel:  # "qkv" walks all three
        weight, bias = getattr(attn, f"W_{part.upper()}"), getattr(attn, f"b_{part.upper()}")
        value = torch.einsum("ebsd,ehdk->ebshk", patched_input, weight) + bias[:, None, None]

        def replace(activation: Tensor, name: str, value: Tensor = value) -> Tensor:
            return torch.where(select, value.to(activation.dtype), activation)

        hooks[model.hook_name(f"attn.hook_{part}", layer)] = replace
    return hooks


def _names(layer: int, heads: np.ndarray) -> str:
    return " ".join(f"L{layer + 1}H{h}" for h in np.flatnonzero(heads))
