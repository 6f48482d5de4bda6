"""What each head of a sorting model does to the predictions, split by how far the next number is.

Every readout position k (SEP, b₁ … b_{n-1}) predicts b_k; its *gap* is b_k − b_{k−1}, the distance
from the number just written to the one to find. Small gaps are the hard cases (the next number
is close to the current one), so the effects are reported per gap bin (`gap_bins`) and over all.

- `ablate_heads`: teacher-forced loss, accuracy and output entropy with one head's output (its
  `hook_z` slice) zeroed or replaced by its mean over the batch, against the unablated model.
- `direct_logit_attribution`: how much each head's output, read straight through ln_final and W_U,
  raises the correct number's logit and the current number's logit.
- `autoregressive_accuracy`: greedy decoding from [a, SEP], the evaluation the task defines.

Heads are those of layer 0 (the study model has one layer); in a deeper model the attribution is
layer 0's direct path only.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from torch import Tensor

from headway.analysis.ablation import ablation_hooks, mean_outputs
from headway.analysis.inputs import instance_tokens
from headway.errors import ConfigError
from headway.model.transformer import EnsembleTransformer
from headway.analysis.sorting.circuits import LN_EPS, check_model, unembed_direction
from headway.tasks.sorting.task import SortingBatch, SortingConfig

# Bins of the gap b_k − b_{k−1}: "first" is b₁ (no previous number); "0" occurs only with repeats;
# 1 and 2 are the near-neighbour cases kept apart, larger gaps grow in doubling ranges.
GAP_BINS = ("first", "0", "1", "2", "3-4", "5-8", "9+")
_BIN_STARTS = np.array([1, 2, 3, 5, 9])  # smallest gap of the bins "1" … "9+"
ALL = "all"
KINDS = ("zero", "mean")
ALL_HEADS = -2  # `head` value of the rows that ablate every head at once (-1 is the unablated baseline)


def gap_bin_index(gaps: np.ndarray) -> np.ndarray:
    """Index into GAP_BINS [N, n] of every target, from the gaps [N, n-1] between sorted numbers."""
    gaps = np.asarray(gaps)
    if gaps.ndim != 2:
        raise ConfigError(f"gaps have shape {gaps.shape}; expected [N, length - 1]")
    if gaps.size and gaps.min() < 0:
        raise ConfigError(f"gaps must be >= 0 (sorted numbers); got a gap of {gaps.min()}")
    index = np.searchsorted(_BIN_STARTS, gaps, side="right") + 1
    return np.concatenate([np.zeros((len(gaps), 1), dtype=np.int64), index], axis=1)


def gap_bins(gaps: np.ndarray) -> np.ndarray:
    """Gap bin label (see GAP_BINS) of every target [N, n], from the gaps [N, n-1] (`SortingBatch.gaps`)."""
    return np.array(GAP_BINS)[gap_bin_index(gaps)]


def _check_batch(model: EnsembleTransformer, batch: SortingBatch, cfg: SortingConfig) -> None:
    check_model(model, cfg)
    if batch.tokens.ndim != 2 or batch.tokens.shape[1] != cfg.n_ctx:
        raise ConfigError(f"batch tokens have shape {batch.tokens.shape}; expected [N, {cfg.n_ctx}] "
                          f"for length {cfg.length}")


class _BinSums:
    """Per-instance sums of per-token quantities [E, ..., B, n] in each gap bin, accumulated over chunks."""

    def __init__(self) -> None:
        self.sums: dict[str, Tensor] = {}
        self.counts = torch.zeros(len(GAP_BINS), dtype=torch.float64)

    def add(self, bins: Tensor, **values: Tensor) -> None:
        onehot = F.one_hot(bins.reshape(-1), len(GAP_BINS)).double()  # [B*n, bins]
        self.counts += onehot.sum(dim=0).cpu()
        for name, value in values.items():
            flat = value.double().reshape(*value.shape[:-2], -1)
            total = (flat @ onehot.to(flat.device)).cpu()
            self.sums[name] = self.sums.get(name, 0) + total

    def means(self) -> dict[str, Tensor]:
        """Mean of each quantity per bin, with "all" appended as the last bin: [..., bins + 1]."""
        counts = torch.cat([self.counts, self.counts.sum().view(1)])
        return {name: torch.cat([s, s.sum(dim=-1, keepdim=True)], dim=-1) / counts.clamp_min(1)
                for name, s in self.sums.items()}

    def labels(self) -> list[tuple[int, str, int]]:
        """(column, bin label, count) of every bin with tokens in it, then "all"."""
        present = [(i, GAP_BINS[i], int(c)) for i, c in enumerate(self.counts) if c > 0]
        return present + [(len(GAP_BINS), ALL, int(self.counts.sum()))]


def _readout_metrics(logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
    """Per-token cross-entropy, hit and entropy [E, B, n] of readout logits [E, B, n, V]."""
    logp = torch.log_softmax(logits.double(), dim=-1)
    index = targets.unsqueeze(0).expand(logits.shape[:-1]).unsqueeze(-1)
    return {"loss": -logp.gather(-1, index).squeeze(-1),
            "accuracy": (logits.argmax(dim=-1) == index.squeeze(-1)).double(),
            "entropy": -(logp.exp() * logp).sum(dim=-1)}


def _layer0_mask(model: EnsembleTransformer, heads: list[int]) -> Tensor:
    """An [E, L, H] selection of the given heads of layer 0 in every instance."""
    mask = torch.zeros(model.n_instances, model.cfg.layers, model.cfg.heads, dtype=torch.bool)
    mask[:, 0, heads] = True
    return mask


@torch.no_grad()
def ablate_heads(model: EnsembleTransformer, batch: SortingBatch, cfg: SortingConfig,
                 kinds: Sequence[str] = KINDS, all_heads: bool = True, chunk: int = 512) -> pd.DataFrame:
    """Teacher-forced loss, accuracy and entropy per instance, ablated head, kind and gap bin.

    Rows: the baseline (ablation "none", head -1), every head ablated alone with every kind, and (with
    `all_heads`) every head at once (head ALL_HEADS). `zero` sets the head's hook_z slice to 0 at
    every position; `mean` replaces it by its mean over the whole batch at that position. d_loss,
    d_accuracy and d_entropy are differences to the baseline of the same instance and bin."""
    _check_batch(model, batch, cfg)
    bad = [k for k in kinds if k not in KINDS]
    if bad:
        raise ConfigError(f"ablation kind(s) {bad} unknown; choose from {', '.join(KINDS)}")
    device = next(model.parameters()).device
    n, n_heads = cfg.length, model.cfg.heads
    tokens = instance_tokens(batch.tokens, model.n_instances, device)
    targets = torch.as_tensor(batch.targets, device=device)
    bins = torch.as_tensor(gap_bin_index(batch.gaps), device=device)
    means = mean_outputs(model, tokens, chunk) if "mean" in kinds else None
    groups = [[h] for h in range(n_heads)] + ([list(range(n_heads))] if all_heads and n_heads > 1 else [])
    settings = [("none", -1, None)] + [
        (kind, g[0] if len(g) == 1 else ALL_HEADS, ablation_hooks(model, _layer0_mask(model, g), kind, means))
        for kind in kinds for g in groups]
    sums = [_BinSums() for _ in settings]
    for start in range(0, len(batch), chunk):
        part = slice(start, start + chunk)
        for acc, (_, _, hooks) in zip(sums, settings):
            logits = model(tokens[:, part], readout="all", hooks=hooks)[:, :, n:]
            acc.add(bins[part], **_readout_metrics(logits, targets[part]))
    frame = pd.concat([_rows(acc, kind=kind, head=head) for acc, (kind, head, _) in zip(sums, settings)],
                      ignore_index=True)
    return _with_differences(frame)


def _rows(acc: _BinSums, **labels) -> pd.DataFrame:
    """Long table of one accumulator: one row per instance and present bin."""
    means = {k: v.numpy() for k, v in acc.means().items()}
    e = next(iter(means.values())).shape[0]
    rows = [{"instance": i, **labels, "gap_bin": label, **{k: float(v[i, col]) for k, v in means.items()},
             "count": count} for i in range(e) for col, label, count in acc.labels()]
    return pd.DataFrame(rows).rename(columns={"kind": "ablation"})


def _with_differences(frame: pd.DataFrame) -> pd.DataFrame:
    """Add d_loss, d_accuracy, d_entropy: each row minus the baseline of its instance and bin."""
    metrics = ["loss", "accuracy", "entropy"]
    base = frame.loc[frame.ablation == "none", ["instance", "gap_bin", *metrics]]
    joined = frame.merge(base, on=["instance", "gap_bin"], how="left", suffixes=("", "_base"))
    for name in metrics:
        frame[f"d_{name}"] = joined[name] - joined[f"{name}_base"]
    return frame[["instance", "head", "ablation", "gap_bin", "loss", "accuracy", "entropy", "count",
                  "d_loss", "d_accuracy", "d_entropy"]]


@torch.no_grad()
def direct_logit_attribution(model: EnsembleTransformer, batch: SortingBatch, cfg: SortingConfig,
                             chunk: int = 512) -> pd.DataFrame:
    """Mean direct effect of each head's output on the logit of the correct number (dla_correct) and of
    the current input number (dla_current; undefined at SEP, so NaN in the "first" bin) per instance,
    head and gap bin. The head's output z·W_O at a readout position goes through ln_final with that
    token's standard deviation frozen from the clean forward, then W_U; each logit is taken relative
    to the mean over all outputs at that position (softmax sees only differences)."""
    _check_batch(model, batch, cfg)
    device = next(model.parameters()).device
    n, e = cfg.length, model.n_instances
    z_name, final = model.hook_name("attn.hook_z", 0), model.hook_name("hook_resid_post", -1)
    tokens = instance_tokens(batch.tokens, e, device)
    targets = torch.as_tensor(batch.targets, device=device)
    bins = torch.as_tensor(gap_bin_index(batch.gaps), device=device)
    correct, current = _BinSums(), _BinSums()
    for start in range(0, len(batch), chunk):
        part = slice(start, start + chunk)
        _, cache = model.run_with_cache(tokens[:, part], [z_name, final], readout="all")
        z, resid = cache[z_name][:, :, n:], cache[final][:, :, n:]
        out = torch.einsum("ebphk,ehkd->ebphd", z, model.blocks[0].attn.W_O)  # [E, B, n, H, d]
        std = (resid.var(dim=-1, unbiased=False) + LN_EPS).sqrt().unsqueeze(-1)  # [E, B, n, 1]
        logits = unembed_direction(model, out, std)
        logits = (logits - logits.mean(dim=-1, keepdim=True)).movedim(3, 1)  # [E, H, B, n, V]
        correct.add(bins[part], dla=_logit_of(logits, targets[part]))
        inputs = torch.as_tensor(batch.tokens[part, n + 1 :], device=device)  # b₁ … b_{n-1}
        current.add(bins[part][:, 1:], dla=_logit_of(logits[..., 1:, :], inputs))
    return _dla_rows(correct, current, model.cfg.heads)


def _logit_of(logits: Tensor, index: Tensor) -> Tensor:
    """logits [E, H, B, p, V] at the numbers index [B, p]: [E, H, B, p]."""
    return logits.gather(-1, index.expand(logits.shape[:-1]).unsqueeze(-1)).squeeze(-1)


def _dla_rows(correct: _BinSums, current: _BinSums, n_heads: int) -> pd.DataFrame:
    right, now = correct.means()["dla"].numpy(), current.means()["dla"].numpy()
    has_current = {label for _, label, _ in current.labels()}
    rows = [{"instance": e, "head": h, "gap_bin": label, "dla_correct": float(right[e, h, col]),
             "dla_current": float(now[e, h, col]) if label in has_current else float("nan"), "count": count}
            for e in range(right.shape[0]) for h in range(n_heads) for col, label, count in correct.labels()]
    return pd.DataFrame(rows)


NEAR_BINS = ("0", "1", "2")  # next number at most 2 above the current one: where a copy most needs suppressing
FAR_BINS = ("3-4", "5-8", "9+")


def suppression_by_gap(dla: pd.DataFrame, modes: pd.DataFrame) -> pd.DataFrame:
    """Per instance with a copier (`modes`' copier ≥ 0): the share of the copier's direct effect on the correct
    number that its suppressor removes, −dla_g / dla_h over all targets (removed_all), targets at gaps ≤ 2
    (removed_near) and ≥ 3 (removed_far), bins pooled by their counts. The suppressor is the reported one, else
    the other head with the lowest direct effect on the correct number; NaN where a part has no targets."""
    rows = []
    for pair in modes[modes.copier >= 0].itertuples():
        own = dla[dla.instance == pair.instance]
        g = pair.suppressor
        if g < 0:
            others = own[(own.gap_bin == ALL) & (own["head"] != pair.copier)]
            if others.empty:
                continue
            g = int(others.loc[others.dla_correct.idxmin(), "head"])
        row = {"instance": pair.instance}
        for name, chosen in (("removed_all", (ALL,)), ("removed_near", NEAR_BINS), ("removed_far", FAR_BINS)):
            part = own[own.gap_bin.isin(chosen)]
            weighted = (part.dla_correct * part["count"]).groupby(part["head"]).sum()
            effect = {h: weighted.get(h, 0.0) for h in (g, pair.copier)}
            row[name] = -effect[g] / effect[pair.copier] if len(part) and effect[pair.copier] > 0 else float("nan")
        rows.append(row)
    return pd.DataFrame(rows, columns=["instance", "removed_all", "removed_near", "removed_far"])


@torch.no_grad()
def autoregressive_accuracy(model: EnsembleTransformer, batch: SortingBatch, cfg: SortingConfig,
                            chunk: int = 512) -> pd.DataFrame:
    """Greedy decoding from [a, SEP], each instance fed its own predictions: per instance the fraction of
    sorted numbers right (accuracy), of whole lists right (list_accuracy), and the number of lists."""
    _check_batch(model, batch, cfg)
    device = next(model.parameters()).device
    n = cfg.length
    prompts = instance_tokens(batch.tokens[:, : n + 1], model.n_instances, device)
    hits = []
    for start in range(0, len(batch), chunk):
        seq = prompts[:, start : start + chunk]
        for _ in range(n):
            predicted = model(seq).argmax(dim=-1, keepdim=True)  # [E, B, 1]
            seq = torch.cat([seq, predicted], dim=2)
        hits.append(seq[:, :, n + 1 :] == torch.as_tensor(batch.sorted[start : start + chunk], device=device))
    right = torch.cat(hits, dim=1)
    return pd.DataFrame({"instance": range(model.n_instances),
                         "accuracy": right.double().mean(dim=(1, 2)).cpu().numpy(),
                         "list_accuracy": right.all(dim=2).double().mean(dim=1).cpu().numpy(),
                         "count": len(batch)})
