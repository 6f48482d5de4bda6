"""The mechanism classifier: every label from constructed evidence, hand-built models whose mechanism is
known by construction, and two models trained at CPU scale, one composing links and one linear."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.plots.marks import MECHANISM_MARKS
from headway.runs.config import expand_grid
from headway.runs.store import final_metrics, find_run, load_model
from headway.studies.retrieval.phase import mechanism_evidence
from headway.studies.retrieval.rules import RetrievalRules
from headway.tasks.registry import scale_settings
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.analysis.retrieval.composition import chain_link_positions, composition_check, control_sets, link_positions
from headway.analysis.retrieval.heads import head_scores, statement_patterns, uniform_link_mass
from headway.analysis.retrieval.interventions import HeadIntervention
from headway.analysis.retrieval.mechanism import (MECHANISM_COLUMNS, MECHANISMS, Ablation, classify, farthest_hops,
                                               mechanism_table)
from headway.tasks.retrieval.positions import map_statements
from headway.analysis.retrieval.probes import depth_probes, probe_examples
from headway.train.sweep import train_runs

BIG = 30.0
RULES = RetrievalRules()
RULE = RULES.mechanism_rule()  # the study's thresholds: the classifier has none of its own


# --- constructed evidence: each label and each reason -------------------------------------------

def probe_rows(query: dict[int, list[float]], link: dict[int, list[float]]) -> pd.DataFrame:
    """depth_probes-shaped rows of one model: per site, layer -> held-out accuracy of hops 1, 2, …"""
    return pd.DataFrame([{"site": site, "layer": layer, "hops": k + 1, "accuracy": value, "train_accuracy": 1.0}
                         for site, table in (("query", query), ("link", link))
                         for layer, values in table.items() for k, value in enumerate(values)])


COMPOSING_HEADS = pd.DataFrame({"layer": [0, 0, 1], "head": [0, 1, 0], "link_next": [0.95, 0.02, 0.9],
                                "link_prev": [0.0, 0.0, 0.0]})
LINEAR_HEADS = COMPOSING_HEADS.assign(link_next=[0.02, 0.02, 0.9])
QUERY_D3 = {1: [0.99, 0.05, 0.05], 2: [0.99, 0.99, 0.99]}  # hop 1, then hops 2 and 3
LINKS_COMPOSE = {1: [1.0, 0.98, 0.05], 2: [1.0, 0.99, 0.97]}  # hop 2 at links after layer 1
LINKS_ALONE = {1: [1.0, 0.04, 0.05], 2: [1.0, 0.5, 0.05]}  # hop 2 only after the last layer
NEEDED = Ablation(composing_drop=0.85, control_drop=0.05)


def test_a_solved_model_whose_links_compose_and_whose_answer_needs_them_is_compositional():
    found = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                     accuracy=0.99, ablation=NEEDED)
    assert found.mechanism == "compositional", found
    assert found.farthest == (1, 3) and found.link_farthest == (2, 3) and found.reads == "root-ward"
    assert "links decode hop 2 after layer 1" in found.reason and "costs 0.85" in found.reason
    assert found.probe_held_out == 0.99 and math.isclose(found.adequacy_gap, 0.0)


def test_composing_heads_without_control_heads_decide_nothing():
    """Every head of the composing layer composes, so nothing tells its ablation's drop from what removing any
    heads there costs: a missing control never passes, at D > L and at D ≤ L alike."""
    uncontrolled = Ablation(composing_drop=0.95, control_drop=math.nan)
    for hops, query, links in ((3, QUERY_D3, LINKS_COMPOSE), (2, {1: [0.99, 0.05], 2: [0.99, 0.99]},
                                                                {1: [1.0, 0.98], 2: [1.0, 0.99]})):
        found = classify(probe_rows(query, links), COMPOSING_HEADS, rule=RULE, layers=2, hops=hops, solved=True,
                         accuracy=0.99, ablation=uncontrolled)
        assert found.mechanism == "not classifiable", found
        assert "no control heads" in found.reason
    unneeded = classify(probe_rows({1: [0.99, 0.05], 2: [0.99, 0.99]}, {1: [1.0, 0.98], 2: [1.0, 0.99]}),
                        COMPOSING_HEADS, rule=RULE, layers=2, hops=2, solved=True, accuracy=0.99,
                        ablation=Ablation(composing_drop=0.0, control_drop=math.nan))
    assert unneeded.mechanism == "linear", unneeded  # the answer survives without them: no control needed


def test_the_position_control_decides_where_the_composing_heads_are_every_head_of_their_layers():
    """No control heads, but the same heads ablated at another chain's links: a drop on the queried chain far
    above it establishes composition; as costly off the chain it does not; unmeasured, nothing is decided."""
    needed = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                      accuracy=0.99, ablation=Ablation(0.95, math.nan, chain_drop=0.9, offchain_drop=0.02))
    assert needed.mechanism == "compositional" and needed.control == "positions", needed
    assert "queried chain's links costs 0.90, at another chain's 0.02" in needed.reason
    anywhere = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3,
                        solved=True, accuracy=0.99, ablation=Ablation(0.95, math.nan, chain_drop=0.9, offchain_drop=0.85))
    assert anywhere.mechanism == "not classifiable" and "does not need them" in anywhere.reason, anywhere
    heads_first = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3,
                           solved=True, accuracy=0.99, ablation=Ablation(0.6, 0.5, chain_drop=0.9, offchain_drop=0.0))
    assert heads_first.control == "heads" and heads_first.mechanism == "not classifiable"  # head control decides
    unmeasured = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3,
                          solved=True, accuracy=0.99, ablation=Ablation(0.95, math.nan, chain_drop=0.9))
    assert unmeasured.control == "none" and "no position control" in unmeasured.reason


def test_a_composition_only_some_orders_allow_is_read_on_the_flow_gated_sites():
    """Over all links hop 2 decodes at 0.5 after layer 1 (the neighbour came earlier in half of them): the link
    site misses it, the flow-gated root-ward site reads it, and composition is established from it."""
    rows = probe_rows(QUERY_D3, {1: [1.0, 0.5, 0.05], 2: [1.0, 0.6, 0.4]})
    gated = pd.DataFrame([{"site": "link_rootward", "layer": layer, "hops": k + 1, "accuracy": value,
                           "train_accuracy": 1.0} for layer, values in {1: [1.0, 0.99, math.nan], 2: [1.0, 0.99, 0.5]}.items()
                          for k, value in enumerate(values)])
    alone = classify(rows, COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True, accuracy=0.99, ablation=NEEDED)
    assert alone.mechanism == "not classifiable" and alone.rootward_farthest == ()
    found = classify(pd.concat([rows, gated]), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                     accuracy=0.99, ablation=NEEDED)
    assert found.mechanism == "compositional", found
    assert found.link_farthest == (1, 1) and found.rootward_farthest == (2, 2) and found.leafward_farthest == ()


def test_d_at_most_l_without_link_composition_is_linear():
    query = {1: [0.99, 0.05], 2: [0.99, 0.99]}
    found = classify(probe_rows(query, {1: [1.0, 0.03], 2: [1.0, 0.5]}), LINEAR_HEADS, rule=RULE, layers=2, hops=2,
                     solved=True, accuracy=1.0)
    assert found.mechanism == "linear" and "links decode no hop ≥ 2 before the last layer" in found.reason
    assert found.reads == "none" and math.isnan(found.composing_drop)


def test_the_last_layers_decode_alone_never_makes_a_model_compositional():
    """The old rule's evidence: after layer 2 the query decodes hop 3, a hop beyond 2, but the links never
    composed before the last layer: D > L without link evidence is not classifiable, not compositional."""
    found = classify(probe_rows(QUERY_D3, LINKS_ALONE), LINEAR_HEADS, rule=RULE, layers=2, hops=3, solved=True, accuracy=0.99)
    assert found.farthest == (1, 3)
    assert found.mechanism == "not classifiable" and "D = 3 > L = 2" in found.reason


def test_links_that_decode_far_hops_but_that_the_answer_does_not_need_are_not_composition():
    useless = Ablation(composing_drop=0.01, control_drop=0.0)
    beyond = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                      accuracy=0.99, ablation=useless)
    assert beyond.mechanism == "not classifiable" and "the answer does not need them" in beyond.reason
    query = {1: [0.99, 0.05], 2: [0.99, 0.99]}
    within = classify(probe_rows(query, {1: [1.0, 0.98], 2: [1.0, 0.99]}), COMPOSING_HEADS, rule=RULE, layers=2, hops=2,
                      solved=True, accuracy=1.0, ablation=useless)
    assert within.mechanism == "linear"  # D ≤ L: the answer survives without the composing heads
    as_costly = Ablation(composing_drop=0.6, control_drop=0.5)  # any heads of those layers cost as much
    assert classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                    accuracy=0.99, ablation=as_costly).mechanism == "not classifiable"


def test_a_query_probe_that_under_reads_the_model_makes_it_not_classifiable():
    """The case that motivated the rule: accuracy 0.945, final-layer probe 0.746, farthest hops (1, 1)."""
    weak = {1: [0.99, 0.05, 0.05], 2: [0.99, 0.6, 0.746]}
    found = classify(probe_rows(weak, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True,
                     accuracy=0.945, ablation=NEEDED)
    assert found.farthest == (1, 1)
    assert found.mechanism == "not classifiable" and "too weak" in found.reason
    assert math.isclose(found.adequacy_gap, 0.199)
    missing = probe_rows({1: [0.99]}, LINKS_COMPOSE)  # no final-layer probe for hop 3 at all
    assert classify(missing, COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=True, accuracy=0.99,
                    ablation=NEEDED).mechanism == "not classifiable"


def test_an_unsolved_model_is_unsolved_whatever_its_evidence():
    found = classify(probe_rows(QUERY_D3, LINKS_COMPOSE), COMPOSING_HEADS, rule=RULE, layers=2, hops=3, solved=False,
                     accuracy=0.4, ablation=NEEDED)
    assert found.mechanism == "unsolved" and found.link_farthest == (2, 3)


def test_farthest_hop_counts_a_jump_past_an_undecoded_hop():
    probes = pd.DataFrame({"site": "query", "layer": [1, 1, 2, 2, 2], "hops": [1, 2, 1, 2, 3],
                           "accuracy": [0.99, 0.2, 0.99, 0.1, 0.95]})
    assert farthest_hops(probes, layers=2, threshold=0.9) == (1, 3)
    assert farthest_hops(probes, layers=2, threshold=0.96) == (1, 1)


def test_mechanism_table_classifies_each_model_by_its_key_with_every_evidence_column():
    probes = pd.concat([probe_rows(QUERY_D3, LINKS_COMPOSE).assign(run_id="a"),
                        probe_rows({1: [0.99, 0.05], 2: [0.99, 0.99]}, LINKS_ALONE).assign(run_id="b"),
                        probe_rows(QUERY_D3, LINKS_ALONE).assign(run_id="c")])
    heads = pd.concat([COMPOSING_HEADS.assign(run_id="a"), LINEAR_HEADS.assign(run_id="b")])
    models = pd.DataFrame({"run_id": ["a", "b", "c", "d"], "layers": 2, "hops": [3, 2, 3, 3],
                           "solved": [True, True, True, False], "accuracy": [0.99, 1.0, 0.99, 0.3]})
    composition = pd.DataFrame({"run_id": ["a"], "composing_heads": ["L1H0"], "composing_drop": [0.85],
                                "control_drop": [0.05], "uniform_next": [0.2], "uniform_prev": [0.2]})
    table = mechanism_table(probes, heads, models, RULE, composition).set_index("run_id")
    assert list(table.columns) == list(MECHANISM_COLUMNS)
    assert table.mechanism.to_dict() == {"a": "compositional", "b": "linear", "c": "not classifiable", "d": "unsolved"}
    assert table.loc["a", "composing_heads"] == "L1H0" and table.loc["a", "link_farthest"] == "2,3"
    assert table.loc["a", "farthest"] == "1,3" and np.isclose(table.loc["a", "control_drop"], 0.05)
    assert math.isnan(table.loc["b", "composing_drop"])  # no composition row: no ablation evidence
    assert set(table.mechanism) <= set(MECHANISMS)


def test_every_classified_mechanism_has_a_mark_in_the_figures():
    assert set(MECHANISM_MARKS) == set(MECHANISMS) - {"unsolved"}


def test_control_sets_match_the_composing_heads_layer_by_layer():
    composing = np.array([[True, False, False, False], [True, True, False, False], [False] * 4])
    sets = control_sets(composing)
    assert len(sets) == 3 * 1  # one of layer 1's three others, both of layer 2's two others
    for grid in sets:
        assert not (grid & composing).any() and grid.sum(axis=1).tolist() == [1, 2, 0]
    wide = np.zeros((2, 8), dtype=bool)
    wide[:, :2] = True
    assert len(control_sets(wide, most=5)) == 5  # C(6, 2)² = 225 choices, five drawn
    assert control_sets(np.zeros((2, 4), dtype=bool)) == []


def test_link_positions_are_every_position_before_the_query_statement():
    packed, flat = RetrievalConfig(vocab=12, chains=2, hops=2), RetrievalConfig(vocab=12, chains=2, hops=2,
                                                                                layout="flat")
    assert link_positions(packed).tolist() == [True] * 4 + [False]
    assert link_positions(flat).tolist() == [True] * 8 + [False] * 2


# --- hand-built models: the mechanism is known by construction ---------------------------------

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


def _classified(model: EnsembleTransformer, cfg: RetrievalConfig):
    """The model's accuracy and its Mechanism from probes sized by `probe_examples`, head scores and the
    composition check, all on fresh examples (the model is causal)."""
    probed = generate(cfg, probe_examples(model.cfg.d_model, cfg.vocab), 3)
    probes = depth_probes(model, cfg, probed, map_statements(cfg, probed))
    batch = generate(cfg, 600, 4)
    smap = map_statements(cfg, batch)
    heads = head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True)
    intervention = HeadIntervention(model, cfg, batch, smap)
    accuracy = float(intervention.accuracy(intervention.clean_prediction)[0])
    check = composition_check(heads, intervention, uniform_link_mass(smap, causal=True), RULES.read_level).iloc[0]
    found = classify(probes, heads, rule=RULE, layers=2, hops=cfg.hops, solved=accuracy >= 0.9, accuracy=accuracy,
                     ablation=Ablation(check.composing_drop, check.control_drop), uniform=uniform_link_mass(smap, True))
    return accuracy, found


COMPOSE = RetrievalConfig(vocab=12, chains=2, hops=3, order="chain")
STACK = RetrievalConfig(vocab=12, chains=2, hops=2)


def test_a_hand_built_two_layer_model_that_composes_links_is_compositional():
    accuracy, found = _classified(_hand_built(COMPOSE, compose=True), COMPOSE)
    assert accuracy == 1.0  # three hops in two layers
    assert found.mechanism == "compositional", found
    assert found.link_farthest[0] >= 2 and found.farthest == (1, 3)
    assert found.reads == "root-ward" and found.link_next > 0.95
    assert found.composing_drop > 0.5 and found.control_drop < 0.05  # layer 1's other head works at the query


def test_the_position_control_on_the_hand_built_composer():
    """Its composing head ablated at the queried chain's links breaks hop 3; at another chain's, nothing."""
    cfg = COMPOSE
    batch = generate(cfg, 600, 4)
    smap = map_statements(cfg, batch)
    model = _hand_built(cfg, compose=True)
    on_chain, off_chain = chain_link_positions(cfg, smap)
    assert (on_chain.sum(axis=1) == cfg.hops).all() and (off_chain.sum(axis=1) == cfg.hops).all()
    assert not (on_chain & off_chain).any() and not on_chain[:, -1].any()  # links only, never the query
    heads = head_scores(statement_patterns(model, cfg, batch.tokens), cfg, smap, causal=True)
    check = composition_check(heads, HeadIntervention(model, cfg, batch, smap), uniform_link_mass(smap, causal=True),
                              RULES.read_level).iloc[0]
    assert check.chain_drop > 0.5 and check.offchain_drop < 0.02, check


def test_flow_gated_probes_see_a_root_ward_composition_shuffled_orders_allow_half_the_time():
    """The hand-built composer under shuffled links composes only where the root-ward neighbour came earlier:
    the link site reads hop 2 after layer 1 at about half, the gated root-ward site on its own samples fully,
    and the gated leaf-ward site (it never reads leaf-ward) near chance."""
    cfg = RetrievalConfig(vocab=12, chains=2, hops=3, order="shuffled")
    model = _hand_built(cfg, compose=True)
    probed = generate(cfg, probe_examples(model.cfg.d_model, cfg.vocab), 3)
    table = depth_probes(model, cfg, probed, map_statements(cfg, probed)).set_index(["site", "layer", "hops"])
    assert 0.35 < table.accuracy["link", 1, 2] < 0.65
    assert table.accuracy["link_rootward", 1, 2] >= 0.99
    assert table.accuracy["link_leafward", 1, 2] < 0.3
    assert table.samples["link_rootward", 1, 2] < 0.6 * table.samples["link", 1, 2]  # the orders that allow it
    assert table.samples["link_rootward", 0, 2] == 0  # nothing composes before the first layer


def test_a_hand_built_stack_of_one_hop_heads_is_linear():
    accuracy, found = _classified(_hand_built(STACK, compose=False), STACK)
    assert accuracy == 1.0
    assert found.mechanism == "linear", found
    assert found.farthest == (1, 2) and found.link_farthest == (1, 1)
    assert found.reads == "none"  # layer 1 head 0 is uniform: no more than twice the uniform share


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


# --- trained at CPU scale: one model composing links, one linear ---------------------------------

TRAINED = {**scale_settings("cpu"), "vocab": 24, "chains": 4, "heads": 4, "d_model": 64, "supervision": "query",
           "curriculum": "ic", "eval_every": 100, "log_checkpoints": 1, "seed": 0}
# Causal, chain order, 2 layers on D = 3: solved from about step 700 (seed 0: hop-3 accuracy 0.40 at 600,
# 1.00 at 700). Shuffled order, 2 layers on D = 2: solved from step 300, one hop per layer.
CELLS = {"composing": {"layers": 2, "hops": 3, "order": "chain", "steps": 800, "checkpoint_every": 800},
         "linear": {"layers": 2, "hops": 2, "order": "shuffled", "steps": 400, "checkpoint_every": 400}}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """The two trained models' metrics, evidence and mechanism table, by cell name."""
    out = tmp_path_factory.mktemp("mechanism")
    runs = {name: expand_grid({**TRAINED, **cell}, {})[0] for name, cell in CELLS.items()}
    final = final_metrics(train_runs(list(runs.values()), out, device="cpu", progress=False)).set_index("run_id")
    probes, heads, composition = mechanism_evidence(out, {run.run_id for run in runs.values()}, RULES.read_level)
    models = pd.DataFrame({"run_id": [run.run_id for run in runs.values()],
                           "layers": [run.model.layers for run in runs.values()],
                           "hops": [run.task.hops for run in runs.values()],
                           "accuracy": [final.loc[run.run_id, "val_accuracy"] for run in runs.values()]})
    models["solved"] = models.accuracy >= 0.9
    table = mechanism_table(probes, heads, models, RULE, composition).set_index("run_id")
    return {"out": out, "runs": runs, "probes": probes, "heads": heads, "composition": composition,
            "classes": {name: table.loc[run.run_id] for name, run in runs.items()}}


