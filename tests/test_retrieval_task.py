"""Retrieval task: generator vs reference solver, export contract, statistics, pools and refusals."""

from __future__ import annotations

import io
import itertools
import json

import numpy as np
import pytest

from headway.errors import ConfigError
from headway.tasks.export import write_jsonl
from headway.tasks.pools import make_pools
from headway.tasks.retrieval import CURRICULA, LAYOUTS, ORDERS, RetrievalConfig, generate
from headway.tasks.retrieval.solver import solve, solve_batch

N = 10_000


def make_cfg(conditional: bool, **kw) -> RetrievalConfig:
    """A plain config (V=32, K=4, D=3) or a conditional one (V=40, K=2, D=4, R=3, C=3)."""
    if conditional:
        return RetrievalConfig(vocab=40, chains=2, hops=4, conditional=True, relations=3, classes=3, **kw)
    return RetrievalConfig(vocab=32, chains=4, hops=3, **kw)


VARIANTS = [
    dict(layout=layout, order=order, curriculum=curriculum, conditional=conditional)
    for layout, order, curriculum, conditional in itertools.product(LAYOUTS, ORDERS, CURRICULA, (False, True))
]


def decode(cfg: RetrievalConfig, tokens: list) -> dict:
    """Read statements, query, classes and rules back from a record's tokens, using the documented layout only."""
    v, base = cfg.vocab, cfg.base_vocab
    width = 3 if cfg.conditional else 2
    if cfg.layout == "packed":
        rows = [[tok - slot * base for slot, tok in enumerate(position)] for position in tokens]
    else:
        rows = [tokens[i : i + width] for i in range(0, len(tokens), width)]
    assert all(len(row) == width and all(0 <= x < base for x in row) for row in rows)
    *body, last = rows
    if not cfg.conditional:
        assert last[1] == v and all(left < v and right < v for left, right in body)
        return {"statements": body, "query": last[0]}
    n_rel, n_cls = cfg.relations, cfg.classes
    is_id, rule_id, query_id = v + n_rel + n_cls, v + n_rel + n_cls + 1, v + n_rel + n_cls + 2
    assert last[0] == query_id and last[2] == query_id
    out = {"statements": [], "classes": {}, "rules": {}, "query": last[1]}
    for head, a, b in body:
        if v <= head < v + n_rel:
            out["statements"].append([head - v, a, b])
        elif head == is_id:
            out["classes"][str(a)] = b - v - n_rel
        elif head == rule_id:
            out["rules"][str(a - v - n_rel)] = b - v
        else:
            raise AssertionError(f"unexpected statement head {head}")
    return out


def distinct_per_row(values: np.ndarray) -> np.ndarray:
    """Number of distinct values in each row of a 2-D array."""
    ordered = np.sort(values, axis=1)
    return 1 + (np.diff(ordered, axis=1) != 0).sum(axis=1)


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: "-".join(str(x) for x in v.values()))
def test_generator_agrees_with_reference_solver(variant: dict) -> None:
    cfg = make_cfg(**variant)
    b = generate(cfg, N, 11)
    d = cfg.hops
    assert len(b) == N
    assert b.tokens.dtype == np.int32 and b.tokens.shape == (N, cfg.n_ctx, cfg.n_slots)
    assert b.tokens.min() >= 0 and b.tokens.max() < cfg.d_vocab
    assert b.statements.shape == (N, cfg.n_links, 3 if cfg.conditional else 2)
    np.testing.assert_array_equal(solve_batch(b), b.answer)
    np.testing.assert_array_equal(b.chain[np.arange(N), b.query_hops], b.answer)
    np.testing.assert_array_equal(b.chain[:, 0], b.query)
    assert b.targets.shape == (N, cfg.n_targets)
    if cfg.curriculum == "ic":
        np.testing.assert_array_equal(b.targets, b.chain[:, 1:])
    else:
        np.testing.assert_array_equal(b.targets[:, 0], b.answer)
    if cfg.curriculum == "mixture":
        counts = np.bincount(b.query_hops, minlength=d + 1)
        assert counts[0] == 0 and np.all(np.abs(counts[1:] - N / d) < 5 * np.sqrt(N / d))
        assert np.all((b.chain == -1) == (np.arange(d + 1) > b.query_hops[:, None]))
    else:
        assert np.all(b.query_hops == d) and np.all(b.chain >= 0)
    if cfg.conditional:
        assert np.all(distinct_per_row(b.classes[:, :, 0]) == cfg.n_symbols)
        assert b.classes[:, :, 1].max() < cfg.classes and b.rules.max() < cfg.relations
    else:
        links = b.statements
        assert np.all(distinct_per_row(links.reshape(N, -1)) == cfg.n_symbols)
        assert np.all(distinct_per_row(links[:, :, 0]) == cfg.n_links)


