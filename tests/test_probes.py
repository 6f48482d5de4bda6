"""Linear probes: known answers on synthetic residuals, labels checked against the solver, and one trained model."""

import numpy as np
import pandas as pd
import pytest

from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.plots.probes import plot_probe_accuracy, plot_probe_reach
from headway.runs.store import load_model
from headway.tasks.retrieval import RetrievalConfig, generate
from headway.tasks.retrieval.positions import map_statements, reading_positions
from headway.analysis.retrieval.probes import (depth_probes, fit_probe, flow_gates, probe_examples, probe_reach,
                                            probe_tables,
                                            probe_targets, residual_streams, walk_labels)
from headway.tasks.retrieval.solver import solve
from headway.train.sweep import train_runs

VOCAB = 16


def synthetic_features(labels: np.ndarray, width: int, signal: float, seed: int) -> np.ndarray:
    """Gaussian features [n, width] plus `signal` times the one-hot of `labels` (in its first VOCAB columns)."""
    rng = np.random.default_rng(seed)
    features = rng.normal(size=(len(labels), width))
    features[np.arange(len(labels)), labels] += signal
    return features


def split_probe(features: np.ndarray, labels: np.ndarray) -> float:
    """Probe accuracy with the first 70% of samples for training and the rest for testing."""
    cut = int(0.7 * len(labels))
    return fit_probe(features[:cut], labels[:cut], features[cut:], labels[cut:], VOCAB)[1]


def test_symbol_written_into_the_residual_is_decoded():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, VOCAB, 3000)
    assert split_probe(synthetic_features(labels, 32, signal=6.0, seed=1), labels) >= 0.99


def test_symbol_absent_from_the_residual_decodes_at_chance():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, VOCAB, 3000)
    other = rng.integers(0, VOCAB, 3000)  # the residual holds a different, independent symbol
    accuracy = split_probe(synthetic_features(other, 32, signal=4.0, seed=1), labels)
    assert accuracy < 3 / VOCAB


def test_probe_is_deterministic_and_ignores_constant_features():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, VOCAB, 1000)
    features = synthetic_features(labels, 24, signal=3.0, seed=3)
    features[:, -1] = 5.0
    assert split_probe(features, labels) == split_probe(features.copy(), labels)


def test_a_probe_short_of_samples_fits_its_training_set_and_under_reads_held_out():
    """Fewer samples than features: the probe interpolates its training labels and reads a symbol the
    residual plainly holds far worse held out; with ten samples per feature it reads both alike."""
    rng = np.random.default_rng(4)
    labels = rng.integers(0, VOCAB, 2000)
    features = synthetic_features(labels, 64, signal=4.0, seed=5)
    train, held_out = fit_probe(features[:40], labels[:40], features[1000:], labels[1000:], VOCAB)
    assert train == 1.0 and held_out < 0.5
    train, held_out = fit_probe(features[:650], labels[:650], features[1000:], labels[1000:], VOCAB)
    assert held_out >= 0.9 and train - held_out < 0.05


def test_probe_examples_give_eighty_samples_per_feature_and_twenty_per_symbol():
    assert probe_examples(64, 24) == 7429  # 80 × 65 features on the 70% train split
    assert probe_examples(128, 24) == 14743
    assert probe_examples(4, 96) == 2743  # 20 × 96 symbols


def reach_table(accuracy: dict[int, list[float]]) -> pd.DataFrame:
    """A depth_probes-shaped table for one instance and site: layer -> accuracies of hops 1, 2, ..."""
    rows = [{"instance": 0, "site": "query", "layer": layer, "hops": k + 1, "accuracy": value}
            for layer, values in accuracy.items() for k, value in enumerate(values)]
    return pd.DataFrame(rows)


def test_reach_counts_leading_hops_and_stops_at_a_gap():
    table = reach_table({0: [0.1, 0.1, 0.1], 1: [0.95, 0.2, 0.97], 2: [0.99, 0.92, 0.5], 3: [1.0, 1.0, 0.9]})
    reach = probe_reach(table, threshold=0.9).set_index("layer")
    assert reach.reach.tolist() == [0, 1, 2, 3]
    assert reach.bound_theorem.tolist() == [0, 1, 4, 13]
    assert reach.tripling.tolist() == [1, 3, 9, 27]
    assert (reach.max_hops == 3).all()


