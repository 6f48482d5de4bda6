"""Property-based tests (hypothesis): every data generator, over settings drawn at random, gives examples
its own definition says are right; bad settings and bad command-line values are refused with a
ConfigError, never another exception."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from headway.cli.options import parse_values
from headway.errors import ConfigError
from headway.limits import MAX_LIST
from headway.tasks.modular import ModularConfig
from headway.tasks.retrieval import CURRICULA, LAYOUTS, ORDERS, RetrievalConfig, generate
from headway.tasks.retrieval.solver import solve_batch
from headway.tasks.sorting import SortingConfig
from headway.tasks.sorting import generate as generate_lists

FAST = settings(max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
seeds = st.integers(0, 2**32 - 1)
counts = st.integers(1, 40)


@st.composite
def retrieval_configs(draw) -> RetrievalConfig:
    conditional = draw(st.booleans())
    chains, hops = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    needed = chains * ((2 * hops + 1) if conditional else (hops + 1))
    return RetrievalConfig(vocab=needed + draw(st.integers(0, 6)), chains=chains, hops=hops,
                           layout=draw(st.sampled_from(LAYOUTS)), order=draw(st.sampled_from(ORDERS)),
                           curriculum=draw(st.sampled_from(CURRICULA)), conditional=conditional,
                           **({"relations": draw(st.integers(2, 3)), "classes": draw(st.integers(1, 3))}
                              if conditional else {}))


@FAST
@given(retrieval_configs(), counts, seeds)
def test_retrieval_examples_are_solved_by_the_reference_solver(cfg, n, seed):
    batch = generate(cfg, n, seed)
    np.testing.assert_array_equal(solve_batch(batch), batch.answer)  # an independent reading of the statements
    assert batch.tokens.shape[:2] == (n, cfg.n_ctx) and batch.targets.shape == (n, cfg.n_targets)
    assert batch.tokens.min() >= 0 and batch.tokens.max() < cfg.d_vocab
    assert batch.targets.min() >= 0 and batch.targets.max() < cfg.vocab
    again = generate(cfg, n, seed)
    assert np.array_equal(again.tokens, batch.tokens) and np.array_equal(again.targets, batch.targets)
    json.dumps(cfg.records(batch))  # every record is plain JSON


@st.composite
def sorting_configs(draw) -> SortingConfig:
    length = draw(st.integers(2, 12))
    repeats = draw(st.booleans())
    values = draw(st.integers(2 if repeats else length, 60))
    gaps = draw(st.sampled_from(("uniform", "geometric")))
    if gaps == "geometric":
        low, high = (0 if repeats else 1), (values - 1) / (length - 1)
        mean_gap = draw(st.floats(low, high, allow_nan=False))
        return SortingConfig(length=length, values=values, repeats=repeats, gaps=gaps, mean_gap=mean_gap)
    return SortingConfig(length=length, values=values, repeats=repeats, gaps=gaps)


@FAST
@given(sorting_configs(), counts, seeds)
def test_sorting_targets_are_the_sorted_lists_and_the_tokens_feed_them_back(cfg, n, seed):
    batch = generate_lists(cfg, n, seed)
    np.testing.assert_array_equal(batch.sorted, np.sort(batch.lists, axis=1))
    np.testing.assert_array_equal(batch.targets, batch.sorted)
    assert (batch.tokens[:, cfg.length] == cfg.sep).all()
    np.testing.assert_array_equal(batch.tokens[:, : cfg.length], batch.lists)
    np.testing.assert_array_equal(batch.tokens[:, cfg.length + 1 :], batch.sorted[:, :-1])  # teacher forcing
    assert batch.lists.min() >= 0 and batch.lists.max() < cfg.values
    if not cfg.repeats:
        assert (np.diff(batch.sorted, axis=1) >= 1).all()


@FAST
@given(st.integers(2, 40), st.floats(0.05, 0.95), counts, seeds)
def test_modular_targets_are_the_sums_and_the_split_partitions_every_pair(p, fraction, n, seed):
    try:
        cfg = ModularConfig(modulus=p, train_fraction=fraction)
    except ConfigError as err:  # a fraction that leaves no training or no test pair
        assert "leaves no training or no test pair" in str(err)
        assume(False)
    batch = cfg.draw(n, np.random.default_rng(seed))
    np.testing.assert_array_equal(batch.targets[:, 0], (batch.a + batch.b) % p)
    train, val = cfg.split(0, 0, seed % 2**31)
    pairs = {(int(a), int(b)) for a, b in zip(np.concatenate([train.a, val.a]), np.concatenate([train.b, val.b]))}
    assert len(train.a) + len(val.a) == p * p == len(pairs) and len(train.a) == cfg.train_examples


@FAST
@given(st.integers(-3, 70), st.integers(-2, 6), st.integers(-2, 6), st.booleans())
def test_retrieval_settings_either_build_or_are_refused_with_a_config_error(vocab, chains, hops, conditional):
    try:
        cfg = RetrievalConfig(vocab=vocab, chains=chains, hops=hops, conditional=conditional)
    except ConfigError as err:
        assert " = " in str(err)  # names the setting and its value
    else:
        assert cfg.vocab >= cfg.n_symbols and cfg.chains >= 1 and cfg.hops >= 1


@FAST
@given(st.lists(st.integers(-10**6, 10**6), min_size=1, max_size=8, unique=True))
def test_integer_lists_round_trip_through_the_option_text(values):
    assert parse_values("seed", ",".join(map(str, values)), int) == values


@FAST
@given(st.lists(st.integers(-5, 5), min_size=1, max_size=8).filter(lambda values: len(set(values)) < len(values)))
def test_a_list_that_repeats_a_value_is_refused(values):
    with pytest.raises(ConfigError, match="^--seed lists .* twice; give each value once"):
        parse_values("seed", ",".join(map(str, values)), int)


@pytest.mark.parametrize("text", ["0..10000", "0..1e12", "5,0..9999"])
def test_a_list_longer_than_the_limit_is_refused_before_it_is_spelt_out(text):
    with pytest.raises(ConfigError, match=f"a list holds at most {MAX_LIST}"):
        parse_values("seed", text, int)


@FAST
@given(st.integers(-50, 50), st.integers(0, 30))
def test_ranges_expand_inclusively(low, length):
    assert parse_values("seed", f"{low}..{low + length}", int) == list(range(low, low + length + 1))


@FAST
@given(st.text(max_size=20), st.sampled_from([int, float, bool, str]))
def test_any_option_text_is_parsed_or_refused_with_a_config_error_naming_the_option(text, kind):
    try:
        values = parse_values("layers", text, kind)
    except ConfigError as err:
        assert str(err).startswith("--layers ")
    else:
        assert all(v is None or isinstance(v, kind) for v in values)


@pytest.mark.parametrize("text", ["3..1", "1.5", "x", "1..", "..2", "1,,2"])
def test_known_bad_integer_texts_are_refused(text):
    with pytest.raises(ConfigError, match="^--seed "):
        parse_values("seed", text, int)