@pytest.mark.slow
def test_a_trained_model_composing_links_is_compositional_on_its_own_evidence(trained):
    found = trained["classes"]["composing"]
    assert found.mechanism == "compositional", found.reason
    assert int(found.link_farthest.split(",")[0]) >= 2  # links hold hop 2 after layer 1
    assert found.composing_drop >= 0.5 and found.composing_drop - found.control_drop >= 0.2
    assert found.control == "heads"
    assert found.chain_drop - found.offchain_drop >= 0.2  # the position control agrees with the head control
    assert found.rootward_farthest.split(",")[0] >= "2"  # chain order: every link's root-ward neighbour came earlier
    assert found.adequacy_gap <= 0.1 and found.reads in ("root-ward", "both")
    probes = trained["probes"][trained["probes"].run_id == trained["runs"]["composing"].run_id]
    query = probes[probes.site == "query"]  # the scarcer site the budget is set by (one sample per example)
    assert (query.train_samples >= 80 * 65).all()  # the probes' budget: eighty samples per feature


@pytest.mark.slow
def test_a_trained_one_hop_per_layer_model_is_linear(trained):
    found = trained["classes"]["linear"]
    assert found.mechanism == "linear", found.reason
    assert found.link_farthest.split(",")[0] == "1" and found.farthest == "1,2"


@pytest.mark.slow
def test_a_starved_probe_cannot_classify_the_composing_model(trained):
    """The same model, its probes fitted on 28 examples for 64 features: the final-layer probe for hop 3
    under-reads the model, and the classifier refuses rather than call it anything."""
    run = trained["runs"]["composing"]
    run_dir, index = find_run(trained["out"], run.run_id)
    starved = generate(run.task, 40, np.random.default_rng(5))
    probes = depth_probes(load_model(run_dir, index), run.task, starved, map_statements(run.task, starved))
    check = trained["composition"][trained["composition"].run_id == run.run_id].iloc[0]
    found = classify(probes, trained["heads"][trained["heads"].run_id == run.run_id], rule=RULE, layers=2, hops=3, solved=True,
                     accuracy=float(check.clean_accuracy), ablation=Ablation(check.composing_drop, check.control_drop),
                     uniform=(check.uniform_next, check.uniform_prev))
    assert found.probe_train == 1.0 and found.adequacy_gap > 0.1, found  # over-fitted, not read
    assert found.mechanism == "not classifiable" and "too weak" in found.reason
