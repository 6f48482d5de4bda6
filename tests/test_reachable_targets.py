"""Reachability-masked dense targets: which link targets a causal model of any depth can deliver,
the mask that leaves the others out of the loss, and where the masked share is reported."""

from __future__ import annotations

import hashlib
import itertools

import numpy as np
import pandas as pd
import pytest
import torch

from headway.cli.main import main
from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.studies.retrieval.depth import depth_table
from headway.studies.retrieval.plan import study_plan
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.analysis.retrieval.reach import masked_fraction
from headway.tasks.retrieval.reachable_targets import unreachable_targets
from headway.tasks.objective import run_loss
from headway.train.trainer import EnsembleTrainer


def one_chain(positions: tuple[int, ...]) -> np.ndarray:
    """Statements [1, D, 2] of one chain x_k = k with link k (= [k, k-1]) at sequence position positions[k-1]."""
    statements = np.empty((1, len(positions), 2), dtype=np.int64)
    for k, p in enumerate(positions, start=1):
        statements[0, p] = [k, k - 1]
    return statements


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_the_three_hop_worked_example_on_every_order(layout):
    # docs/retrieval-task.md: link 2's x_0 needs p1 < p2; link 3's x_1 needs p2 < p3, its x_0 also p1 < p3
    for p1, p2, p3 in itertools.permutations(range(3)):
        missing = unreachable_targets(one_chain((p1, p2, p3)), 3, layout)[0]
        expected = {(p1, 0): False, (p2, 0): False, (p2, 1): not p1 < p2,
                    (p3, 0): False, (p3, 1): not p2 < p3, (p3, 2): not (p2 < p3 and p1 < p3)}
        for (position, block), unreachable in expected.items():
            assert missing[position, block] == unreachable, (p1, p2, p3, position, block)
        assert not missing[p1, 1:].any() and not missing[p2, 2]  # blocks past the root hold no target


@pytest.mark.parametrize("layout", ["packed", "flat"])
@pytest.mark.parametrize("hops, share", [(3, 5 / 18), (4, 43 / 120), (5, 21 / 50)])
def test_expected_masked_shares_under_shuffled_and_chain_order(layout, hops, share):
    # 27.8%, 35.8%, 42.0% (exact over every order: 5/18, 43/120, 21/50), measured independently
    shuffled = RetrievalConfig(vocab=4 * (hops + 1), chains=4, hops=hops, layout=layout, supervision="dense",
                               mask_unreachable=True)
    assert masked_fraction(shuffled) == pytest.approx(share, abs=0.01)
    assert masked_fraction(RetrievalConfig(**{**shuffled.to_dict(), "order": "chain"})) == 0.0
    assert masked_fraction(RetrievalConfig(**{**shuffled.to_dict(), "mask_unreachable": False})) == 0.0


def reference_targets(statements: list[list[int]], hops: int, supervision: str) -> list[list[int]]:
    """Each link's targets by block, found by walking its chain: dense x_{k-1}, ..., x_0; whole-chain
    x_{D-1}, ..., x_0 (the chain walked from its leaf)."""
    right_of = {left: right for left, right in statements}
    left_of = {right: left for left, right in statements}
    out = []
    for left, right in statements:
        start = right
        if supervision == "whole-chain":
            leaf = left
            while leaf in left_of:
                leaf = left_of[leaf]
            start = right_of[leaf]
        chain = [start]
        while chain[-1] in right_of:
            chain.append(right_of[chain[-1]])
        out.append(chain)
    return out


