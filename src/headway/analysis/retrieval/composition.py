"""The causal half of the mechanism classifier (`mechanism`): does the answer need the heads that compose links?

A model's composing heads (`mechanism.composing_heads`) are mean-ablated at link positions only
(every position before the query statement), so what they write into links is removed and what
they do at the query is kept: a layer-1 head that follows "the link continuing my symbol" reads
hop 1 at the query and the next link at a link, and only the second is composition. The control
ablates, at the same positions, as many other heads of each of their layers (all of a layer's other
heads when it has fewer) and reports the mean over every such choice, or over `CONTROL_SETS` of them
drawn with a fixed seed when there are more: what removing that many heads of those layers costs
without removing composition.

That control needs heads the composing ones leave free; when they are every head of their layers (common in
whole-chain models) there is none. The *position control* needs no spare heads: the same composing heads are
mean-ablated at the queried chain's links (`chain_drop`) and, as the control, at the links of one other chain
of the example (`offchain_drop`: as many links, which the query does not read). What the heads write into
links matters to the answer only where the query's chain runs, so composition the answer needs shows as
`chain_drop` well above `offchain_drop`, while a cost of removing the heads anywhere shows in both.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import torch

from headway.analysis.retrieval.interventions import HeadIntervention
from headway.analysis.retrieval.mechanism import composing_heads
from headway.analysis.retrieval.roles import head_grid
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.positions import NONE, StatementMap, link_numbers

CONTROL_SETS = 16  # control head sets per model at most: the mean of 16 settles within a few points
CONTROL_SEED = 11  # which control sets are drawn when there are more, fixed so tables are reproducible


def link_positions(cfg: RetrievalConfig) -> np.ndarray:
    """[n_ctx] bool: every position before the query statement (the last position packed, the last
    `statement_width` flat)."""
    query = 1 if cfg.layout == "packed" else cfg.statement_width
    return np.arange(cfg.n_ctx) < cfg.n_ctx - query


def chain_link_positions(cfg: RetrievalConfig, smap: StatementMap) -> tuple[np.ndarray, np.ndarray]:
    """([B, n_ctx] bool, [B, n_ctx] bool): every position of the queried chain's links, and of the links of
    one other chain (the first in statement order whose root is not the queried chain's), per example."""
    if (smap.hop_link[:, -1] == NONE).any():
        raise ValueError("the position control needs the queried chain's root link in every example")
    _, root = link_numbers(smap, cfg.hops)
    queried_root = root[np.arange(len(root)), smap.hop_link[:, -1]]
    other = (root >= 0) & (root != queried_root[:, None])
    if not other.any(axis=1).all():
        raise ValueError("the position control needs at least two chains (chains >= 2)")
    other_root = root[np.arange(len(root)), other.argmax(axis=1)]
    width = 1 if cfg.layout == "packed" else cfg.statement_width
    on_chain = np.repeat(smap.is_link & (root == queried_root[:, None]), width, axis=1)
    off_chain = np.repeat(smap.is_link & (root == other_root[:, None]), width, axis=1)
    return on_chain, off_chain


def control_sets(composing: np.ndarray, most: int = CONTROL_SETS, seed: int = CONTROL_SEED) -> list[np.ndarray]:
    """[L, H] head sets outside `composing` ([L, H] bool) matching it layer by layer in size (all of a
    layer's other heads when it has fewer): every such set, or `most` of them drawn without replacement."""
    per_layer = []
    for layer in np.nonzero(composing.any(axis=1))[0]:
        others = np.nonzero(~composing[layer])[0]
        size = min(int(composing[layer].sum()), len(others))
        per_layer.append([(layer, chosen) for chosen in itertools.combinations(others, size)])
    choices = list(itertools.product(*per_layer)) if per_layer else []
    if len(choices) > most:
        picked = np.random.default_rng(seed).choice(len(choices), most, replace=False)
        choices = [choices[i] for i in sorted(picked)]
    sets = []
    for choice in choices:
        grid = np.zeros_like(composing)
        for layer, chosen in choice:
            grid[layer, list(chosen)] = True
        if grid.any():
            sets.append(grid)
    return sets


def composition_check(heads: pd.DataFrame, intervention: HeadIntervention, uniform: tuple[float, float],
                      level: float, most: int = CONTROL_SETS, seed: int = CONTROL_SEED) -> pd.DataFrame:
    """Per instance: its composing heads (from `heads`, a head-score table with link_next and link_prev, read
    against `level`, the study's `read_level`, and the `uniform` reference), the answer's accuracy lost when they are mean-ablated at
    link positions (`composing_drop`, NaN without any) and the mean lost over its control sets
    (`control_drop`, NaN without any), the position control (`chain_drop` at the queried chain's links,
    `offchain_drop` at another chain's; NaN without composing heads), the clean accuracy and the uniform
    reference."""
    n, layers, n_heads = intervention.model.n_instances, intervention.layers, intervention.heads
    clean = intervention.accuracy(intervention.clean_prediction)
    chosen = composing_heads(heads, layers, level, uniform)
    grids = [head_grid(chosen[chosen.instance == e], layers, n_heads) for e in range(n)]
    controls = [control_sets(grid, most, seed) for grid in grids]
    positions = torch.as_tensor(link_positions(intervention.cfg))
    mine = [[grid] if grid.any() else [] for grid in grids]
    ablated = intervention.ablated_accuracy(mine, positions=positions)
    control = intervention.ablated_accuracy(controls, positions=positions)
    chain = offchain = [np.array([]) for _ in grids]  # one chain: no other chain to control with
    if intervention.cfg.chains >= 2:
        on_chain, off_chain = (torch.as_tensor(part) for part in chain_link_positions(intervention.cfg,
                                                                                       intervention.smap))
        chain = intervention.ablated_accuracy(mine, positions=on_chain)
        offchain = intervention.ablated_accuracy(mine, positions=off_chain)
    return pd.DataFrame({
        "instance": np.arange(n), "clean_accuracy": clean,
        "composing_heads": [" ".join(f"L{layer + 1}H{head}" for layer, head in zip(*np.nonzero(g), strict=True))
                            for g in grids],
        "composing_drop": [clean[e] - a[0] if len(a) else np.nan for e, a in enumerate(ablated)],
        "control_sets": [len(c) for c in controls],
        "control_drop": [clean[e] - a.mean() if len(a) else np.nan for e, a in enumerate(control)],
        "chain_drop": [clean[e] - a[0] if len(a) else np.nan for e, a in enumerate(chain)],
        "offchain_drop": [clean[e] - a[0] if len(a) else np.nan for e, a in enumerate(offchain)],
        "uniform_next": uniform[0], "uniform_prev": uniform[1],
    })
