"""Loss and accuracy of a readout that predicts T symbols, each as a block of `vocab` outputs."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def readout_loss(out: Tensor, targets: Tensor, vocab: int, kind: str) -> Tensor:
    """Per-instance loss [E] of outputs [E, B, T*vocab] against target symbols [E, B, T].

    `mse`: mean squared error to the concatenated one-hot targets (the paper's loss);
    `cross_entropy`: mean over the T blocks of the softmax cross-entropy.
    """
    e, b, t = targets.shape
    if kind == "mse":
        onehot = F.one_hot(targets, vocab).to(out.dtype).view(e, b, t * vocab)
        return (out - onehot).pow(2).mean(dim=(1, 2))
    if kind == "cross_entropy":
        losses = F.cross_entropy(out.reshape(e * b * t, vocab), targets.reshape(-1), reduction="none")
        return losses.view(e, b * t).mean(dim=1)
    raise ValueError(f"loss = {kind!r} is unknown; choose 'mse' or 'cross_entropy'")


def target_hits(out: Tensor, targets: Tensor, vocab: int) -> Tensor:
    """Correct predictions [E, B, T]: argmax of each block equals its target symbol."""
    e, b, t = targets.shape
    return out.view(e, b, t, vocab).argmax(dim=-1) == targets


@torch.no_grad()
def evaluate(model: torch.nn.Module, tokens: Tensor, targets: Tensor, vocab: int, kind: str,
             chunk: int = 1024) -> tuple[Tensor, Tensor]:
    """Validation loss [E] and per-target accuracy [E, T] over a fixed set, in chunks."""
    n = tokens.shape[1]
    loss_sum = torch.zeros(tokens.shape[0], device=tokens.device)
    hit_sum = torch.zeros(targets.shape[0], targets.shape[2], device=tokens.device)
    for start in range(0, n, chunk):
        tok, tgt = tokens[:, start : start + chunk], targets[:, start : start + chunk]
        out = model(tok)
        loss_sum += readout_loss(out, tgt, vocab, kind) * tok.shape[1]
        hit_sum += target_hits(out, tgt, vocab).float().sum(dim=1)
    return loss_sum / n, hit_sum / n
