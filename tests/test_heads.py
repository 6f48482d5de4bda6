"""Head scores, interventions and the role rule on cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.tasks.retrieval.heads import head_scores, statement_patterns
from headway.tasks.retrieval.interventions import HeadIntervention, head_effects, swap_roots
from headway.tasks.retrieval.positions import map_statements
from headway.tasks.retrieval.roles import attention_roles, circuit_check, name_circuit
from headway.tasks.retrieval.solver import solve

TASK = RetrievalConfig(vocab=12, chains=3, hops=2)


def _hand_patterns(cfg: RetrievalConfig, batch, smap) -> np.ndarray:
    """[E=1, N, L=1, H=3, P, P]: head 0 reads hop 1 from the query, head 1 reads each link's next link
    (itself when it has none or cannot see it), head 2 attends uniformly."""
    n, p = smap.rows.shape[:2]
    patterns = np.zeros((1, n, 1, 3, p, p), dtype=np.float32)
    examples = np.arange(n)
    for i in range(p):
        patterns[0, examples, 0, 0, i, i] = 1.0
        nxt = smap.next_link[:, i]
        target = np.where((nxt >= 0) & (nxt <= i), nxt, i)
        patterns[0, examples, 0, 1, i, target] = 1.0
        patterns[0, :, 0, 2, i, : i + 1] = 1.0 / (i + 1)
    patterns[0, examples, 0, 0, smap.query] = 0.0
    patterns[0, examples, 0, 0, smap.query, smap.hop_link[:, 0]] = 1.0
    return patterns


def test_scores_and_roles_of_hand_set_attention():
    batch = generate(TASK, 400, 0)
    smap = map_statements(TASK, batch)
    scores = attention_roles(head_scores(_hand_patterns(TASK, batch, smap), TASK, smap, causal=True))
    by_head = scores.set_index("head")
    assert by_head.loc[0, "query_hop1"] == pytest.approx(1.0)
    assert by_head.loc[0, "query_hop2"] == pytest.approx(0.0)
    assert by_head.loc[1, "link_next"] == pytest.approx(1.0)
    assert by_head.loc[1, "link_prev"] == pytest.approx(0.0)
    p = smap.n_statements
    assert by_head.loc[2, "query_chain"] == pytest.approx(2.0 / p, rel=1e-5)  # uniform: 1/P on each of the D hop links
    assert list(by_head.role) == ["query→hop1", "link→next", "none"]


def test_statement_patterns_of_a_model_without_queries_are_uniform_over_visible_statements():
    flat = RetrievalConfig(vocab=12, chains=3, hops=2, layout="flat")
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=16), flat.d_vocab, flat.n_ctx,
                                           flat.d_out, [0])
    with torch.no_grad():
        model.blocks[0].attn.W_Q.zero_()
    batch = generate(flat, 8, 1)
    patterns = statement_patterns(model, flat, batch.tokens)
    p = flat.n_ctx // 2
    reading = np.arange(p) * 2 + 1  # each statement is read at its second slot, seeing 2*(i+1) positions
    for i in range(p):
        expected = np.zeros(p)
        expected[: i + 1] = 2.0 / (reading[i] + 1)
        assert np.allclose(patterns[0, :, 0, :, i], expected, atol=1e-6)


def test_root_swap_changes_only_the_answer():
    batch = generate(TASK, 200, 2)
    smap = map_statements(TASK, batch)
    tokens, new_answer = swap_roots(TASK, batch, smap)
    assert (new_answer != batch.answer).all()
    for i in range(20):
        rows = tokens[i] - np.array([0, TASK.base_vocab])
        statements = rows[:-1].tolist()
        assert solve(statements, int(rows[-1, 0]), TASK.hops)[-1] == new_answer[i]
        assert solve(statements, int(rows[-1, 0]), TASK.hops)[:-1] == batch.chain[i, :-1].tolist()


def _retrieval_head_model(cfg: RetrievalConfig) -> EnsembleTransformer:
    """A hand-built one-layer, attention-only model that solves D=1: head 0 attends from the query to the
    link whose left symbol is the query symbol and copies that link's right symbol to the readout;
    head 1 does nothing useful (it attends uniformly and writes noise into an unread direction)."""
    v, big = cfg.vocab, 20.0
    d = 2 * v + 2  # [left one-hots | right one-hots | query marker | always-on]
    model = EnsembleTransformer(ModelConfig(layers=1, heads=2, d_model=d, d_head=d, d_mlp=0, layernorm=False),
                                cfg.d_vocab, cfg.n_ctx, cfg.d_out, 1)
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        w_e = model.embed.W_E[0]
        for s in range(v):
            w_e[s, s] = 1.0  # left slot
            w_e[cfg.base_vocab + s, v + s] = 1.0  # right slot
        w_e[cfg.base_vocab + v, 2 * v] = 1.0  # the QUERY marker in the right slot
        w_e[:, 2 * v + 1] = 0.5  # two slots per position: 1.0 in total
        attn = model.blocks[0].attn
        eye = torch.eye(d)
        attn.W_Q[0, 0, :v] = eye[:v] * big
        attn.W_K[0, 0, :v] = eye[:v]
        attn.W_Q[0, 0, 2 * v + 1, 2 * v] = big  # every query ...
        attn.W_K[0, 0, 2 * v, 2 * v] = -2.0  # ... avoids the position holding the query marker (itself)
        attn.W_V[0, 0, v : 2 * v, v : 2 * v] = torch.eye(v)
        attn.W_O[0, 0] = eye
        attn.W_V[0, 1, 2 * v + 1, 0] = 1.0
        attn.W_O[0, 1, 0, 2 * v] = 3.0  # head 1 writes into the marker direction, which nothing reads
        model.unembed.W_U[0, v : 2 * v, :] = torch.eye(v)
    return model


def test_ablating_the_head_that_carries_the_answer_drops_to_chance_and_others_cost_nothing():
    cfg = RetrievalConfig(vocab=12, chains=3, hops=1, curriculum="none")
    model = _retrieval_head_model(cfg)
    batch = generate(cfg, 512, 3)
    smap = map_statements(cfg, batch)
    intervention = HeadIntervention(model, cfg, batch, smap)
    assert intervention.accuracy(intervention.clean_prediction)[0] == 1.0
    effects = head_effects(intervention).set_index("head")
    assert effects.loc[0, "zero_accuracy"] < 0.2
    assert effects.loc[0, "mean_accuracy"] < 0.4  # the mean output favours no root over the others
    assert effects.loc[0, "patch_flip"] == pytest.approx(1.0)  # the swapped root is read out instead
    for kind in ("zero", "mean", "patch"):
        assert abs(effects.loc[1, f"{kind}_drop"]) < 1e-9
    scores = attention_roles(head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True))
    heads = name_circuit(scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention)
    assert heads.set_index("head").loc[0, "role"] == "query→hop1"
    assert list(heads.in_circuit) == [True, False]
    check = circuit_check(heads, intervention).iloc[0]
    assert check.circuit_ablated_accuracy < 0.4
    assert check.rest_ablated_accuracy == 1.0


def test_redundant_heads_are_named_by_their_group():
    cfg = RetrievalConfig(vocab=12, chains=3, hops=1, curriculum="none")
    model = _retrieval_head_model(cfg)
    with torch.no_grad():  # head 1 becomes a copy of head 0, each at half strength: either alone suffices
        attn = model.blocks[0].attn
        for w in (attn.W_Q, attn.W_K, attn.W_V, attn.W_O):
            w[0, 1] = w[0, 0]
    batch = generate(cfg, 512, 4)
    smap = map_statements(cfg, batch)
    intervention = HeadIntervention(model, cfg, batch, smap)
    scores = attention_roles(head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True))
    heads = name_circuit(scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention)
    assert (heads.mean_drop < 0.05).all()  # neither alone matters ...
    assert (heads.group_drop > 0.5).all()  # ... but together they carry the answer
    assert list(heads.evidence) == ["group", "group"]
