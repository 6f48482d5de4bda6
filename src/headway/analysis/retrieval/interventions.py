"""Causal checks on the heads of retrieval models: zero, mean and resample ablation, and activation patching
from a corrupted example, scored on the answer (the replacement itself is `headway.analysis.ablation`).
Interventions act on all instances of an ensemble at once, each instance with its own choice of
heads ([E, L, H] masks), so one forward measures every instance.

Patching uses *root-swapped* examples: the queried chain's root is exchanged, everywhere in the
example, with another chain's root. The corrupted example is valid, has a different answer, and
differs from the clean one nowhere else, so a head whose corrupted output flips the prediction to
the corrupted answer carries the answer.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
from torch import Tensor

from headway.analysis.ablation import KINDS, ablation_hooks, head_outputs, mean_outputs, single_heads, z_names
from headway.analysis.inputs import instance_tokens
from headway.model.hooks import Hook
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval.arrays import encode_rows
from headway.tasks.retrieval.positions import StatementMap
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch


def swap_roots(cfg: RetrievalConfig, batch: RetrievalBatch, smap: StatementMap) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of each example with the queried chain's root swapped with another chain's root, and the
    new answers [N]. The other root is the first root (in statement order) that is not the answer."""
    answer = np.asarray(batch.answer)
    is_root = smap.is_link & (smap.next_link < 0)
    other = np.where(is_root & (smap.right != answer[:, None]), smap.right, -1)
    if (other < 0).all(axis=1).any():
        raise ValueError("patching needs at least two chains (chains >= 2) to swap roots between")
    replacement = other[np.arange(len(other)), (other >= 0).argmax(axis=1)]
    rows = smap.rows.copy()
    entity_slots = rows < cfg.vocab
    a, b = answer[:, None, None], replacement[:, None, None]
    swapped = np.where(entity_slots & (rows == a), b, np.where(entity_slots & (rows == b), a, rows))
    return encode_rows(swapped, cfg.layout == "packed", cfg.base_vocab), replacement


class HeadIntervention:
    """Runs one ensemble on fixed examples with chosen heads ablated or patched and scores the answer."""

    def __init__(self, model: EnsembleTransformer, cfg: RetrievalConfig, batch: RetrievalBatch,
                 smap: StatementMap) -> None:
        self.model, self.cfg, self.smap = model, cfg, smap
        self.device = next(model.parameters()).device
        self.layers, self.heads = model.cfg.layers, model.cfg.heads
        e = model.n_instances
        self.tokens = instance_tokens(batch.tokens, e, self.device)
        corrupted, corrupted_answer = swap_roots(cfg, batch, smap)
        self.corrupted = instance_tokens(corrupted, e, self.device)
        self.answer = torch.as_tensor(np.asarray(batch.answer), device=self.device)
        self.corrupted_answer = torch.as_tensor(corrupted_answer, device=self.device)
        with torch.no_grad():
            self.clean_prediction = self._predict(model.run_with_cache(self.tokens, z_names(model))[0])
        resampled = self.tokens.roll(1, dims=1)  # each example takes the head outputs of the one before it
        self.sources = {"mean": mean_outputs(model, self.tokens), "resample": head_outputs(model, resampled),
                        "patch": head_outputs(model, self.corrupted)}

    def _predict(self, out: Tensor) -> Tensor:
        """Predicted answer symbol [E, B]: argmax of the final-hop block of the readout."""
        return out[..., -self.cfg.vocab :].argmax(dim=-1)

    @torch.no_grad()
    def run_with(self, hooks: dict[str, Hook]) -> Tensor:
        """Predicted answers [E, B] with any hooks (e.g. path patching's) in place."""
        return self._predict(self.model(self.tokens, hooks=hooks))

    @torch.no_grad()
    def run(self, mask: Tensor, kind: str, positions: Tensor | None = None) -> Tensor:
        """Predicted answers [E, B] with the heads in `mask` ([E, L, H] bool) zeroed, mean-ablated,
        resample-ablated or patched, at the positions `positions` ([S] or, per example, [B, S] bool) only when
        given."""
        return self.run_with(ablation_hooks(self.model, mask, kind, self.sources.get(kind), positions))

    def ablated_accuracy(self, choices: Sequence[Sequence[np.ndarray]], kind: str = "mean",
                         positions: Tensor | None = None) -> list[np.ndarray]:
        """Accuracy of each instance with each of its own head selections ablated (at `positions` only,
        when given): `choices[e]` lists [L, H] boolean masks of instance e, and the k-th selections of all
        instances share forward k, so the cost is the longest list, not the sum."""
        if len(choices) != self.model.n_instances:
            raise ValueError(f"{len(choices)} choice lists for {self.model.n_instances} instances")
        out = [np.full(len(mine), np.nan) for mine in choices]
        for k in range(max((len(mine) for mine in choices), default=0)):
            mask = torch.zeros(self.model.n_instances, self.layers, self.heads, dtype=torch.bool)
            for e, mine in enumerate(choices):
                if k < len(mine):
                    mask[e] = torch.as_tensor(mine[k])
            accuracy = self.accuracy(self.run(mask, kind, positions))
            for e, mine in enumerate(choices):
                if k < len(mine):
                    out[e][k] = accuracy[e]
        return out

    def accuracy(self, prediction: Tensor) -> np.ndarray:
        """Share of examples answered correctly, per instance [E]."""
        return (prediction == self.answer).float().mean(dim=1).cpu().numpy()

    def flip_rate(self, prediction: Tensor) -> np.ndarray:
        """Share of examples whose prediction became the corrupted answer, per instance [E]."""
        return (prediction == self.corrupted_answer).float().mean(dim=1).cpu().numpy()


def head_effects(intervention: HeadIntervention, kinds: tuple[str, ...] = KINDS) -> pd.DataFrame:
    """Per (instance, layer, head): accuracy after each intervention on that head alone and the drop
    from the clean accuracy; for patching also the flip rate to the corrupted answer."""
    clean = intervention.accuracy(intervention.clean_prediction)
    frames = []
    for layer, head, mask in single_heads(intervention.model):
        columns = {}
        for kind in kinds:
            prediction = intervention.run(mask, kind)
            columns[f"{kind}_accuracy"] = intervention.accuracy(prediction)
            columns[f"{kind}_drop"] = clean - columns[f"{kind}_accuracy"]
            if kind == "patch":
                columns["patch_flip"] = intervention.flip_rate(prediction)
        frames.append(pd.DataFrame({"instance": np.arange(len(clean)), "layer": layer, "head": head, **columns,
                                    "clean_accuracy": clean}))
    return pd.concat(frames).sort_values(["instance", "layer", "head"], kind="stable").reset_index(drop=True)
