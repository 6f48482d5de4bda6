"""Dense supervision: every link also predicts its chain toward the root (the query keeps its targets)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headway.errors import ConfigError
from headway.runs.config import RunConfig
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.tasks.retrieval.solver import solve
from headway.tasks.objective import readout_loss, run_loss
from headway.train.trainer import EnsembleTrainer


def test_the_documented_example_has_the_targets_worked_out_by_hand():
    # docs/retrieval-task.md: V=8, K=2, D=2, seed 0: links [5,7] [4,3] [6,5] [2,4], query 6 → 5 → 7
    cfg = RetrievalConfig(vocab=8, chains=2, hops=2, supervision="dense")
    batch = generate(cfg, 1, 0)
    assert batch.statements[0].tolist() == [[5, 7], [4, 3], [6, 5], [2, 4]]
    assert batch.targets.reshape(cfg.n_ctx, 2).tolist() == [[7, -1], [3, -1], [5, 7], [4, 3], [5, 7]]
    flat = generate(RetrievalConfig(vocab=8, chains=2, hops=2, supervision="dense", layout="flat"), 1, 0)
    rows = flat.targets.reshape(10, 2).tolist()
    assert rows[1::2] == [[7, -1], [3, -1], [5, 7], [4, 3], [5, 7]]  # right slots and the QUERY marker
    assert rows[0::2] == [[-1, -1]] * 5  # left slots and the query symbol carry nothing


@pytest.mark.parametrize("order", ["shuffled", "chain"])
@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_every_link_targets_what_the_reference_solver_finds_from_its_left_symbol(order, layout):
    cfg = RetrievalConfig(vocab=20, chains=3, hops=4, order=order, layout=layout, supervision="dense")
    batch = generate(cfg, 50, 7)
    per_position = batch.targets.reshape(len(batch), cfg.n_ctx, cfg.hops)
    links = per_position[:, :-1][:, 1::2] if layout == "flat" else per_position[:, :-1]
    for example in range(len(batch)):
        statements = batch.statements[example].tolist()
        for position, (left, _) in enumerate(statements):
            expected = []
            for hops in range(1, cfg.hops + 1):
                try:
                    expected.append(solve(statements, left, hops)[-1])
                except ValueError:  # the chain ends: no target from here on
                    expected.append(-1)
            assert links[example, position].tolist() == expected
        assert per_position[example, -1].tolist() == solve(statements, batch.query[example], cfg.hops)[1:]


def test_validation_examples_and_the_data_stream_are_those_of_query_supervision():
    dense = RetrievalConfig(vocab=16, chains=4, hops=3, supervision="dense")
    query = RetrievalConfig(vocab=16, chains=4, hops=3)
    for validation in (False, True):
        a = dense.draw(64, np.random.default_rng(5), validation=validation)
        b = query.draw(64, np.random.default_rng(5), validation=validation)
        assert np.array_equal(a.tokens, b.tokens)
        if validation:
            assert np.array_equal(a.targets, b.targets)
        else:
            assert np.array_equal(a.targets.reshape(64, dense.n_ctx, 3)[:, -1], b.targets)


@pytest.mark.parametrize("kind", ["mse", "cross_entropy"])
def test_masked_blocks_leave_the_loss_and_its_gradient(kind):
    gen = torch.Generator().manual_seed(0)
    vocab, blocks = 5, 6
    targets = torch.randint(0, vocab, (2, 3, blocks), generator=gen)
    targets[0, 0, 4:] = -1
    targets[1, :, ::2] = -1
    out = torch.randn(2, 3, blocks * vocab, generator=gen, requires_grad=True)
    loss = readout_loss(out, targets, vocab, kind, masked=True)
    for e in range(2):  # the mean over the kept blocks alone, computed block by block
        kept = [(b, t) for b in range(3) for t in range(blocks) if targets[e, b, t] >= 0]
        parts = [readout_loss(out[e : e + 1, b : b + 1, t * vocab : (t + 1) * vocab],
                              targets[e : e + 1, b : b + 1, t : t + 1], vocab, kind) for b, t in kept]
        assert torch.allclose(loss[e], torch.stack(parts).mean(), atol=1e-6)
    loss.sum().backward()
    grad = out.grad.view(2, 3, blocks, vocab)
    assert torch.all(grad[targets < 0] == 0) and torch.any(grad[targets >= 0] != 0)
    unmasked = torch.randint(0, vocab, (2, 3, blocks), generator=gen)
    assert torch.allclose(readout_loss(out, unmasked, vocab, kind, masked=True),
                          readout_loss(out, unmasked, vocab, kind))


@pytest.mark.parametrize("bad", [{"conditional": True}, {"curriculum": "none"}, {"curriculum": "mixture"}])
def test_dense_supervision_outside_the_plain_ic_task_is_refused_by_name(bad):
    with pytest.raises(ConfigError, match="supervision = 'dense'"):
        RetrievalConfig(vocab=24, chains=2, hops=2, supervision="dense", **bad)
    with pytest.raises(ConfigError, match="supervision"):
        RetrievalConfig(vocab=24, chains=2, hops=2, supervision="everywhere")


def test_query_supervised_runs_keep_their_ids_and_never_share_an_ensemble_with_dense_ones():
    flat = {"task": "retrieval", "vocab": 16, "hops": 2, "layers": 2, "seed": 0}
    plain = RunConfig.from_flat(flat)
    assert RunConfig.from_flat({**flat, "supervision": "query"}).run_id == plain.run_id
    assert "supervision" not in plain.stored()["task"]
    dense = RunConfig.from_flat({**flat, "supervision": "dense"})
    assert dense.run_id != plain.run_id and dense.ensemble_key() != plain.ensemble_key()
    assert dense.task.train_readout_positions == dense.task.n_ctx and plain.task.train_readout_positions == 1


def test_a_dense_run_trains_on_every_position_and_is_evaluated_at_the_query(tmp_path):
    run = RunConfig.from_flat({"task": "retrieval", "vocab": 12, "chains": 2, "hops": 2, "layers": 1, "heads": 2,
                               "d_model": 16, "supervision": "dense", "steps": 3, "batch_size": 8,
                               "train_size": 64, "val_size": 16, "eval_every": 3, "seed": 0})
    trainer = EnsembleTrainer([run], tmp_path, progress=False)
    data, model, _, _ = trainer.setup()
    tokens, targets = data.train_batch(0)
    assert targets.shape == (1, 8, run.task.n_ctx * 2) and data.val_targets.shape == (1, 16, 2)
    assert torch.isfinite(run_loss(run.task, "mse")(model, tokens, targets)).all()
    metrics = trainer.fit()
    assert {"val_acc_hop1", "val_acc_hop2"} <= set(metrics.columns) and metrics.train_loss.notna().iloc[-1]