@pytest.mark.parametrize("conditional", [False, True])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_jsonl_records_match_tokens(conditional: bool, layout: str) -> None:
    cfg = make_cfg(conditional, layout=layout, curriculum="mixture")
    b = generate(cfg, 300, 5)
    buffer = io.StringIO()
    assert write_jsonl(buffer, cfg, b) == 300
    records = [json.loads(line) for line in buffer.getvalue().splitlines()]
    assert records == cfg.records(b)
    for i, rec in enumerate(records):
        assert rec["positions"] == list(range(cfg.n_ctx)) and rec["readout_position"] == cfg.n_ctx - 1
        assert len(rec["tokens"]) == cfg.n_ctx
        decoded = decode(cfg, rec["tokens"])
        assert decoded["statements"] == rec["statements"] and decoded["query"] == rec["query"]
        if conditional:
            assert decoded["classes"] == rec["classes"] and decoded["rules"] == rec["rules"]
        assert rec["hops"] == b.query_hops[i] and len(rec["chain"]) == rec["hops"] + 1
        assert rec["chain"][0] == rec["query"] and rec["chain"][-1] == rec["answer"] == rec["targets"][-1]
        assert solve(rec["statements"], rec["query"], rec["hops"], rec.get("classes"), rec.get("rules")) == rec["chain"]


def test_write_jsonl_to_path(tmp_path) -> None:
    cfg = make_cfg(False, layout="flat")
    b = generate(cfg, 50, 0)
    path = tmp_path / "data.jsonl"
    assert write_jsonl(path, cfg, b) == 50
    lines = path.read_text().splitlines()
    assert len(lines) == 50 and json.loads(lines[0])["tokens"] == b.tokens[0, :, 0].tolist()


@pytest.mark.parametrize("conditional", [False, True])
def test_same_seed_same_data_other_seed_differs(conditional: bool) -> None:
    cfg = make_cfg(conditional, curriculum="mixture")
    a, b, c = generate(cfg, 9000, 3), generate(cfg, 9000, np.random.default_rng(3)), generate(cfg, 9000, 4)
    for name in ("tokens", "targets", "query_hops", "statements", "query", "chain", "answer", "classes", "rules"):
        x, y, z = getattr(a, name), getattr(b, name), getattr(c, name)
        if x is None:
            assert y is None and z is None
            continue
        np.testing.assert_array_equal(x, y)
        assert not np.array_equal(x, z)


def link_positions(b, hop_symbols: np.ndarray) -> np.ndarray:
    """Position of the link whose left symbol is hop_symbols[i] in each plain example i."""
    return np.argmax(b.statements[:, :, 0] == hop_symbols[:, None], axis=1)


def test_shuffled_order_spreads_the_queried_chain() -> None:
    cfg = make_cfg(False, order="shuffled")
    b = generate(cfg, N, 21)
    d, n_links = cfg.hops, cfg.n_links
    first = link_positions(b, b.chain[:, d - 1])  # the [x_1, x_0] link
    counts = np.bincount(first, minlength=n_links)
    expected = N / n_links
    assert ((counts - expected) ** 2 / expected).sum() < 45  # chi-square, 15 dof (p ~ 1e-4)
    second = link_positions(b, b.chain[:, d - 2])  # the [x_2, x_1] link
    assert abs((first < second).mean() - 0.5) < 0.03