@pytest.mark.parametrize("layout", ["packed", "flat"])
@pytest.mark.parametrize("conditional", [False, True])
def test_targets_follow_the_chain_and_the_solver(layout, conditional):
    cfg = RetrievalConfig(vocab=24, chains=2, hops=3, layout=layout, conditional=conditional)
    batch = generate(cfg, 40, 5)
    smap = map_statements(cfg, batch)
    targets = probe_targets(cfg, batch, smap, max_hops=cfg.hops)
    assert (targets.query_labels[:, 0] == batch.chain[:, 1]).all()
    assert (targets.query_labels == batch.chain[:, 1:]).all()
    assert (targets.query_statement == smap.query).all()
    example, statement = targets.link_example, targets.link_statement
    assert len(example) == len(batch) * cfg.chains * cfg.hops
    assert (targets.link_labels[:, 0] == smap.right[example, statement]).all()
    for i, p, labels in zip(example, statement, targets.link_labels):
        classes = None if batch.classes is None else batch.classes[i].tolist()
        rules = None if batch.rules is None else batch.rules[i].tolist()
        for k, label in enumerate(labels, start=1):
            try:
                expected = solve(batch.statements[i].tolist(), int(smap.left[i, p]), k, classes, rules)[-1]
            except ValueError:  # the chain ends before k hops
                expected = -1
            assert label == expected


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_untrained_model_probes_have_every_row(layout, tmp_path):
    cfg = RetrievalConfig(vocab=12, chains=2, hops=2, layout=layout, conditional=layout == "flat")
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=2, heads=2, d_model=16), cfg.d_vocab, cfg.n_ctx,
                                           cfg.d_out, seeds=[0, 1])
    batch = generate(cfg, 200, 1)
    streams = residual_streams(model, cfg, batch.tokens, chunk=64)
    assert streams.shape == (2, 3, 200, cfg.n_ctx, 16) and streams.dtype == np.float32
    assert len(reading_positions(cfg)) == map_statements(cfg, batch).n_statements
    table = depth_probes(model, cfg, batch, map_statements(cfg, batch), max_link_samples=300)
    sites = 2 if cfg.conditional else 4  # the flow-gated link sites need plain chains
    assert len(table) == 2 * 3 * sites * cfg.hops
    measured = table[(table.samples > 0) & (table.train_samples > 0)]
    assert measured.accuracy.between(0, 1).all() and measured.train_accuracy.between(0, 1).all()
    assert table[table.samples == 0].accuracy.isna().all()  # a gated hop no link can hold yet is not a zero
    assert set(table[table.samples == 0].site) <= {"link_rootward", "link_leafward"}
    query = table[table.site == "query"]
    assert (query.samples + query.train_samples == 200).all()  # every example in one split
    embedding = table[(table.layer == 0) & (table.hops == 1)].groupby("site").accuracy.mean()
    assert embedding["link"] >= 0.8 and embedding["query"] <= 0.3  # the reading slot embeds the right entity
    assert (table[table.site == "link"].samples <= 300).all()
    again = depth_probes(model, cfg, batch, map_statements(cfg, batch), max_link_samples=300)
    pd.testing.assert_frame_equal(table, again)
    reach = probe_reach(table, threshold=0.9)
    assert plot_probe_reach(reach, tmp_path / "reach.png").stat().st_size > 0
    assert plot_probe_accuracy(table, tmp_path / "accuracy.png").stat().st_size > 0


def test_trained_model_holds_the_link_but_not_the_next_symbol_in_its_embedding(tiny, tmp_path):
    run = tiny(steps=200, eval_every=100, checkpoint_every=100, log_checkpoints=2)
    train_runs([run], tmp_path, device="cpu", progress=False)
    run_dir = next(tmp_path.iterdir())
    cfg = run.task
    batch = generate(cfg, 1024, 7)
    table = depth_probes(load_model(run_dir), cfg, batch, map_statements(cfg, batch))
    embedding = table[(table.layer == 0) & (table.hops == 1)].set_index("site").accuracy
    assert embedding["query"] <= 0.5
    assert embedding["link"] >= 0.95


