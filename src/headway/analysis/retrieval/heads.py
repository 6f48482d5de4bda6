"""Attention-based head scores: where each head's attention lands relative to the retrieval chain.

Scores are fractions of attention (0..1), averaged over examples, read at statement level: from the
last position of a statement (the query, or a link) to all positions of a target statement.

- `query_hop{j}`: from the query, the mass on the queried chain's link of hop j (hop 1 starts at
  the query symbol); `query_chain` is their sum.
- `link_next`: from a chain link, the mass on the link one hop closer to the root (the one that
  continues from its right entity); `link_prev`: on the link one hop further from the root. Only
  pairs the mask lets the head see are counted.
- conditional variant: `query_class` (mass from the query on the class statements of the chain's
  entities that select a relation) and `query_rule` (mass on the rule statements).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from headway.analysis.inputs import instance_tokens
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval.positions import StatementMap, reading_positions
from headway.tasks.retrieval.config import RetrievalConfig


@torch.no_grad()
def statement_patterns(model: EnsembleTransformer, cfg: RetrievalConfig, tokens: np.ndarray,
                       chunk: int = 512) -> np.ndarray:
    """Attention of every head at statement level, [E, N, L, H, P_from, P_to] as float32 numpy."""
    per = 1 if cfg.layout == "packed" else cfg.statement_width
    reading = torch.as_tensor(reading_positions(cfg))
    names = [model.hook_name("attn.hook_pattern", layer) for layer in range(model.cfg.layers)]
    device = next(model.parameters()).device
    parts = []
    for start in range(0, len(tokens), chunk):
        batch = instance_tokens(tokens[start : start + chunk], model.n_instances, device)
        _, cache = model.run_with_cache(batch, names)
        layers = []
        for name in names:
            pattern = cache[name][:, :, :, reading.to(device)]  # [E, B, H, P, S]
            e, b, h, p, s = pattern.shape
            layers.append(pattern.view(e, b, h, p, s // per, per).sum(-1))
        parts.append(torch.stack(layers, dim=2).float().cpu().numpy())
    return np.concatenate(parts, axis=1)


def head_scores(patterns: np.ndarray, cfg: RetrievalConfig, smap: StatementMap, causal: bool) -> pd.DataFrame:
    """One row per (instance, layer, head) with every score named in the module docstring; `causal`
    says whether the model's attention is masked (then link pairs it cannot see are left out)."""
    e, n, n_layers, n_heads, p, _ = patterns.shape
    q = smap.query
    examples = np.arange(n)
    columns: dict[str, np.ndarray] = {}
    from_query = patterns[:, :, :, :, q, :]  # [E, N, L, H, P]
    hop_mass = []
    for j in range(smap.hop_link.shape[1]):
        target = smap.hop_link[:, j]
        picked = from_query[:, examples, :, :, np.maximum(target, 0)]  # [N, E, L, H]: advanced indices first
        mass = np.where((target >= 0)[:, None, None, None], picked, np.nan)
        hop_mass.append(mass)
        columns[f"query_hop{j + 1}"] = np.nanmean(mass, axis=0)
    columns["query_chain"] = np.nanmean(np.nansum(np.stack(hop_mass), axis=0), axis=0)
    columns["link_next"] = _pair_mass(patterns, smap.is_link, smap.next_link, causal)
    columns["link_prev"] = _pair_mass(patterns, smap.is_link, smap.prev_link, causal)
    if cfg.conditional:
        columns["query_class"] = _query_mass(from_query, _class_mask(smap))
        rules = np.zeros((n, p), dtype=bool)
        rows = np.repeat(examples, smap.rule_statements.shape[1])
        rules[rows, smap.rule_statements.ravel()] = True
        columns["query_rule"] = _query_mass(from_query, rules)
    instance, layer, head = np.meshgrid(np.arange(e), np.arange(n_layers), np.arange(n_heads), indexing="ij")
    frame = {"instance": instance.ravel(), "layer": layer.ravel(), "head": head.ravel()}
    frame.update({name: values.ravel() for name, values in columns.items()})
    return pd.DataFrame(frame)


def uniform_link_mass(smap: StatementMap, causal: bool) -> tuple[float, float]:
    """The `link_next` and `link_prev` a head attending uniformly to what it sees would score on these
    examples: the level a head must clearly beat before it counts as reading a chain neighbour
    (NaN where no pair is visible)."""
    p = smap.n_statements
    out = []
    for target in (smap.next_link, smap.prev_link):
        ex, pos = _visible_pairs(smap.is_link, target, causal)
        share = 1.0 / (pos + 1) if causal else np.full(len(pos), 1.0 / p)
        out.append(float(share.mean()) if len(pos) else float("nan"))
    return out[0], out[1]


def _visible_pairs(is_link: np.ndarray, target: np.ndarray, causal: bool) -> tuple[np.ndarray, np.ndarray]:
    """(example, statement) of every link whose `target` statement exists and the mask lets it see."""
    n, p = target.shape
    valid = is_link & (target >= 0)
    if causal:
        valid &= target <= np.broadcast_to(np.arange(p), (n, p))
    return np.nonzero(valid)


def _pair_mass(patterns: np.ndarray, is_link: np.ndarray, target: np.ndarray, causal: bool) -> np.ndarray:
    """Mean attention from each link to its `target` statement over the visible pairs, [E, L, H]."""
    ex, pos = _visible_pairs(is_link, target, causal)
    if len(ex) == 0:
        return np.full(patterns.shape[:1] + patterns.shape[2:4], np.nan)
    mass = patterns[:, ex, :, :, pos, target[ex, pos]]  # [pairs, E, L, H] (advanced indices first)
    return mass.mean(axis=0)


def _query_mass(from_query: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Mean over examples of the query's attention mass on the statements in `mask` [N, P], [E, L, H]."""
    return (from_query * mask[None, :, None, None, :]).sum(-1).mean(axis=1)


def _class_mask(smap: StatementMap) -> np.ndarray:
    """Class statements of the queried chain's entities that pick a relation (all but the answer)."""
    n, p = smap.rows.shape[:2]
    mask = np.zeros((n, p), dtype=bool)
    examples = np.arange(n)
    for j in range(smap.hop_link.shape[1]):
        link = smap.hop_link[:, j]
        entity = np.take_along_axis(smap.left, np.maximum(link, 0)[:, None], axis=1)[:, 0]
        statement = smap.class_statement[examples, np.maximum(entity, 0)]
        ok = (link >= 0) & (statement >= 0)
        mask[examples[ok], statement[ok]] = True
    return mask