def reference_unreachable(statements: list[list[int]], query: int, hops: int, layout: str,
                          supervision: str = "dense") -> np.ndarray:
    """The gather rule played out with Python sets over the whole sequence (every chain and the query),
    causal, to its fixed point; then each link's targets checked against its carrier's set."""
    if layout == "packed":
        sets = [{left, right} for left, right in statements] + [{query}]
        statement = list(range(len(sets)))
        carrier = list(range(len(statements)))
    else:
        sets = [{symbol} for link in statements for symbol in link] + [{query}, set()]
        statement = [i // 2 for i in range(len(sets))]
        carrier = [2 * i + 1 for i in range(len(statements))]
    while True:
        grown = [set(mine).union(*(theirs for j, theirs in enumerate(sets[: i + 1])
                                   if mine & theirs or statement[i] == statement[j]))
                 for i, mine in enumerate(sets)]
        if grown == sets:
            break
        sets = grown
    out = np.zeros((len(statements), hops), dtype=bool)
    for i, targets in enumerate(reference_targets(statements, hops, supervision)):
        for block, target in enumerate(targets):
            out[i, block] = target not in sets[carrier[i]]
    return out


@pytest.mark.parametrize("supervision", ["dense", "whole-chain"])
@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_masked_targets_are_exactly_the_unreachable_ones_and_the_rest_keep_their_symbols(layout, supervision):
    cfg = RetrievalConfig(vocab=20, chains=3, hops=4, layout=layout, supervision=supervision)
    masked_cfg = RetrievalConfig(**{**cfg.to_dict(), "mask_unreachable": True})
    plain, masked = generate(cfg, 40, 3), generate(masked_cfg, 40, 3)
    assert np.array_equal(plain.tokens, masked.tokens) and np.array_equal(plain.statements, masked.statements)
    missing = unreachable_targets(plain.statements, cfg.hops, layout, supervision)
    for example in range(len(plain)):
        statements = plain.statements[example].tolist()
        expected = reference_unreachable(statements, int(plain.query[example]), 4, layout, supervision)
        assert np.array_equal(missing[example], expected), example
    rows = (lambda batch: batch.targets.reshape(len(batch), cfg.n_ctx, cfg.hops))
    kept, dropped = rows(plain), rows(masked)
    carriers = slice(None, -1) if layout == "packed" else slice(1, -1, 2)
    links_kept, links_dropped = kept[:, carriers], dropped[:, carriers]
    assert (links_kept[missing] >= 0).all()  # only targets that exist are masked
    assert (links_dropped[missing] == -1).all()
    assert np.array_equal(links_dropped[~missing], links_kept[~missing])
    assert np.array_equal(np.delete(dropped, np.s_[carriers], axis=1), np.delete(kept, np.s_[carriers], axis=1))
    assert missing.any() and (~missing & (links_kept >= 0)).any()


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_whole_chain_targets_give_every_link_its_chain_in_the_query_blocks(layout):
    cfg = RetrievalConfig(vocab=20, chains=3, hops=4, layout=layout, supervision="whole-chain")
    batch = generate(cfg, 30, 5)
    rows = batch.targets.reshape(len(batch), cfg.n_ctx, cfg.hops)
    links = rows[:, :-1] if layout == "packed" else rows[:, 1:-1:2]
    for example in range(len(batch)):
        expected = reference_targets(batch.statements[example].tolist(), 4, "whole-chain")
        assert links[example].tolist() == expected
        assert rows[example, -1].tolist() == batch.chain[example, 1:].tolist()  # the query's own targets
    if layout == "flat":
        assert (rows[:, 0:-1:2] == -1).all()  # left slots and the query symbol carry none


@pytest.mark.parametrize("order, hops, share", [("shuffled", 2, 1 / 8), ("chain", 3, 1 / 9), ("chain", 4, 3 / 16)])
def test_whole_chain_masks_the_leaf_ward_targets_chain_order_hides(order, hops, share):
    # chain order: link k comes before links k+1..D, so its targets x_{k+1}..x_{D-1} are unreachable, and
    # nothing else is: D = 3 masks x_2 at link 1 (1 of 9); D = 4 masks 3 of 16. Shuffled D = 2: link 2 first
    # (half the orders) cannot see x_0 (1 of 4 targets).
    cfg = RetrievalConfig(vocab=4 * (hops + 1), chains=4, hops=hops, order=order, supervision="whole-chain",
                          mask_unreachable=True)
    assert masked_fraction(cfg) == pytest.approx(share, abs=0.01)
    if order == "chain":
        statements = generate(cfg, 50, 2, dense=False).statements
        missing = unreachable_targets(statements, hops, "packed", "whole-chain")
        for example, link in itertools.product(range(50), range(cfg.n_links)):
            k = k_of(statements[example], link)
            beyond_left = [block for block in range(hops) if hops - 1 - block > k]  # block j wants x_{D-1-j}
            assert np.flatnonzero(missing[example, link]).tolist() == beyond_left


def k_of(statements: np.ndarray, i: int) -> int:
    """k of link i ([x_k, x_{k-1}]): the number of links from it down to its chain's root."""
    right_of = {left: right for left, right in statements.tolist()}
    k, symbol = 1, int(statements[i, 1])
    while symbol in right_of:
        k, symbol = k + 1, right_of[symbol]
    return k


def test_the_same_draw_masks_the_same_link_targets_in_both_layouts():
    packed = RetrievalConfig(vocab=24, chains=4, hops=5, supervision="dense", mask_unreachable=True)
    flat = RetrievalConfig(**{**packed.to_dict(), "layout": "flat"})
    a, b = generate(packed, 200, 9), generate(flat, 200, 9)
    assert np.array_equal(a.statements, b.statements)
    links_packed = a.targets.reshape(200, packed.n_ctx, 5)[:, :-1]
    links_flat = b.targets.reshape(200, flat.n_ctx, 5)[:, 1:-1:2]
    assert np.array_equal(links_packed, links_flat)
    assert (links_packed == -1).sum() > (generate(RetrievalConfig(**{**packed.to_dict(), "mask_unreachable": False}),
                                                  200, 9).targets.reshape(200, packed.n_ctx, 5)[:, :-1] == -1).sum()


def digest(batch) -> str:
    h = hashlib.sha1()
    for array in (batch.tokens, batch.targets, batch.statements):
        h.update(np.ascontiguousarray(array).tobytes())
    return h.hexdigest()[:16]


@pytest.mark.parametrize("settings, expected", [
    ({"hops": 3, "supervision": "dense"}, "7d1912a4cfd34bfd"),
    ({"hops": 4, "layout": "flat", "supervision": "dense"}, "98b2388a2ff76e5f"),
    ({"hops": 3}, "8eec3ef739fa58bd"),
])
def test_batches_without_the_mask_are_byte_identical_to_before_it_existed(settings, expected):
    # digests computed with the code before mask_unreachable was added
    assert digest(generate(RetrievalConfig(vocab=20, chains=4, **settings), 256, 11)) == expected


def test_run_ids_of_configs_without_the_mask_are_unchanged():
    # ids computed with the code before mask_unreachable was added
    assert RunConfig().run_id == "28d4bed78722"
    dense = RunConfig.from_flat({"hops": 3, "supervision": "dense"})
    assert dense.run_id == "84c39caae8fa" and "mask_unreachable" not in dense.stored()
    masked = RunConfig.from_flat({"hops": 3, "supervision": "dense", "mask_unreachable": True})
    assert masked.run_id != dense.run_id and masked.stored()["mask_unreachable"] is True


def test_the_mask_is_refused_without_dense_supervision_or_with_bidirectional_attention():
    with pytest.raises(ConfigError, match="mask_unreachable = True .* supervision = 'query'"):
        RetrievalConfig(mask_unreachable=True)
    with pytest.raises(ConfigError, match="mask_unreachable = 'yes' is not a boolean"):
        RetrievalConfig(supervision="dense", mask_unreachable="yes")
    with pytest.raises(ConfigError, match="attention = 'bidirectional'; use attention 'causal'"):
        RunConfig.from_flat({"supervision": "dense", "mask_unreachable": True, "attention": "bidirectional"})
    RunConfig.from_flat({"supervision": "dense", "attention": "bidirectional"})  # unmasked: allowed


def test_validation_data_keep_the_query_targets():
    cfg = RetrievalConfig(vocab=16, chains=4, hops=3, supervision="dense", mask_unreachable=True)
    masked = cfg.draw(32, np.random.default_rng(1), validation=True)
    plain = RetrievalConfig(vocab=16, chains=4, hops=3).draw(32, np.random.default_rng(1), validation=True)
    assert np.array_equal(masked.targets, plain.targets) and masked.targets.shape == (32, 3)


def test_a_masked_run_trains(tmp_path):
    run = RunConfig.from_flat({"task": "retrieval", "vocab": 16, "chains": 2, "hops": 3, "layers": 1, "heads": 2,
                               "d_model": 16, "supervision": "dense", "mask_unreachable": True, "steps": 2,
                               "batch_size": 8, "train_size": 64, "val_size": 16, "eval_every": 2})
    trainer = EnsembleTrainer([run], tmp_path, progress=False)
    data, model, _, _ = trainer.setup()
    tokens, targets = data.train_batch(0)
    assert torch.isfinite(run_loss(run.task, "mse")(model, tokens, targets)).all()
    assert (targets == -1).any()


def test_the_study_masks_dense_causal_cells_and_reports_the_share(tmp_path, capsys):
    plan = study_plan("cpu").with_overrides(hops=(3,), layers=(2,), seeds=(0,), curricula=("ic",),
                                            supervisions=("dense", "query"), attentions=("causal", "bidirectional"),
                                            mask_unreachable=True)
    masks = {(r.task.supervision, r.model.attention): r.task.mask_unreachable for r in plan.depth_runs()}
    assert masks == {("dense", "causal"): True, ("dense", "bidirectional"): False,
                     ("query", "causal"): False, ("query", "bidirectional"): False}
    whole = study_plan("cpu").with_overrides(hops=(3,), layers=(2,), seeds=(0,), curricula=("ic",),
                                             supervisions=("whole-chain",), mask_unreachable=True)
    assert [r.task.mask_unreachable for r in whole.depth_runs()] == [True]
    with pytest.raises(ConfigError, match="mask_unreachable = True .* add --supervision dense"):
        study_plan("cpu").with_overrides(mask_unreachable=True)
    rows = [{**run.flat(), "run_id": run.run_id, "step": 10, "val_accuracy": 0.5} for run in plan.depth_runs()]
    table = depth_table(pd.DataFrame(rows), by=("attention", "supervision"))
    share = table.set_index(["attention", "supervision"]).masked_fraction
    assert share["causal", "dense"] == pytest.approx(5 / 18, abs=0.01)
    assert share.drop(("causal", "dense")).eq(0).all()
    out = tmp_path / "study"
    assert main(["study", "retrieval", "--out", str(out), "--layers", "2", "--hops", "3", "--seed", "0",
                 "--curriculum", "ic", "--supervision", "dense", "--conditional-hops", "none",
                 "--mask-unreachable", "--dry-run"]) == 0
    assert "depth: 1 runs" in capsys.readouterr().out