@pytest.mark.parametrize("layout", ["packed", "flat"])
def test_leafward_labels_walk_the_chain_away_from_its_root(layout):
    """Leaf-ward hop 1 is a link's own left entity, hop 2 the left entity of the link whose right entity it is."""
    cfg = RetrievalConfig(vocab=24, chains=2, hops=3, layout=layout)
    batch = generate(cfg, 40, 5)
    smap = map_statements(cfg, batch)
    example, statement = np.nonzero(smap.is_link)
    labels = walk_labels(smap.left, smap.prev_link, example, statement, cfg.hops)
    assert (labels[:, 0] == smap.left[example, statement]).all()
    for i, p, row in zip(example, statement, labels):
        before = [q for q in range(smap.n_statements) if smap.is_link[i, q] and smap.right[i, q] == smap.left[i, p]]
        assert row[1] == (smap.left[i, before[0]] if before else -1)


def test_flow_gates_follow_the_causal_mask_in_each_links_own_order():
    """In chain order (root link first) every link but the root can hold hop 2 root-ward after one causal layer
    and none leaf-ward; bidirectional attention opens both directions to every link that has the neighbour."""
    cfg = RetrievalConfig(vocab=24, chains=3, hops=3, order="chain")
    batch = generate(cfg, 60, 2)
    smap = map_statements(cfg, batch)
    targets = probe_targets(cfg, batch, smap, cfg.hops)
    rootward, leafward = flow_gates(cfg, smap, targets.link_example, targets.link_statement, 2, "causal")
    has_next = smap.next_link[targets.link_example, targets.link_statement] >= 0
    assert (rootward[:, 0, 0]).all() and not rootward[:, 0, 1].any()  # a link holds its own symbols only
    assert (rootward[:, 1, 1] == has_next).all() and not leafward[:, 1:, 1].any()
    both = flow_gates(cfg, smap, targets.link_example, targets.link_statement, 1, "bidirectional")
    has_prev = smap.prev_link[targets.link_example, targets.link_statement] >= 0
    assert (both[0][:, 1, 1] == has_next).all() and (both[1][:, 1, 1] == has_prev).all()


def test_gated_probes_read_per_order_class_where_the_flow_lets_each_link_hold_its_hop():
    """The per-class table splits each gated probe's held-out samples by its link's chain class and link number:
    after one causal layer link k holds leaf-ward hop 2 only where link k + 1 comes first (class position k is
    '>'), its rows add up to the pooled probe's, and the embedding holds every link's own right entity."""
    cfg = RetrievalConfig(vocab=24, chains=3, hops=3)
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=2, heads=2, d_model=16, attention="causal"),
                                           cfg.d_vocab, cfg.n_ctx, cfg.d_out, seeds=[0])
    batch = generate(cfg, 600, 3)
    table, orders = probe_tables(model, cfg, batch, map_statements(cfg, batch), max_link_samples=4000)
    assert set(orders.site) == {"link_rootward", "link_leafward"}
    assert set(orders.order_class) == {"<<", "<>", "><", ">>"} and set(orders.link) == {1, 2, 3}
    after_one = orders[(orders.site == "link_leafward") & (orders.layer == 1) & (orders.probe_hops == 2)]
    assert len(after_one) and all(row.order_class[row.link - 1] == ">" for row in after_one.itertuples())
    pooled = table.set_index(["instance", "layer", "site", "hops"])
    split = orders.assign(correct=orders.accuracy * orders.samples).rename(columns={"probe_hops": "hops"}).groupby(
        ["instance", "layer", "site", "hops"])[["samples", "correct"]].sum()
    both = split.merge(pooled, left_index=True, right_index=True, suffixes=("", "_pooled"))
    assert (both.samples == both.samples_pooled).all()
    assert np.allclose(both.correct / both.samples, both.accuracy)
    embedded = orders[(orders.site == "link_rootward") & (orders.layer == 0) & (orders.probe_hops == 1)]
    assert len(embedded) == 12 and (embedded.accuracy >= 0.5).all()  # chance is 1/24
    long = RetrievalConfig(vocab=40, chains=3, hops=6)
    long_batch = generate(long, 50, 1)
    long_model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=16), long.d_vocab, long.n_ctx,
                                                long.d_out, seeds=[0])
    beyond = probe_tables(long_model, long, long_batch, map_statements(long, long_batch), max_link_samples=300)[1]
    assert beyond.empty  # beyond five hops: no per-class rows