def test_chain_order_is_forward_and_interleaved() -> None:
    cfg = make_cfg(False, order="chain")
    b = generate(cfg, N, 22)
    d = cfg.hops
    pos = np.stack([link_positions(b, b.chain[:, d - k]) for k in range(1, d + 1)], axis=1)
    assert np.all(np.diff(pos, axis=1) > 0)
    assert (np.diff(pos, axis=1) == 1).all(axis=1).mean() < 0.1  # other chains interleave
    assert 0.2 < (pos[:, 0] == 0).mean() < 0.3  # chain 0 opens the sequence about 1/K of the time
    # every chain: the link leaving a link's right symbol (one hop closer to x_0) comes earlier
    rows = np.arange(N)[:, None]
    pos_of_left = np.full((N, cfg.vocab), -1)
    pos_of_left[rows, b.statements[:, :, 0]] = np.arange(cfg.n_links)
    next_hop = pos_of_left[rows, b.statements[:, :, 1]]
    assert np.all((next_hop == -1) | (next_hop < np.arange(cfg.n_links)))
    assert np.all((next_hop == -1).sum(axis=1) == cfg.chains)


def test_conditional_chain_order_keeps_true_links_forward() -> None:
    cfg = make_cfg(True, order="chain")
    b = generate(cfg, 1000, 23)
    for statements, chain in zip(b.statements.tolist(), b.chain.tolist(), strict=True):
        index = {(left, right): i for i, (_, left, right) in enumerate(statements)}
        hop_index = [index[(chain[j], chain[j + 1])] for j in range(cfg.hops)]
        assert hop_index == sorted(hop_index, reverse=True)


def test_conditional_decoys_leave_the_chain() -> None:
    cfg = make_cfg(True)
    b = generate(cfg, 2000, 24)
    for statements, chain in zip(b.statements.tolist(), b.chain.tolist(), strict=True):
        on_chain = set(chain)
        for j in range(cfg.hops):
            outs = [(rel, right) for rel, left, right in statements if left == chain[j]]
            assert len(outs) == 2 and outs[0][0] != outs[1][0]
            assert sum(right in on_chain for _, right in outs) == 1


def test_derived_sizes() -> None:
    plain = RetrievalConfig(vocab=32, chains=4, hops=4)
    assert (plain.n_ctx, plain.n_slots, plain.base_vocab, plain.d_vocab) == (17, 2, 33, 66)
    assert (plain.n_targets, plain.d_out, plain.n_statements) == (4, 128, 16)
    flat = RetrievalConfig(vocab=32, chains=4, hops=4, layout="flat", curriculum="none")
    assert (flat.n_ctx, flat.n_slots, flat.d_vocab, flat.n_targets, flat.d_out) == (34, 1, 33, 1, 32)
    cond = RetrievalConfig(vocab=40, chains=2, hops=4, conditional=True, relations=3, classes=2)
    assert (cond.base_vocab, cond.n_statements, cond.n_ctx, cond.n_slots, cond.d_vocab) == (48, 36, 37, 3, 144)
    cond_flat = RetrievalConfig.from_dict({**cond.to_dict(), "layout": "flat"})
    assert (cond_flat.n_ctx, cond_flat.n_slots, cond_flat.d_vocab) == (111, 1, 48)
    assert RetrievalConfig.from_dict(json.loads(json.dumps(cond.to_dict()))) == cond


@pytest.mark.parametrize("curriculum", ["ic", "mixture"])
def test_pools_disjoint_sized_deterministic(curriculum: str) -> None:
    cfg = make_cfg(False, curriculum=curriculum)
    train, val = make_pools(cfg, 4096, 512, seed=1)
    assert (len(train), len(val)) == (4096, 512)
    assert np.all(val.query_hops == cfg.hops)
    assert (curriculum == "mixture") == (train.query_hops.min() < cfg.hops)
    train_rows = {row.tobytes() for row in train.tokens}
    assert not any(row.tobytes() in train_rows for row in val.tokens)
    again_train, again_val = make_pools(cfg, 4096, 512, seed=1)
    np.testing.assert_array_equal(again_train.tokens, train.tokens)
    np.testing.assert_array_equal(again_val.tokens, val.tokens)
    other_train, other_val = make_pools(cfg, 4096, 512, seed=2)
    assert not np.array_equal(other_train.tokens, train.tokens)
    assert not np.array_equal(other_val.tokens, val.tokens)


