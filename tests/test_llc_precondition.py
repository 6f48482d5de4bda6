"""Preconditioned SGLD (headway.analysis.llc.precondition, SGLDSettings.preconditioner = "diagonal"): the metric
is 1/(nβ·Hᵢᵢ + γ) at w*, the chains sample the same posterior as plain SGLD (a Gaussian basin read at its exact
quadratic value, the tanh known answer within 15% of d/2), its MALA score accounts for the metric, and where the
curvature spans four orders of magnitude it relaxes in a few hundred steps where plain SGLD at the same budget
reads low."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from headway.analysis.llc.estimate import estimate_llc
from headway.analysis.llc.known_answers import TanhTeacher, plain_gaussian_nll, tanh_pool
from headway.analysis.llc.precondition import diagonal_preconditioner
from headway.analysis.llc.settings import SGLDSettings
from headway.errors import ConfigError


def stiff_and_soft_regression(size: int = 4096, seed: int = 0) -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """A linear regression at its least-squares w* whose 12 input scales run from 0.03 to 3: Hessian eigenvalues
    (the inputs' second moments) from about 1e-3 to 9, so plain SGLD's step is set by the stiffest and its burn-in
    by the softest."""
    g = torch.Generator().manual_seed(seed)
    scales = torch.logspace(-1.5, 0.5, 12, dtype=torch.float64)
    x = torch.randn(size, 12, generator=g, dtype=torch.float64) * scales
    y = x @ torch.randn(12, 1, generator=g, dtype=torch.float64) + torch.randn(size, 1, generator=g,
                                                                                 dtype=torch.float64)
    model = nn.Linear(12, 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.linalg.lstsq(x, y).solution.T)
    return model.float(), x.float(), y.float()


def test_the_preconditioner_setting_is_checked_and_left_out_of_stored_settings_when_off():
    with pytest.raises(ConfigError, match=r"preconditioner = 'adam' is unknown; choose one of none, diagonal"):
        SGLDSettings(preconditioner="adam")
    assert "preconditioner" not in SGLDSettings().stored_dict()  # runs and caches stamped before it stay valid
    assert SGLDSettings(preconditioner="diagonal").stored_dict()["preconditioner"] == "diagonal"


def test_the_metric_is_the_inverse_stiffness_of_each_coordinate():
    model, x, y = stiff_and_soft_regression()
    settings = SGLDSettings(nbeta=1000.0, localization=0.1)
    diagonal = x.double().pow(2).mean(dim=0)  # the Hessian's diagonal on the whole pool
    # Hutchinson's estimate: the diagonal plus noise from the off-diagonal entries, which shrinks with the probes;
    # with few, the soft coordinates' entries (1e-3) drown in their coupling to stiff ones (≈ 1e-3 at 4096 rows)
    metric = diagonal_preconditioner(model, plain_gaussian_nll, x, y, settings, probes=400, rows=None)
    assert metric.shape == (1, 12)
    assert torch.allclose(metric[0].double(), 1 / (1000 * diagonal + 0.1), rtol=0.15)
    mask = torch.arange(12) >= 8
    masked = diagonal_preconditioner(model, plain_gaussian_nll, x, y, settings, mask=mask, probes=400, rows=None)
    assert torch.equal(masked[0, :8], torch.ones(8))
    assert torch.allclose(masked[0, 8:].double(), 1 / (1000 * diagonal[8:] + 0.1), rtol=0.05)  # no coupling left


def test_a_gaussian_basin_is_read_at_its_quadratic_value_in_a_few_hundred_steps():
    model, x, y = stiff_and_soft_regression()
    budget = dict(nbeta=1000.0, localization=0.1, chains=8, burnin=300, draws=300, batch_size=1024)
    plain = SGLDSettings(lr=0.1 / (1000 * 9.0), **budget)  # the stiffest direction's step as below
    diagonal = SGLDSettings(lr=0.1, preconditioner="diagonal", **budget)
    rows = {name: estimate_llc(model, plain_gaussian_nll, x, y, s, resolve=True).to_frame().iloc[0]
            for name, s in (("plain", plain), ("diagonal", diagonal))}
    expected = rows["plain"].quadratic_llc  # ½·Σ nβh/(nβh + γ): 5.9 of the 6 the 12 directions allow
    assert rows["diagonal"].invalid == "" and rows["diagonal"].limited == ""
    assert abs(rows["diagonal"].llc_mean / expected - 1) < 0.1
    assert rows["plain"].llc_mean < 0.8 * expected  # the soft directions have not relaxed in 300 steps


def test_the_mala_score_includes_the_metric():
    """Full-batch steps on a quadratic basin: a small preconditioned step is almost always accepted (were |g|²
    not weighted by the metric, the proposal's log-density would be off by orders of magnitude), a large one not."""
    model, x, y = stiff_and_soft_regression(size=2048)
    common = dict(nbeta=1000.0, localization=0.1, chains=4, burnin=50, draws=100, batch_size=2048,
                  preconditioner="diagonal")
    small = estimate_llc(model, plain_gaussian_nll, x, y, SGLDSettings(lr=0.02, **common))
    large = estimate_llc(model, plain_gaussian_nll, x, y, SGLDSettings(lr=0.6, **common))
    assert small.acceptance[0] > 0.95 and large.acceptance[0] < 0.8


def test_the_tanh_member_is_read_within_15_percent_by_preconditioned_chains():
    """At the resolving γ/nβ = 1e-4 of tests/test_llc_resolution.py, whose plain chains take 2000 + 1000 steps."""
    net, x, y = tanh_pool(TanhTeacher(), 4096, seed=0)
    chance = 0.5 * y.double().pow(2).sum(dim=-1).mean().item()
    settings = SGLDSettings(lr=0.1, nbeta=1000.0, localization=0.1, chains=4, burnin=300, draws=300,
                            preconditioner="diagonal")
    row = estimate_llc(net, plain_gaussian_nll, x, y, settings, chance_loss=chance, resolve=True).to_frame().iloc[0]
    assert row.invalid == "" and row.limited == ""
    assert abs(row.llc_mean / TanhTeacher().truth - 1) < 0.15
