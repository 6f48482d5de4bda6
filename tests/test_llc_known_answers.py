"""The LLC estimator on models of known learning coefficient: Aoyagi's formula, the suite's pools, the default
settings within 15% of every truth, and the checks that make an estimate invalid."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import pytest
import torch

from headway.analysis.development import valid_llc
from headway.analysis.llc import SGLDSettings, estimate_llc
from headway.analysis.llc.known_answers import (
    SUITE,
    SUITE_CHAINS,
    KnownModel,
    gaussian_nll,
    known_pool,
    learning_coefficient,
    suite_bias,
)
from headway.analysis.llc.scale_reference import tempered_loss_target
from headway.analysis.llc.validity import ValidityLimits, basin_fraction, invalid_reasons
from headway.errors import ConfigError

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them

TOLERANCE = 0.15  # the target: every suite model within 15% of its truth at the default settings
LIMITS = ValidityLimits()  # the estimator's own validity limits, which the suite is judged by


def reduced_rank(m: int, h: int, n: int, r: int) -> float:
    """Aoyagi & Watanabe (2005): reduced-rank regression x (M) → hidden (H) → y (N), true rank r."""
    if n + r <= m + h and m + r <= n + h and h + r <= m + n:
        return (2 * (h + r) * (m + n) - (m - n) ** 2 - (h + r) ** 2 + (m + h + n + r) % 2) / 8
    if m + h < n + r:
        return (h * m - h * r + n * r) / 2
    if n + h < m + r:
        return (h * n - h * r + m * r) / 2
    return m * n / 2


def test_the_deep_linear_formula_gives_the_reduced_rank_values_and_half_the_dimension():
    for m, h, n in itertools.product(range(1, 7), repeat=3):
        for r in range(min(m, h, n) + 1):
            assert learning_coefficient((m, h, n), r) == pytest.approx(reduced_rank(m, h, n, r)), (m, h, n, r)
    for m, n in itertools.product(range(1, 6), repeat=2):  # a regression is regular at any teacher rank
        assert all(learning_coefficient((m, n), r) == m * n / 2 for r in range(min(m, n) + 1))
    # by hand: a square full-rank factorisation counts the M² entries of the product, not the 2M² weights
    assert learning_coefficient((3, 3, 3), 3) == 4.5
    # case 1 of the reduced-rank formula with M + H + N + r odd: (2·5·8 − 0 − 25 + 1)/8
    assert learning_coefficient((4, 4, 4), 1) == 7.0
    assert learning_coefficient((6, 4, 4, 3), 2) == 8.0  # three layers: Σ = {4, 4, 3} − 2, ℓ = 2, a = 1


def test_the_formula_refuses_what_is_no_network():
    with pytest.raises(ConfigError, match="widths"):
        learning_coefficient((4,), 1)
    with pytest.raises(ConfigError, match=r"rank = 3 is invalid; use an integer in \[0, 2\]"):
        learning_coefficient((4, 2, 5), 3)


def test_the_pool_makes_the_teacher_the_exact_minimum_at_the_most_singular_point():
    known = KnownModel((10, 5, 3), 1)
    model, x, y = known_pool(known, 4096, seed=3)
    np.testing.assert_allclose(x[0].T @ x[0] / 4096, torch.eye(10), atol=1e-4)  # whitened inputs
    w = model.layers[0].detach()[0] @ model.layers[1].detach()[0]
    assert torch.linalg.matrix_rank(w).item() == 1 and (model.layers[0][0, :, 1:] == 0).all()  # extra units off
    loss = gaussian_nll(model, x, y)
    loss.sum().backward()
    assert model.flat.grad.abs().max() < 1e-4  # the teacher is the least-squares minimum of the pool
    assert loss.item() == pytest.approx(0.5 * 3 * (4096 - 10) / 4096, rel=0.05)  # the noise left, unit variance


@pytest.fixture(scope="module")
def at_defaults():
    return suite_bias(SGLDSettings(), seed=0, min_chains=SGLDSettings().chains)  # the defaults as a user runs them


@pytest.mark.parametrize("known", SUITE, ids=[known.name for known in SUITE])
def test_the_default_settings_estimate_every_suite_model_within_15_percent(at_defaults, known):
    row = at_defaults.table.set_index("model").loc[known.name]
    assert row.truth == known.truth
    assert abs(row.relative_error) < TOLERANCE, f"λ̂ {row.estimate:.2f} ± {row.se:.2f} against λ = {row.truth}"
    assert row.invalid == "" and row.acceptance > LIMITS.min_acceptance
    assert row.basin_fraction < LIMITS.basin_fraction / 2


def test_the_suite_reports_its_bias(at_defaults):
    table = at_defaults.table
    assert list(table.model) == [known.name for known in SUITE] and table.regular.sum() == 3
    assert at_defaults.max_abs_relative_error == pytest.approx(table.relative_error.abs().max())
    assert abs(at_defaults.mean_relative_error) < 0.05
    assert at_defaults.summary().startswith(f"known-answer suite ({len(SUITE)} models): λ̂/λ − 1 from ")
    assert at_defaults.settings["nbeta"] == pytest.approx(512 / math.log(512))


def test_the_suite_reports_its_bias_against_what_each_estimate_targets_at_its_scale(at_defaults):
    table = at_defaults.table
    assert at_defaults.max_abs_scale_error == pytest.approx(table.scale_error.abs().max())
    assert (table.scale_error == table.estimate / table.scale_truth - 1).all()
    # the scale's λ is below the LLC (finite nβ and a γ > 0 see less of the basin) and, at the defaults, close to it
    assert (table.scale_truth < table.truth).all() and (table.scale_truth > 0.75 * table.truth).all()
    assert "against λ at these nβ and γ from " in at_defaults.summary()


@pytest.mark.parametrize("nbeta, gamma", [(1e4, 1e4), (1218.0, 100.0), (82.0, 2.0)])
def test_the_scale_reference_samples_a_regression_s_gaussian_posterior_exactly(nbeta, gamma):
    # one layer: the localised tempered posterior is Gaussian with precision nβ + γ in each of the d directions of
    # unit curvature, so nβ·E[L − L(w*)] = d/2 · nβ/(nβ + γ): half the LLC at the sorting study's nβ = γ
    known = SUITE[1]
    model, _, _ = known_pool(known, 4096, seed=0)
    reference = tempered_loss_target([w.data for w in model.layers], nbeta, gamma, seed=1)
    exact = known.parameters / 2 * nbeta / (nbeta + gamma)
    assert abs(reference.value - exact) < 4 * reference.se + 0.005 * exact, f"{reference} against {exact}"
    assert 0.45 < reference.acceptance < 0.7 and reference.se < 0.01 * exact


def test_the_scale_reference_of_a_singular_model_lies_below_its_llc_and_rises_with_nbeta():
    known = SUITE[5]  # deep linear 4×4×4 rank 1: λ = 7, most of it in directions only γ holds at a small nβ
    model, _, _ = known_pool(known, 4096, seed=0)
    layers = [w.data for w in model.layers]
    values = [tempered_loss_target(layers, nbeta, 1.0, seed=0).value for nbeta in (10.0, 100.0, 1000.0)]
    assert values[0] < values[1] < values[2] < known.truth


def test_the_scale_reference_needs_a_positive_nbeta_and_gamma():
    model, _, _ = known_pool(SUITE[0], 4096, seed=0)
    with pytest.raises(ConfigError, match=r"localization = 0.0 are invalid"):
        tempered_loss_target([w.data for w in model.layers], 100.0, 0.0)
    with pytest.raises(ConfigError, match=r"chains = 1 is invalid; use an integer >= 2"):
        tempered_loss_target([w.data for w in model.layers], 100.0, 1.0, chains=1)


def test_devinterp_style_settings_show_their_bias():
    # the issue's settings (ε 1e-4, γ 100 against nβ 82, no burn-in) read nn.Linear(10, 3)'s 15 as about 5
    old = SGLDSettings(lr=1e-4, localization=100.0, burnin=0, draws=200)
    bias = suite_bias(old, seed=0, min_chains=old.chains)
    assert bias.mean_relative_error < -0.4
    linear = bias.table.set_index("model").loc["linear 10×3 rank 3"]
    assert 3.5 < linear.estimate < 7.0


# --- validity -----------------------------------------------------------------------------------


def test_hot_chains_leave_the_basin_and_are_invalid():
    model, x, y = known_pool(SUITE[1], 4096, seed=0)
    chance = 0.5 * y.pow(2).sum(-1).mean().item()
    hot = SGLDSettings(lr=0.05, nbeta=1.0, localization=0.0, burnin=50, draws=100)  # nβ = 1: a nearly flat posterior
    result = estimate_llc(model, gaussian_nll, x, y, hot, chance_loss=chance)
    frame = result.to_frame()
    assert frame.basin_fraction[0] > LIMITS.basin_fraction
    assert frame.invalid[0].startswith("chains left the basin")
    assert any("left the basin" in w for w in result.warnings)
    assert result.chance_loss[0] == pytest.approx(chance)


def rows(**columns) -> pd.DataFrame:
    base = {"llc_mean": 10.0, "llc_se": 1.0, "warnings": "", "acceptance": 0.6, "basin_fraction": 0.01}
    return pd.DataFrame([{**base, **columns}])


@pytest.mark.parametrize("columns, reason", [
    ({}, ""),
    ({"llc_mean": -1.0}, "λ̂ ≤ 0 or undefined: w* is not a local minimum"),
    ({"llc_se": math.nan}, "no standard error recorded"),
    ({"warnings": "chain 1 diverges: …; chains disagree"}, "a chain diverged"),
    ({"warnings": "chain 0 loss became non-finite at draw 3"}, "a chain went non-finite"),
    ({"warnings": "draw losses are still climbing over the second half"},
     "draw losses still climbing: the chains had not settled"),
    ({"basin_fraction": 0.9},
     "chains left the basin: their draws gave back ≥ 50% of what w* gains over a uniform guess"),
    ({"acceptance": 0.3}, "MALA acceptance below 0.4: the SGLD step is too coarse"),
    ({"acceptance": math.nan, "basin_fraction": math.nan}, ""),  # not measured: not judged
    ({"llc_mean": math.nan, "warnings": "chain 0 loss became non-finite at burn-in step 3"}, "a chain went non-finite"),
])
def test_each_sampler_check_makes_an_estimate_invalid(columns, reason):
    assert invalid_reasons(rows(**columns), LIMITS).tolist() == [reason]
    assert valid_llc(rows(**columns), LIMITS).tolist() == [reason]  # the development rule is the same


def test_the_limits_are_the_callers():
    strict = ValidityLimits(basin_fraction=0.01, min_acceptance=0.7)
    assert invalid_reasons(rows(), strict).tolist() == [
        "chains left the basin: their draws gave back ≥ 1% of what w* gains over a uniform guess"]
    assert invalid_reasons(rows(basin_fraction=0.001), strict).tolist() == [
        "MALA acceptance below 0.7: the SGLD step is too coarse"]
    assert invalid_reasons(rows(basin_fraction=0.9), ValidityLimits(basin_fraction=1.0)).tolist() == [""]


def test_trace_rows_without_the_new_columns_are_judged_on_what_they_have():
    old = pd.DataFrame({"llc_mean": [5.0, 5.0], "llc_se": [1.0, math.nan], "warnings": ["", ""]})
    assert invalid_reasons(old, LIMITS).tolist() == ["", "no standard error recorded"]
    assert invalid_reasons(old.iloc[:0], LIMITS).tolist() == []


def test_basin_fraction_is_only_defined_where_w_star_beats_chance():
    fraction = basin_fraction(np.array([1.0, 4.0, 1.0]), np.array([2.0, 4.5, 1.5]), np.array([3.0, 4.0, math.nan]))
    assert fraction[0] == pytest.approx(0.5) and np.isnan(fraction[1]) and np.isnan(fraction[2])


def test_suite_bias_at_a_study_s_settings_shows_what_they_cost():
    # the modular study's cpu settings (devinterp's nβ = B/ln B with γ 100 and 50 burn-in steps at ε 1e-4)
    modular_cpu = SGLDSettings(lr=1e-4, localization=100.0, chains=4, draws=100, burnin=50, batch_size=256,
                               init_loss_batches=16, init_batch_size=256)
    bias = suite_bias(modular_cpu, seed=0)
    assert bias.mean_relative_error < -0.5 and bias.max_relative_se < 0.2  # resolved, and far below every truth
    assert bias.settings["init_loss_batches"] is None  # L(w*) on the whole pool, whatever the study uses
    assert "relative SE up to" in bias.summary()


def test_the_suite_samples_enough_chains_that_a_study_s_few_do_not_read_as_bias():
    # the sorting study's cpu settings sample 4 chains at nβ 1e4: the suite's standard errors then rival its truths
    few = SGLDSettings(lr=1.5e-6, nbeta=1e4, localization=1e4, chains=4, draws=120, burnin=120, batch_size=64)
    own, suite = suite_bias(few, seed=0, min_chains=4), suite_bias(few, seed=0)
    assert own.settings["chains"] == 4 and suite.settings["chains"] == SUITE_CHAINS
    assert suite.max_relative_se < own.max_relative_se / 2.5  # 16× the chains: a quarter of the noise
    assert suite.max_abs_relative_error < own.max_abs_relative_error


def test_the_suite_names_a_bad_chain_count():
    with pytest.raises(ConfigError, match=r"min_chains = 0 is invalid"):
        suite_bias(SGLDSettings(), min_chains=0)
