"""Analyse the instances of one trained modular-addition ensemble that share their data: the Fourier
spectrum of the embedding and of the logits of the final model, and how the embedding's spectrum
and the logits' share on the final key frequencies develop over the checkpoints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.config import RunConfig
from headway.runs.store import load_model
from headway.analysis.modular.fourier import (
    effective_frequencies,
    embedding_spectrum,
    frequencies,
    key_frequencies,
    logit_spectrum,
    pair_logits,
)


def analyse_members(run_dir: Path, runs: list[RunConfig], members: list[int], device: torch.device | str,
                    coverage: float) -> dict[str, pd.DataFrame]:
    """The tables spectrum (per instance and frequency), fourier (per instance) and fourier_curve (per
    checkpoint and instance) of the instances `members` (one task), `instance` indexing `members`; the
    key frequencies hold `coverage` of the final embedding's norm."""
    p = runs[members[0]].task.modulus
    model = load_model(run_dir, members, device=device)
    embedding = embedding_spectrum(model, p)
    logits = logit_spectrum(pair_logits(model, p))
    keys = key_frequencies(embedding, coverage)
    e, k = embedding.shape
    spectrum = pd.DataFrame({"instance": np.repeat(np.arange(e), k), "frequency": np.tile(frequencies(p), e),
                             "embedding_share": embedding.ravel(), "logit_share": logits.ravel()})
    final = pd.DataFrame({"instance": np.arange(e), "effective_frequencies": effective_frequencies(embedding),
                          "key_frequencies": [" ".join(map(str, row)) for row in keys],
                          "n_key": [len(row) for row in keys],
                          "key_embedding_share": _on(embedding, keys), "key_logit_share": _on(logits, keys),
                          "logit_share_all": logits.sum(axis=1)})
    curve = []
    for step in checkpoint_steps(run_dir):
        model.load_instances(load_checkpoint(run_dir, step, runs, model), members)
        shares = embedding_spectrum(model, p)
        curve.append(pd.DataFrame({"step": step, "instance": np.arange(e),
                                   "effective_frequencies": effective_frequencies(shares),
                                   "key_embedding_share": _on(shares, keys),
                                   "key_logit_share": _on(logit_spectrum(pair_logits(model, p)), keys)}))
    return {"spectrum": spectrum, "fourier": final, "fourier_curve": pd.concat(curve, ignore_index=True)}


def _on(shares: np.ndarray, keys: list[list[int]]) -> np.ndarray:
    """Per row, the total share on that row's key frequencies (1-based k)."""
    return np.array([row[np.asarray(k) - 1].sum() for row, k in zip(shares, keys)])
