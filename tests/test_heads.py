"""Head scores, interventions and the role rule on cases with known answers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.analysis.retrieval.heads import head_scores, statement_patterns
from headway.analysis.retrieval.interventions import HeadIntervention, head_effects, swap_roots
from headway.tasks.retrieval.positions import map_statements
from headway.analysis.retrieval.faithfulness import circuit_check
from headway.analysis.retrieval.paths import path_patching
from headway.analysis.retrieval.roles import attention_roles, name_circuit
from headway.studies.retrieval.rules import RetrievalRules
from headway.tasks.retrieval.solver import solve

TASK = RetrievalConfig(vocab=12, chains=3, hops=2)
RULES = RetrievalRules()  # the stacked-heads study's thresholds: the analysis holds none of its own
SUFFICIENT, RANDOM_SETS = RULES.sufficient_faithfulness, RULES.random_sets


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
    scores = attention_roles(head_scores(_hand_patterns(TASK, batch, smap), TASK, smap, causal=True),
                             RULES.role_score)
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
    assert effects.loc[0, "resample_accuracy"] < 0.4  # another example's output names another root
    for kind in ("zero", "mean", "resample", "patch"):
        assert abs(effects.loc[1, f"{kind}_drop"]) < 1e-9
    scores = attention_roles(head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True),
                             RULES.role_score)
    heads = name_circuit(scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention,
                         RULES.circuit_drop)
    assert heads.set_index("head").loc[0, "role"] == "query→hop1"
    assert list(heads.in_circuit) == [True, False]
    check = circuit_check(heads, intervention, SUFFICIENT, RANDOM_SETS).iloc[0]
    assert check.circuit_ablated_accuracy < 0.4 and check.circuit_resample_accuracy < 0.4
    assert check.rest_ablated_accuracy == 1.0 and check.faithfulness > 0.99
    assert check.minimal_circuit == "L1H0"
    # of 2 heads, a random set of one is the circuit half the time: the null cannot be beaten here
    assert check.random_sets == 49 and 0.3 < check.p_necessary < 0.75


def _scores_and_effects(model: EnsembleTransformer, cfg: RetrievalConfig, seed: int):
    batch = generate(cfg, 512, seed)
    smap = map_statements(cfg, batch)
    intervention = HeadIntervention(model, cfg, batch, smap)
    scores = attention_roles(head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True),
                             RULES.role_score)
    return scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention


def test_a_head_that_shares_the_attention_but_writes_nothing_stays_out_of_the_circuit():
    """The audit's case: head 1 gets head 0's attention and W_O = 0, so its group drop is head 0's."""
    cfg = RetrievalConfig(vocab=12, chains=3, hops=1, curriculum="none")
    model = _retrieval_head_model(cfg)
    with torch.no_grad():
        attn = model.blocks[0].attn
        for w in (attn.W_Q, attn.W_K, attn.W_V):
            w[0, 1] = w[0, 0]
        attn.W_O[0, 1] = 0.0
    effects, intervention = _scores_and_effects(model, cfg, 5)
    heads = name_circuit(effects, intervention, RULES.circuit_drop).set_index("head")
    assert list(heads.role) == ["query→hop1", "query→hop1"]  # same attention, same role and group
    assert heads.loc[1, "group_drop"] > 0.5 and abs(heads.loc[1, "member_drop"]) < 1e-9
    assert list(heads.in_circuit) == [True, False]


def test_a_circuit_of_every_head_cannot_beat_random_sets_and_an_insufficient_one_is_flagged():
    cfg = RetrievalConfig(vocab=12, chains=3, hops=1, curriculum="none")
    model = _retrieval_head_model(cfg)
    effects, intervention = _scores_and_effects(model, cfg, 6)
    heads = name_circuit(effects, intervention, RULES.circuit_drop)
    everything = circuit_check(heads.assign(in_circuit=True), intervention, SUFFICIENT, RANDOM_SETS).iloc[0]
    assert everything.p_necessary == 1.0 and everything.p_sufficient == 1.0  # every set of size 2 is this set
    useless = circuit_check(heads.assign(in_circuit=heads["head"] == 1), intervention, SUFFICIENT,
                            RANDOM_SETS).iloc[0]
    assert useless.faithfulness < 0.1 and useless.minimal_heads == 1  # insufficient: returned whole, not searched


