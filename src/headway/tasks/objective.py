"""Loss and accuracy of a readout that predicts T symbols, each as a block of `vocab` outputs.

The T blocks come from the last position (retrieval: one readout of T*vocab outputs) or from the
last T positions, one block each (sorting: a prediction at every sorted position); `readout`
returns both as [E, B, T*vocab], so the loss and accuracy code is shared."""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from headway.recipe import EVAL_CHUNK
from headway.tasks.base import Task


def readout(model: torch.nn.Module, tokens: Tensor, positions: int = 1) -> Tensor:
    """Outputs [E, B, positions*d_out] of the last `positions` positions, concatenated, in float32
    (under bf16 autocast the unembedding is bf16; losses are always taken in float32)."""
    if positions == 1:
        return model(tokens).float()
    out = model(tokens, readout=positions)
    return out.reshape(out.shape[0], out.shape[1], -1).float()


def readout_loss(out: Tensor, targets: Tensor, vocab: int, kind: str, masked: bool = False) -> Tensor:
    """Per-instance loss [E] of outputs [E, B, T*vocab] against target symbols [E, B, T].

    `mse`: mean squared error to the concatenated one-hot targets (the paper's loss);
    `cross_entropy`: mean over the T blocks of the softmax cross-entropy. With `masked`, a target
    of -1 means "no target here": its block is left out of the loss and of the mean.
    """
    if masked:
        return _masked_loss(out, targets, vocab, kind)
    e, b, t = targets.shape
    if kind == "mse":
        onehot = F.one_hot(targets, vocab).to(out.dtype).view(e, b, t * vocab)
        return (out - onehot).pow(2).mean(dim=(1, 2))
    if kind == "cross_entropy":
        losses = F.cross_entropy(out.reshape(e * b * t, vocab), targets.reshape(-1), reduction="none")
        return losses.view(e, b * t).mean(dim=1)
    raise ValueError(f"loss = {kind!r} is unknown; choose 'mse' or 'cross_entropy'")


def _masked_loss(out: Tensor, targets: Tensor, vocab: int, kind: str) -> Tensor:
    """readout_loss over the blocks whose target is not -1, averaged per instance over those blocks."""
    e, b, t = targets.shape
    valid = targets >= 0
    count = valid.sum(dim=(1, 2)).clamp(min=1)
    if kind == "mse":
        onehot = F.one_hot(targets.clamp(min=0), vocab).to(out.dtype) * valid[..., None]
        error = (out.view(e, b, t, vocab) - onehot).pow(2) * valid[..., None]
        return error.sum(dim=(1, 2, 3)) / (count * vocab)
    if kind == "cross_entropy":
        losses = F.cross_entropy(out.reshape(e * b * t, vocab), targets.reshape(-1), ignore_index=-1,
                                 reduction="none")
        return losses.view(e, b * t).sum(dim=1) / count
    raise ValueError(f"loss = {kind!r} is unknown; choose 'mse' or 'cross_entropy'")


def target_hits(out: Tensor, targets: Tensor, vocab: int) -> Tensor:
    """Correct predictions [E, B, T]: argmax of each block equals its target symbol."""
    e, b, t = targets.shape
    return out.view(e, b, t, vocab).argmax(dim=-1) == targets


@torch.no_grad()
def evaluate(model: torch.nn.Module, tokens: Tensor, targets: Tensor, vocab: int, kind: str,
             chunk: int = EVAL_CHUNK, positions: int = 1) -> tuple[Tensor, Tensor, Tensor]:
    """Validation loss [E], per-target accuracy [E, T] and the fraction of examples with every
    target right [E] over a fixed set, in chunks."""
    n = tokens.shape[1]
    loss_sum = torch.zeros(tokens.shape[0], device=tokens.device)
    hit_sum = torch.zeros(targets.shape[0], targets.shape[2], device=tokens.device)
    all_sum = torch.zeros(tokens.shape[0], device=tokens.device)
    for start in range(0, n, chunk):
        tok, tgt = tokens[:, start : start + chunk], targets[:, start : start + chunk]
        out = readout(model, tok, positions)
        loss_sum += readout_loss(out, tgt, vocab, kind) * tok.shape[1]
        hits = target_hits(out, tgt, vocab)
        hit_sum += hits.float().sum(dim=1)
        all_sum += hits.all(dim=2).float().sum(dim=1)
    return loss_sum / n, hit_sum / n, all_sum / n


def run_loss(task: Task, loss: str) -> Callable[[torch.nn.Module, Tensor, Tensor], Tensor]:
    """The per-instance training loss of training batches of `task` under loss kind `loss`, as
    `fn(model, tokens, targets) -> [E]`: what the trainer minimises and SGLD samples. It reads the
    task's training positions (e.g. every link under dense supervision), masking absent targets."""
    positions, masked = task.train_readout_positions, task.train_targets_masked

    def fn(model: torch.nn.Module, tokens: Tensor, targets: Tensor) -> Tensor:
        return readout_loss(readout(model, tokens, positions), targets, task.vocab, loss, masked)
    return fn
