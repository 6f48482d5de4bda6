"""Fourier features of modular-addition models: how the embedding and the logits spread over the
frequencies of Z_p.

For odd p the real Fourier basis of functions on 0 … p-1 is the constant and, for each frequency
k = 1 … (p-1)/2, the pair cos(2πk·x/p), sin(2πk·x/p). A model that adds by rotating (the circuit
Nanda et al. 2023 describe) embeds the numbers with a few such pairs (its *key frequencies*) and
builds logits from cos(2πk(a + b − c)/p) at those frequencies.

- `embedding_spectrum`: the share of the embedding's squared norm, centred over the numbers, that
  each frequency carries; `effective_frequencies` = 1 / Σ share², threshold-free: the number of
  frequencies a spectrum is spread over ((p-1)/2 when even, 1 when all in one).
- `key_frequencies`: the fewest frequencies whose shares add up to at least `coverage` (the modular study's
  rule `ModularRules.coverage`, with its reason).
- `logit_spectrum`: the share of the logits' variance (centred over the output c, since softmax
  ignores a shift) along cos/sin(2πk(a + b − c)/p), per frequency, over every pair (a, b).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from headway.errors import ConfigError

if TYPE_CHECKING:  # torch loads with the analysis, so that the CLI parses options without it
    import torch

    from headway.model.transformer import EnsembleTransformer


def frequencies(p: int) -> np.ndarray:
    """The frequencies k = 1 … (p-1)/2 of an odd modulus p."""
    if p < 3 or p % 2 == 0:
        raise ConfigError(f"modulus = {p} has no symmetric Fourier basis here; use an odd modulus >= 3")
    return np.arange(1, (p - 1) // 2 + 1)


def embedding_spectrum(model: EnsembleTransformer, p: int) -> np.ndarray:
    """Share of each instance's centred number-embedding norm per frequency, [E, (p-1)/2] (rows sum to 1)."""
    import torch

    k = frequencies(p)
    with torch.no_grad():
        numbers = model.embed.W_E[:, :p].double().cpu()  # [E, p, d]
    coefficients = torch.fft.rfft(numbers - numbers.mean(dim=1, keepdim=True), dim=1)  # [E, p//2 + 1, d]
    power = coefficients[:, k].abs().pow(2).sum(dim=-1).numpy()  # [E, K]; the k and p-k terms are conjugates
    return power / power.sum(axis=1, keepdims=True)


def effective_frequencies(shares: np.ndarray) -> np.ndarray:
    """1 / Σ share² per row: how many frequencies a spectrum is spread over."""
    return 1.0 / np.square(shares).sum(axis=-1)


def key_frequencies(shares: np.ndarray, coverage: float) -> list[list[int]]:
    """Per row, the fewest frequencies (1-based k, by decreasing share) holding at least `coverage`."""
    if not 0 < coverage <= 1:
        raise ConfigError(f"coverage = {coverage!r} is invalid; use a share in (0, 1]")
    out = []
    for row in np.atleast_2d(shares):
        order = np.argsort(row)[::-1]
        needed = int(np.searchsorted(np.cumsum(row[order]), coverage - 1e-12)) + 1
        out.append(sorted(int(i) + 1 for i in order[:needed]))
    return out


def pair_logits(model: EnsembleTransformer, p: int, chunk: int = 4096) -> torch.Tensor:
    """Logits of every pair, [E, p (a), p (b), p (c)], float64 on the CPU."""
    import torch

    a, b = np.divmod(np.arange(p * p), p)
    tokens = torch.as_tensor(np.stack([a, b, np.full_like(a, p)], axis=1), device=next(model.parameters()).device)
    tokens = tokens.unsqueeze(0).expand(model.n_instances, *tokens.shape)
    with torch.no_grad():
        parts = [model(tokens[:, start : start + chunk]).double().cpu() for start in range(0, p * p, chunk)]
    return torch.cat(parts, dim=1).view(model.n_instances, p, p, -1)


def logit_spectrum(logits: torch.Tensor) -> np.ndarray:
    """Share of the logits' centred variance along cos/sin(2πk(a + b − c)/p) for each frequency k,
    [E, (p-1)/2], from pair logits [E, p, p, p]. The shares of all k add up to at most 1: the rest of
    the variance is in other directions."""
    import torch

    p = logits.shape[1]
    k = torch.as_tensor(frequencies(p))
    centred = logits - logits.mean(dim=-1, keepdim=True)
    transform = torch.fft.fftn(centred, dim=(1, 2, 3))  # coefficient at (k, k, -k) is Σ L·exp(-iω k(a + b - c))
    along = transform[:, k, k, (-k) % p].abs().pow(2) * 2 / p**3  # energy on the cos/sin pair of frequency k
    total = centred.pow(2).sum(dim=(1, 2, 3))
    return (along / total[:, None]).numpy()
