"""What an LLC estimate's settings can resolve (headway.analysis.llc.resolution): the quadratic prediction and its
γ → 0 limit from the Hessian at w*, exact and by Lanczos quadrature, masked; the tanh teacher-student known
answer, which the default settings read ~25% low and must mark resolution-limited, and settings that resolve it
read within 15% of λ = d/2; and Watanabe's singular a·tanh(b·x), read at its exact finite-nβ expectation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from headway.analysis.llc import resolution as res
from headway.analysis.llc.estimate import estimate_llc
from headway.analysis.llc.known_answers import (KnownModel, TanhTeacher, gaussian_nll, known_pool,
                                                plain_gaussian_nll, singular_tanh_expectation, singular_tanh_pool,
                                                tanh_pool)
from headway.analysis.llc.settings import SGLDSettings
from headway.analysis.llc.validity import ValidityLimits

DEFAULT = SGLDSettings()
NBETA = 512 / np.log(512)  # devinterp's default nβ at batch 512


@pytest.fixture(scope="module")
def tanh():
    """The tanh member at w* (seed 0: 26 curved directions, the smallest curvature about 0.002)."""
    net, x, y = tanh_pool(TanhTeacher(), 4096, seed=0)
    return net, x, y, 0.5 * y.double().pow(2).sum(dim=-1).mean().item()


def test_a_whitened_regression_has_unit_curvature_and_the_closed_form_prediction():
    model, x, y = known_pool(KnownModel((10, 3), 3), 4096, 0)
    found = res.basin_resolution(model, gaussian_nll, x, y, DEFAULT)
    assert found.method == "exact" and found.directions == 30
    assert found.prediction[0] == pytest.approx(0.5 * 30 * NBETA / (NBETA + 2.0), rel=1e-4)
    assert found.limit[0] == 15.0 and found.unresolved[0] == 0 and found.negative[0] == 0
    assert found.shortfall[0] <= ValidityLimits().max_shortfall
    half = torch.zeros(30)
    half[:15] = 1.0  # a restricted LLC sees only its own coordinates
    masked = res.basin_resolution(model, gaussian_nll, x, y, DEFAULT, mask=half)
    assert masked.directions == 15 and masked.limit[0] == 7.5


def test_flat_directions_of_a_singular_model_count_in_neither_number():
    model, x, y = known_pool(KnownModel((10, 5, 3), 1), 4096, 0)  # 65 parameters, a rank-1 teacher
    found = res.basin_resolution(model, gaussian_nll, x, y, DEFAULT)
    # curved: the active unit's input column (10) and output row (3), less their shared scale; the other 53
    # directions are flat (the true set's and the dead units'), and λ = 10 comes from them beyond second order
    assert found.limit[0] == 6.0 and found.negative[0] == 0
    assert found.shortfall[0] <= ValidityLimits().max_shortfall


def test_lanczos_quadrature_agrees_with_the_exact_spectrum(tanh, monkeypatch):
    net, x, y, _ = tanh
    settings = SGLDSettings(nbeta=200.0, localization=1.0)
    exact = res.basin_resolution(net, plain_gaussian_nll, x, y, settings)
    monkeypatch.setattr(res, "EXACT_MAX", 8)
    lanczos = res.basin_resolution(net, plain_gaussian_nll, x, y, settings, probes=64, steps=16)
    assert lanczos.method == "lanczos" and exact.method == "exact"
    assert lanczos.prediction[0] == pytest.approx(exact.prediction[0], rel=0.1)
    assert lanczos.limit[0] == pytest.approx(exact.limit[0], rel=0.1)


def test_the_tanh_member_is_read_low_at_the_defaults_and_marked_resolution_limited(tanh):
    net, x, y, chance = tanh
    result = estimate_llc(net, plain_gaussian_nll, x, y, DEFAULT, chance_loss=chance, resolve=True)
    row = result.to_frame().iloc[0]
    assert row.quadratic_limit == 13.0 and row.unresolved_directions >= 3
    assert row.llc_mean < 0.85 * 13  # about 25% low …
    assert row.llc_mean == pytest.approx(row.quadratic_llc, rel=0.1)  # … as the quadratic prediction says
    assert row.invalid == "" and row.limited.startswith("resolution-limited:")  # so never valid and unmarked
    assert "λ̂ is a lower bound" in row.limited


def test_the_tanh_member_is_read_within_15_percent_at_settings_that_resolve_it(tanh):
    net, x, y, chance = tanh
    # nβ·h ≥ 2 ≫ γ = 0.1 in every direction; ε·nβ·h_max ≈ 0.3 at the stiffest
    settings = SGLDSettings(lr=1e-4, nbeta=1000.0, localization=0.1, chains=4, burnin=2000, draws=1000)
    result = estimate_llc(net, plain_gaussian_nll, x, y, settings, chance_loss=chance, resolve=True)
    row = result.to_frame().iloc[0]
    assert row.unresolved_directions == 0 and row.shortfall < 0.01 and row.limited == ""
    assert row.invalid == "" and abs(row.llc_mean / TanhTeacher().truth - 1) < 0.15


def test_watanabes_singular_tanh_is_read_at_its_finite_n_expectation():
    """a·tanh(b·x) at a = b = 0: λ = 1/2 (multiplicity 2) only as nβ → ∞; at the default nβ and γ the localised
    tempered posterior's own value is 0.30, and the sampler must read that once its chains have had the
    2/(εγ) = 1000 steps the flat directions (held by γ alone) need to relax."""
    model, x, y = singular_tanh_pool(4096, seed=0)
    settings = SGLDSettings(chains=16, burnin=2000, draws=2000)
    expected = singular_tanh_expectation(x, NBETA, settings.localization)
    assert 0.28 < expected < 0.32  # well below 1/2: the log-n approach of a normal crossing
    assert singular_tanh_expectation(x, 1e4, 1.0) == pytest.approx(0.415, abs=0.01)
    result = estimate_llc(model, plain_gaussian_nll, x, y, settings, resolve=True)
    row = result.to_frame().iloc[0]
    assert abs(row.llc_mean - expected) < 3 * row.llc_se and abs(row.llc_mean / expected - 1) < 0.2
    # no curved basin to miss, and λ̂ comes from beyond second order: valid, but not the quadratic's to vouch for
    assert row.invalid == "" and row.quadratic_limit == 0 and row.limited.startswith("not quadratic")


def test_chains_that_leave_the_basin_are_invalid_without_a_chance_loss():
    """Pool seed 1's teacher leaves w* with two flat directions, along which the default chains wander off to λ̂
    in the hundreds; with no chance loss to judge the basin by, d/2 of the 26 moving weights is the ceiling."""
    net, x, y = tanh_pool(TanhTeacher(), 4096, seed=1)
    row = estimate_llc(net, plain_gaussian_nll, x, y, DEFAULT).to_frame().iloc[0]
    assert row.moving_weights == 26 and np.isnan(row.chance_loss)
    assert row.llc_mean > 1.15 * 13 and "above d/2 = 13" in row.invalid and "left w*'s basin" in row.invalid
    masked = estimate_llc(net, plain_gaussian_nll, x, y, DEFAULT, mask=torch.arange(26) < 8).to_frame().iloc[0]
    assert masked.moving_weights == 8


def test_the_ceiling_and_shortfall_are_the_callers_limits(tanh):
    net, x, y, chance = tanh
    strict = ValidityLimits(max_shortfall=0.99, ceiling=0.1)  # nothing limited; every positive λ̂ above 0.1·d/2
    row = estimate_llc(net, plain_gaussian_nll, x, y, DEFAULT, validity=strict, resolve=True).to_frame().iloc[0]
    assert row.limited == "" and "above d/2" in row.invalid


def test_an_estimate_above_its_quadratic_prediction_is_not_vouched_for():
    """λ̂ well above the Hessian's own prediction (cross-entropy near zero loss: the Hessian vanishes, the loss a short
    way off does not) is labelled "not quadratic", never left as vouched for; within 15% and two standard errors, or
    with no resolution measured, it is left alone, and a shortfall's label comes first."""
    import pandas as pd

    from headway.analysis.llc.validity import limited_reasons

    rows = pd.DataFrame({"llc_mean": [125.0, 11.0, 14.0, 125.0], "llc_se": [2.6, 0.5, 1.5, 2.6],
                         "quadratic_llc": [0.1, 10.0, 11.0, 0.1], "shortfall": [0.05, 0.05, 0.05, 0.9]})
    why = limited_reasons(rows, ValidityLimits())
    assert why[0].startswith("not quadratic: λ̂ is above the Hessian's quadratic prediction")
    assert why[1] == "" and why[2] == ""  # 14 − 2·1.5 = 11 is not above 1.15 × 11
    assert why[3].startswith("resolution-limited")
    assert (limited_reasons(rows.drop(columns=["quadratic_llc", "shortfall"]), ValidityLimits()) == "").all()
