"""The mechanism classifier on hand-built weights: a two-layer model that composes links is
compositional, a stacked one-hop-per-layer model linear."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch

from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.tasks.retrieval.heads import head_scores, statement_patterns, uniform_link_mass
from headway.tasks.retrieval.mechanism import classify, farthest_hops, mechanism_table
from headway.tasks.retrieval.positions import map_statements
from headway.tasks.retrieval.probes import depth_probes

BIG = 30.0


class Space:
    """Residual subspaces of the hand-built models, V wide each (marker and always-on: one dim)."""

    def __init__(self, v: int) -> None:
        self.v = v
        self.left, self.right, self.gathered = 0, v, 2 * v  # link symbols, and what a link gathers in layer 1
        self.marker, self.one = 3 * v, 3 * v + 1  # the QUERY marker; 1.0 at every position
        self.hop1, self.copied_right, self.copied_gathered = 3 * v + 2, 4 * v + 2, 5 * v + 2  # written at the query
        self.d_model = 6 * v + 2

    def block(self, start: int) -> slice:
        return slice(start, start + self.v)


def _hand_built(cfg: RetrievalConfig, compose: bool) -> EnsembleTransformer:
    """Two attention-only layers without LayerNorm, set by hand.

    Layer 1, head 1: the query attends to the link whose left symbol is the query symbol and copies its
    right symbol (hop 1). Layer 2, head 0: the query attends to the link whose left symbol is hop 1 and
    copies that link's right symbol and what the link gathered. With `compose`, layer 1 head 0 makes
    every link attend to the earlier link continuing from its right symbol (root-ward) and gather that
    link's right symbol, so layer 2 brings hop 3 to the query: D = 3 in two layers (chain order lets a
    link always see its root-ward neighbour). Without it the model is a one-hop-per-layer stack."""
    v, s = cfg.vocab, Space(cfg.vocab)
    model = EnsembleTransformer(ModelConfig(layers=2, heads=2, d_model=s.d_model, d_head=2 * v, d_mlp=0,
                                            layernorm=False), cfg.d_vocab, cfg.n_ctx, cfg.d_out, 1)
    eye = torch.eye(v)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        w_e = model.embed.W_E[0]
        for symbol in range(v):
            w_e[symbol, s.left + symbol] = 1.0
            w_e[cfg.base_vocab + symbol, s.right + symbol] = 1.0
        w_e[cfg.base_vocab + v, s.marker] = 1.0
        w_e[:, s.one] = 0.5  # two slots per position: 1.0 in all
        first, second = model.blocks[0].attn, model.blocks[1].attn
        if compose:  # head 0: right symbol asks for the link with that left symbol; copies its right symbol
            first.W_Q[0, 0, s.block(s.right), :v] = eye * BIG
            first.W_K[0, 0, s.block(s.left), :v] = eye
            first.W_V[0, 0, s.block(s.right), :v] = eye
            first.W_O[0, 0, :v, s.block(s.gathered)] = eye
        # head 1: the query symbol asks for the link with that left symbol, avoiding its own position
        first.W_Q[0, 1, s.block(s.left), :v] = eye * BIG
        first.W_K[0, 1, s.block(s.left), :v] = eye
        first.W_Q[0, 1, s.one, v] = BIG
        first.W_K[0, 1, s.marker, v] = -2.0
        first.W_V[0, 1, s.block(s.right), :v] = eye
        first.W_O[0, 1, :v, s.block(s.hop1)] = eye
        # layer 2, head 0: hop 1 asks for the link with that left symbol; copies its right and gathered symbols
        second.W_Q[0, 0, s.block(s.hop1), :v] = eye * BIG
        second.W_K[0, 0, s.block(s.left), :v] = eye
        second.W_V[0, 0, s.block(s.right), :v] = eye
        second.W_V[0, 0, s.block(s.gathered), v:] = eye
        second.W_O[0, 0, :v, s.block(s.copied_right)] = eye
        second.W_O[0, 0, v:, s.block(s.copied_gathered)] = eye
        blocks = [s.hop1, s.copied_right, s.copied_gathered] if compose else [s.hop1, s.copied_right]
        for j, start in enumerate(blocks):
            model.unembed.W_U[0, s.block(start), j * v : (j + 1) * v] = eye
    return model


def _evidence(model: EnsembleTransformer, cfg: RetrievalConfig, n: int = 600):
    batch = generate(cfg, n, 3)
    smap = map_statements(cfg, batch)
    probes = depth_probes(model, cfg, batch, smap)
    heads = head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True)
    with torch.no_grad():
        out = model(torch.as_tensor(batch.tokens).long()[None])[0]
    accuracy = float((out[:, -cfg.vocab:].argmax(-1).numpy() == batch.answer).mean())
    return probes, heads, accuracy, uniform_link_mass(smap, causal=True)


COMPOSE = RetrievalConfig(vocab=12, chains=2, hops=3, order="chain")
STACK = RetrievalConfig(vocab=12, chains=2, hops=2)


def test_a_hand_built_two_layer_model_that_composes_links_is_compositional():
    model = _hand_built(COMPOSE, compose=True)
    probes, heads, accuracy, uniform = _evidence(model, COMPOSE)
    assert accuracy == 1.0  # three hops in two layers
    found = classify(probes, heads, layers=2, solved=True, uniform=uniform)
    assert found.mechanism == "compositional"
    assert found.farthest == (1, 3) and found.excess == 1
    assert found.reads == "root-ward" and found.link_next > 0.95


def test_a_hand_built_stack_of_one_hop_heads_is_linear():
    model = _hand_built(STACK, compose=False)
    probes, heads, accuracy, uniform = _evidence(model, STACK)
    assert accuracy == 1.0
    found = classify(probes, heads, layers=2, solved=True, uniform=uniform)
    assert found.mechanism == "linear"
    assert found.farthest == (1, 2) and found.excess == 0
    assert found.reads == "none"  # layer 1 head 0 is uniform: no more than twice the uniform share


def test_the_stack_cannot_answer_three_hops_and_an_unsolved_model_is_unsolved():
    cfg = RetrievalConfig(vocab=12, chains=2, hops=3, order="chain")
    model = _hand_built(cfg, compose=False)
    probes, heads, accuracy, uniform = _evidence(model, cfg)
    assert accuracy < 0.9  # the readout's third block reads nothing
    assert classify(probes, heads, layers=2, solved=False, uniform=uniform).mechanism == "unsolved"


def test_farthest_hop_counts_a_jump_past_an_undecoded_hop():
    probes = pd.DataFrame({"site": "query", "layer": [1, 1, 2, 2, 2], "hops": [1, 2, 1, 2, 3],
                           "accuracy": [0.99, 0.2, 0.99, 0.1, 0.95]})
    assert farthest_hops(probes, layers=2) == (1, 3)
    assert farthest_hops(probes, layers=2, threshold=0.96) == (1, 1)


def test_mechanism_table_classifies_each_model_by_its_key():
    probes = pd.DataFrame({"run_id": ["a", "a", "b", "b"], "site": "query", "layer": [1, 2, 1, 2],
                           "hops": [1, 3, 1, 2], "accuracy": 0.99})
    heads = pd.DataFrame({"run_id": ["a", "b"], "layer": 0, "head": 0, "link_next": [0.9, 0.1],
                          "link_prev": [0.0, 0.1]})
    models = pd.DataFrame({"run_id": ["a", "b", "c"], "layers": 2, "solved": [True, True, False],
                           "uniform_next": 0.2, "uniform_prev": 0.2})
    table = mechanism_table(probes, heads, models).set_index("run_id")
    assert table.mechanism.to_dict() == {"a": "compositional", "b": "linear", "c": "unsolved"}
    assert table.loc["a", "reads"] == "root-ward" and table.loc["b", "reads"] == "none"
    assert np.isclose(table.loc["a", "link_next"], 0.9)


@pytest.mark.parametrize("causal", [True, False])
def test_uniform_reference_matches_a_uniform_head(causal):
    cfg = RetrievalConfig(vocab=16, chains=3, hops=3, order="shuffled")
    model = EnsembleTransformer(ModelConfig(layers=1, heads=1, d_model=8, d_mlp=0,
                                            attention="causal" if causal else "bidirectional"),
                                cfg.d_vocab, cfg.n_ctx, cfg.d_out, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()  # zero queries: uniform attention over the visible positions
    batch = generate(cfg, 200, 0)
    smap = map_statements(cfg, batch)
    scores = head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=causal)
    assert np.allclose(uniform_link_mass(smap, causal), (scores.link_next[0], scores.link_prev[0]), atol=1e-5)