def test_pools_drop_and_top_up_duplicates() -> None:
    cfg = RetrievalConfig(vocab=4, chains=1, hops=1)  # only 12 distinct examples
    train, val = make_pools(cfg, 6, 40, seed=0)
    train_rows = {row.tobytes() for row in train.tokens}
    assert len(val) == 40 and not any(row.tobytes() in train_rows for row in val.tokens)
    np.testing.assert_array_equal(solve_batch(val), val.answer)


def test_pools_refuse_when_no_unseen_example_exists() -> None:
    cfg = RetrievalConfig(vocab=2, chains=1, hops=1)  # 2 distinct examples, both in a big pool
    with pytest.raises(ConfigError, match="val_size = 20"):
        make_pools(cfg, 200, 20, seed=0)


@pytest.mark.parametrize(
    "kwargs, shown",
    [
        (dict(hops=0), "hops = 0"),
        (dict(hops=-2), "hops = -2"),
        (dict(chains=0), "chains = 0"),
        (dict(vocab=19, chains=4, hops=4), "vocab = 19"),
        (dict(vocab=17, chains=2, hops=4, conditional=True), "vocab = 17"),
        (dict(layout="dense"), "'dense'"),
        (dict(order="random"), "'random'"),
        (dict(curriculum="full"), "'full'"),
        (dict(conditional=True, vocab=40, relations=1), "relations = 1"),
        (dict(conditional=True, vocab=40, classes=0), "classes = 0"),
        (dict(hops=2.5), "2.5"),
        (dict(vocab="32"), "'32'"),
        (dict(chains=True), "True"),
        (dict(conditional="yes"), "'yes'"),
    ],
)
def test_invalid_configs_are_refused(kwargs: dict, shown: str) -> None:
    with pytest.raises(ConfigError) as info:
        RetrievalConfig(**kwargs)
    assert shown in str(info.value)


def test_vocab_message_says_what_is_needed() -> None:
    with pytest.raises(ConfigError, match=r"chains\*\(hops\+1\) = 25 symbols needed but vocab = 20; use vocab >= 25"):
        RetrievalConfig(vocab=20, chains=5, hops=4)


@pytest.mark.parametrize("n", [0, -3, 1.5])
def test_generate_refuses_bad_counts(n) -> None:
    with pytest.raises(ConfigError, match=f"n = {n}"):
        generate(RetrievalConfig(), n, 0)


def test_other_refusals() -> None:
    with pytest.raises(ConfigError, match="mixture_hops"):
        generate(RetrievalConfig(curriculum="ic"), 10, 0, mixture_hops=True)
    with pytest.raises(ConfigError, match="train_size = 0"):
        make_pools(RetrievalConfig(), 0, 10, seed=0)
    with pytest.raises(ConfigError, match="val_size = -1"):
        make_pools(RetrievalConfig(), 10, -1, seed=0)
    with pytest.raises(ConfigError, match="seed = -5"):
        make_pools(RetrievalConfig(), 10, 10, seed=-5)
    with pytest.raises(ConfigError, match="depth"):
        RetrievalConfig.from_dict({"depth": 3})


@pytest.mark.parametrize("classes, relations", [(2, 2), (3, 2), (2, 3)])
def test_conditional_rules_make_the_class_matter(classes, relations):
    cfg = RetrievalConfig(vocab=40, chains=2, hops=2, conditional=True, classes=classes, relations=relations)
    rules = generate(cfg, 2000, 3).rules
    if classes >= relations:  # every relation is selected by some class
        assert all(set(row) == set(range(relations)) for row in rules.tolist())
    else:  # no two classes select the same relation
        assert all(len(set(row)) == classes for row in rules.tolist())
    assert len({tuple(row) for row in rules.tolist()}) > 1  # still random per example
