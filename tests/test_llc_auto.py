"""SGLD settings chosen per model (headway.analysis.llc.auto): read off the Hessian spectrum, checked on the model,
recorded with why or refused with the reason; `estimate_llc(settings="auto")`."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import torch

from headway.analysis.llc.auto import STEP_SCALE, choose_settings, edge_ratio, proposed
from headway.analysis.llc.estimate import estimate_llc
from headway.analysis.llc.known_answers import TanhTeacher, plain_gaussian_nll, tanh_pool
from headway.analysis.llc.resolution import Spectrum
from headway.analysis.llc.settings import SGLDSettings
from headway.errors import ConfigError

BASE = SGLDSettings(chains=4)


@pytest.fixture(scope="module")
def tanh():
    net, x, y = tanh_pool(TanhTeacher(), 4096, seed=0)
    return net, x, y, 0.5 * y.double().pow(2).sum(dim=-1).mean().item()


def test_the_ratio_and_steps_follow_the_spectrum():
    spectrum = Spectrum(np.array([[1.0, 0.01, 0.0]]), np.ones((1, 3)), 3, "exact")  # one flat direction
    ratio = edge_ratio(spectrum, 0.075)
    assert spectrum.shortfall(ratio)[0] == pytest.approx(0.075, abs=1e-6)
    settings, used = proposed(SGLDSettings(nbeta=100.0), 1.0, ratio, 10**9)
    assert used == ratio and settings.nbeta == 100.0 and settings.localization == pytest.approx(ratio * 100)
    assert settings.lr * settings.nbeta * 1.0 == pytest.approx(STEP_SCALE)  # ε·nβ·h_max
    small, capped = proposed(SGLDSettings(nbeta=100.0), 1.0, ratio, 400)
    assert capped > ratio and 4 * small.burnin <= 400 + 4  # the budget raises the ratio it can relax


def test_the_tanh_member_is_read_within_15_percent_at_the_settings_chosen_for_it(tanh):
    net, x, y, chance = tanh
    choice = choose_settings(net, plain_gaussian_nll, x, y, BASE, chance_loss=chance)
    assert choice.settings is not None, choice.reason
    row = choice.result.to_frame().iloc[0]
    assert row.invalid == "" and row.limited == "" and abs(row.llc_mean / TanhTeacher().truth - 1) < 0.15
    assert list(choice.tries.role) == ["try", "ε/2", "2γ", "batch 1024"] and choice.tries.passed.all()
    assert "h_max" in choice.reason and "held at ε/2" in choice.reason
    assert choice.to_dict()["settings"]["localization"] == choice.settings.localization


def test_a_budget_too_small_for_the_check_is_refused_with_the_reason(tanh):
    net, x, y, chance = tanh
    choice = choose_settings(net, plain_gaussian_nll, x, y, SGLDSettings(chains=2, draws=300), chance_loss=chance,
                             max_steps=200)
    assert choice.settings is None and "over the budget of 200" in choice.reason
    assert choice.result.to_frame().invalid.iloc[0].startswith("no SGLD setting qualified")


def test_estimate_llc_auto_and_a_wrong_word():
    net, x, y = tanh_pool(TanhTeacher(), 1024, seed=0)
    with pytest.raises(ConfigError, match="'automatic' is unknown"):
        estimate_llc(net, plain_gaussian_nll, x, y, "automatic")
    # a network with no curvature at all (every weight zero, zero targets: L is flat to second order)
    flat = torch.nn.Linear(3, 1, bias=False)
    torch.nn.init.zeros_(flat.weight)
    xs = torch.randn(512, 3, generator=torch.Generator().manual_seed(0))
    cube = lambda model, inputs, outputs: (model(inputs) - outputs).pow(4).mean()  # noqa: E731
    frame = estimate_llc(flat, cube, xs, torch.zeros(512, 1), "auto").to_frame()
    assert frame.moving_weights.iloc[0] == 3 and frame.quadratic_limit.iloc[0] == 0


def test_a_table_without_recorded_settings_was_taken_at_the_plans_own():
    from headway.analysis.llc.study_settings import recorded_settings, sgld_record

    planned = SGLDSettings(lr=1e-5, chains=2)
    assert recorded_settings(pd.DataFrame(), planned).settings == planned
    chosen = SGLDSettings(lr=3e-7, nbeta=50.0, chains=2)
    table = pd.DataFrame({"settings": [json.dumps(chosen.stored_dict(), sort_keys=True)] * 2,
                          "choice": ["h_max = 3; …"] * 2, "invalid": ["", ""]})
    record = sgld_record(table, planned)
    assert record == {"sgld": chosen.stored_dict(), "sgld_choice": "h_max = 3; …", "sgld_refused": ""}


def test_a_noisy_choice_is_refused_not_passed_on_its_standard_errors():
    """At nβ 1e4 and batch 64 (the sorting study's base) minibatch noise heats the chains: on a deep linear network of
    λ = 8 the choice read 27 ± 25, which every check on standard errors let through; it must be refused."""
    from headway.analysis.llc.known_answers import MIN_POOL, SUITE, gaussian_nll, known_pool

    known = SUITE[6]
    model, x, y = known_pool(known, max(MIN_POOL, 256), 6, "cpu")
    base = SGLDSettings(nbeta=1e4, chains=4, batch_size=64)
    choice = choose_settings(model, gaussian_nll, x, y, base, max_steps=1000,
                             chance_loss=0.5 * y.double().pow(2).sum(dim=-1).mean().item())
    assert choice.settings is None and "is not resolved to 10%" in choice.reason
    assert choice.result.to_frame().invalid.iloc[0].startswith("no SGLD setting qualified")


def test_a_preconditioned_base_is_refused_before_anything_is_measured(tanh):
    net, x, y, _ = tanh
    with pytest.raises(ConfigError, match="preconditioner = 'diagonal' cannot be chosen for"):
        choose_settings(net, plain_gaussian_nll, x, y, base=SGLDSettings(preconditioner="diagonal"))