def _two_layer_stack(cfg: RetrievalConfig) -> EnsembleTransformer:
    """A hand-built two-layer model for D = 1 whose layer-1 head 0 writes the answer into the left-symbol
    block of the query position (twice as strong as the query's own symbol there) and whose layer-2
    head 0 attends from the query to itself and copies that block to the read-out: layer 2 reads what
    layer 1 wrote, through its values only."""
    model1 = _retrieval_head_model(cfg)
    d = model1.cfg.d_model
    model = EnsembleTransformer(ModelConfig(layers=2, heads=2, d_model=d, d_head=d, d_mlp=0, layernorm=False),
                                cfg.d_vocab, cfg.n_ctx, cfg.d_out, 1)
    v = cfg.vocab
    with torch.no_grad():
        for p in model.parameters():
            p.zero_()
        model.embed.W_E.copy_(model1.embed.W_E)
        for name in ("W_Q", "W_K", "W_V", "W_O"):
            getattr(model.blocks[0].attn, name).copy_(getattr(model1.blocks[0].attn, name))
        model.blocks[0].attn.W_O[0, 0, v : 2 * v, v : 2 * v] = 0.0  # layer 1 writes the answer elsewhere ...
        model.blocks[0].attn.W_O[0, 0, v : 2 * v, 0:v] = 2.0 * torch.eye(v)  # ... into the left-symbol block
        second = model.blocks[1].attn
        second.W_Q[0, 0, 2 * v + 1, 0] = 100.0  # every position attends to the query marker's position: the
        second.W_K[0, 0, 2 * v, 0] = 1.0  # query attends to itself (the others cannot see it)
        second.W_V[0, 0, :v, :v] = torch.eye(v)  # layer 2 copies that block into the read-out block
        second.W_O[0, 0, :v, v : 2 * v] = 2.0 * torch.eye(v)
        model.unembed.W_U[0, v : 2 * v, :] = torch.eye(v)
    return model


def test_path_patching_sees_layer_two_read_what_layer_one_wrote_through_its_values():
    cfg = RetrievalConfig(vocab=12, chains=3, hops=1, curriculum="none")
    model = _two_layer_stack(cfg)
    effects, intervention = _scores_and_effects(model, cfg, 7)
    assert intervention.accuracy(intervention.clean_prediction)[0] == 1.0
    heads = name_circuit(effects, intervention, RULES.circuit_drop)
    assert heads.set_index(["layer", "head"]).in_circuit.to_dict() == {(0, 0): True, (0, 1): False,
                                                                        (1, 0): True, (1, 1): False}
    paths = path_patching(heads, intervention).set_index("channel")
    assert paths.loc["qkv", "senders"] == "L1H0" and paths.loc["qkv", "receivers"] == "L2H0"
    assert paths.loc["qkv", "direct_drop"] > 0.5
    assert paths.loc["v", "path_drop"] == pytest.approx(paths.loc["qkv", "direct_drop"], abs=0.02)
    assert abs(paths.loc["q", "path_drop"]) < 0.02 and abs(paths.loc["k", "path_drop"]) < 0.02
    assert abs(paths.loc["qkv", "other_drop"]) < 0.02  # layer 2's other head reads nothing from it


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
    scores = attention_roles(head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True),
                             RULES.role_score)
    heads = name_circuit(scores.merge(head_effects(intervention), on=["instance", "layer", "head"]), intervention,
                         RULES.circuit_drop)
    assert (heads.mean_drop < 0.05).all()  # neither alone matters ...
    assert (heads.group_drop > 0.5).all()  # ... but together they carry the answer
    assert list(heads.evidence) == ["group", "group"]
