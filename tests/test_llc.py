"""LLC by SGLD: d/2 for regular models, agreement with devinterp 1.x, batching, masks, diagnostics."""

from __future__ import annotations

import copy
import io
import itertools
import json
import math
import warnings
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from headway.analysis.llc import (
    MIN_ACCEPTANCE,
    LLCResult,
    MalaScore,
    SGLDSettings,
    ValidityLimits,
    anchor_loss,
    default_nbeta,
    estimate_llc,
    head_mask,
    parameter_mask,
    replicate,
    sgld_step,
    weight_masks,
)
from headway.analysis.llc.diagnostics import drift
from headway.errors import ConfigError
from headway.model.config import ModelConfig
from headway.model.flat import FlatParameters
from headway.model.transformer import EnsembleTransformer
from headway.studies.llc_schema import curve_csv

# Regular-model sampling: nβ = 128/ln 128 ≈ 26 ≫ γ = 0.1, so the localisation shrinks λ̂ by only
# nβ/(nβ + γ) ≈ 0.996; ε·(nβ + γ) ≈ 0.1 makes the SGLD discretisation bias about +3% and the weights
# relax in ~20 steps (burn-in 60). A pool of 16 × 128 makes the 16 init-loss batches the whole pool.
REGULAR = {"lr": 4e-3, "localization": 0.1, "burnin": 60, "batch_size": 128}
POOL = 16 * 128
MANY = {"chains": 32, "draws": 500}  # chain × draw budget for a few per cent standard error


class EnsembleLinear(nn.Module):
    """E linear regressions y ≈ x·w, weights [E, d] in a flat buffer like headway's models."""

    def __init__(self, w: torch.Tensor) -> None:
        super().__init__()
        self.w = nn.Parameter(w.clone())
        self.n_instances = w.shape[0]
        self.flat = FlatParameters(self, self.n_instances)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.einsum("ebd,ed->eb", x, self.w)


def half_mse(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Gaussian negative log-likelihood with unit noise, up to a constant: per-instance mean of r²/2."""
    return 0.5 * ((model(x) - y) ** 2).mean(dim=1)


def regression(e: int, d: int, seed: int, n: int = POOL, ranks: list[int] | None = None,
               scales: list[float] | None = None):
    """E pools of y = x·w + N(0, 1) and the model at each pool's least-squares minimum. Instance e's
    inputs use only its first ranks[e] coordinates (the others are flat directions) and are scaled
    by scales[e]."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(e, n, d, generator=g)
    for i, rank in enumerate(ranks or []):
        x[i, :, rank:] = 0.0
    for i, scale in enumerate(scales or []):
        x[i] *= scale
    y = torch.einsum("end,ed->en", x, torch.randn(e, d, generator=g)) + torch.randn(e, n, generator=g)
    w = (torch.linalg.pinv(x) @ y.unsqueeze(-1)).squeeze(-1)
    return EnsembleLinear(w), x, y


def se_of_mean(result: LLCResult) -> np.ndarray:
    """Standard error of each instance's mean LLC from its independent chains."""
    return result.llc_std / math.sqrt(result.llc_per_chain.shape[1])


def ce_last(model: nn.Module, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape).mean(1)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


@pytest.fixture(scope="module")
def trained():
    """The trained tiny transformer and its pool, built once for the module."""
    return trained_transformer()


def trained_transformer(seed: int = 0):
    """A 1-layer attention-only transformer near a minimum of a noisy copy-the-first-token task
    (80% clean labels, so the loss has a minimum at finite weights), and its pool [1, 1024, ...]."""
    g = torch.Generator().manual_seed(seed)
    n, vocab, ctx = 1024, 6, 5
    tokens = torch.randint(0, vocab, (1, n, ctx), generator=g)
    noisy = torch.randint(0, vocab, (1, n), generator=g)
    targets = torch.where(torch.rand(1, n, generator=g) < 0.8, tokens[..., 0], noisy)
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8, d_mlp=0), vocab, ctx, vocab,
                                           [seed])
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(400):
        index = torch.randint(0, n, (64,), generator=g)
        optimiser.zero_grad()
        ce_last(model, tokens[:, index], targets[:, index]).sum().backward()
        optimiser.step()
    return model, tokens, targets


class Single(nn.Module):
    """An E = 1 ensemble as a plain model for devinterp: [B, ...] in, [B, d_out] out."""

    def __init__(self, inner: nn.Module) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner(tokens.unsqueeze(0))[0]


class TensorPool(torch.utils.data.Dataset):
    """A tensor pool whose batches are gathered in one indexing op (`__getitems__`), so devinterp's
    DataLoader is not dominated by per-example collation."""

    def __init__(self, tokens: torch.Tensor, targets: torch.Tensor) -> None:
        self.tokens, self.targets = tokens, targets

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index):
        return self.tokens[index], self.targets[index]

    def __getitems__(self, indices):
        return self.tokens[indices], self.targets[indices]


# --- regular models ---------------------------------------------------------------------------


@pytest.mark.parametrize("d", [6, 10])
def test_regular_model_recovers_half_the_dimension(d):
    model, x, y = regression(2, d, seed=d)
    result = estimate_llc(model, half_mse, x, y, SGLDSettings(**MANY, **REGULAR))
    assert result.llc_mean.shape == (2,)
    np.testing.assert_allclose(result.llc_mean, d / 2, rtol=0.10)
    # nβ = 26 times the batch-to-batch noise of a 128-example loss (≈ 0.06) keeps the minibatch MALA
    # acceptance near 0.6 at any step: only that diagnostic fires, although λ̂ is right
    assert all("MALA acceptance" in w for w in result.warnings)
    assert 0.5 < result.acceptance.min() < MIN_ACCEPTANCE


def test_restricted_llc_counts_only_the_free_coordinates():
    d, k = 10, 4
    model, x, y = regression(2, d, seed=3)
    mask = torch.zeros(d)
    mask[:k] = 1.0
    result = estimate_llc(model, half_mse, x, y, SGLDSettings(**MANY, **REGULAR), mask=mask)
    np.testing.assert_allclose(result.llc_mean, k / 2, rtol=0.15)


# --- batching and seeds -----------------------------------------------------------------------


@pytest.mark.slow
def test_batched_instances_match_separate_runs():
    ranks = [10, 6, 3]  # LLC = rank / 2
    model, x, y = regression(3, 10, seed=1, ranks=ranks)
    settings = SGLDSettings(**MANY, **REGULAR)
    together = estimate_llc(model, half_mse, x, y, settings)
    np.testing.assert_allclose(together.llc_mean, np.array(ranks) / 2, rtol=0.15)
    for e in range(3):
        alone_model = EnsembleLinear(model.w.detach()[e : e + 1])
        alone = estimate_llc(alone_model, half_mse, x[e : e + 1], y[e : e + 1], settings)
        assert alone.init_loss[0] == pytest.approx(together.init_loss[e], rel=1e-6)
        gap = abs(alone.llc_mean[0] - together.llc_mean[e])
        assert gap <= 3 * math.hypot(se_of_mean(alone)[0], se_of_mean(together)[e])


def test_same_seed_same_numbers_and_identical_instances_agree():
    model, x, y = regression(1, 6, seed=4)
    twins = EnsembleLinear(model.w.detach().repeat(2, 1))
    x2, y2 = x.repeat(2, 1, 1), y.repeat(2, 1)
    settings = SGLDSettings(chains=6, draws=300, **REGULAR)
    first = estimate_llc(twins, half_mse, x2, y2, settings, progress=True)
    again = estimate_llc(twins, half_mse, x2, y2, settings)
    other = estimate_llc(twins, half_mse, x2, y2, SGLDSettings(chains=6, draws=300, seed=1, **REGULAR))
    np.testing.assert_array_equal(first.loss_trace, again.loss_trace)
    np.testing.assert_array_equal(first.llc_per_chain, again.llc_per_chain)
    assert not np.array_equal(first.loss_trace, other.loss_trace)
    assert first.init_loss[0] == pytest.approx(first.init_loss[1], rel=1e-6)
    assert not np.array_equal(first.loss_trace[0], first.loss_trace[1])  # each chain its own streams
    gap = abs(first.llc_mean[0] - first.llc_mean[1])
    assert gap <= 3 * math.hypot(*se_of_mean(first))
    frame = first.to_frame()
    assert list(frame.columns) == ["instance", "llc_mean", "llc_std", "llc_se", "init_loss", "init_loss_se",
                                   "acceptance", "draw_loss", "chance_loss", "basin_fraction",
                                   "moving_weights", "settings", *[f"llc_chain{c}" for c in range(6)], "n_warnings",
                                   "warnings", "invalid"]
    assert json.loads(frame.settings.iloc[0]) == {**settings.stored_dict(), "nbeta": first.settings["nbeta"]}
    assert frame.shape == (2, 21)
    np.testing.assert_allclose(frame.draw_loss, first.loss_trace.mean(axis=(1, 2)), rtol=1e-6)
    assert frame.chance_loss.isna().all() and frame.basin_fraction.isna().all()  # no chance loss given
    assert first.settings["nbeta"] == pytest.approx(default_nbeta(128)) == pytest.approx(128 / math.log(128))


def test_replicate_is_instance_major_and_leaves_the_original_alone():
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8, d_mlp=0), 6, 5, 6, [0, 1])
    before = model.flat.data.clone()
    rep = replicate(model, 3)
    assert rep.n_instances == 6 and rep.flat.data.shape == (6, model.flat.data.shape[1])
    for row in range(6):
        assert torch.equal(rep.flat.data[row], model.flat.data[row // 3])
    tokens = torch.randint(0, 6, (2, 4, 5), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = model(tokens).repeat_interleave(3, dim=0)
        torch.testing.assert_close(rep(tokens.repeat_interleave(3, dim=0)), expected)
    rep.flat.data.add_(1.0)
    assert torch.equal(model.flat.data, before)
    offset = rep.flat.offsets[rep.flat.names.index("blocks.0.attn.W_Q")]
    assert rep.blocks[0].attn.W_Q.data_ptr() == rep.flat.data[0, offset:].data_ptr()  # a view of the new buffer


# --- the SGLD step and masks ------------------------------------------------------------------


def test_head_mask_marks_exactly_one_heads_weights():
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=2, heads=3, d_model=12, d_mlp=0), 6, 5, 6, [0])
    view = replicate(model, 1)  # write the mask into a copy's weights to read it through the named views
    view.flat.data[0] = head_mask(model, 1, 2)
    attn = view.blocks[1].attn
    for name in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O"):
        weights = getattr(attn, name)[0]
        assert bool((weights[2] == 1).all()) and bool((weights[:2] == 0).all()), name
    assert bool((attn.b_O == 0).all()) and bool((view.blocks[0].attn.W_Q == 0).all())
    d, dh = 12, 4
    assert int(view.flat.data.sum()) == 4 * d * dh + 3 * dh
    masks = weight_masks(model, "all, heads,embed,unembed")
    assert list(masks) == ["all", "L0H0", "L0H1", "L0H2", "L1H0", "L1H1", "L1H2", "embed", "unembed"]
    assert masks["all"] is None
    assert int(masks["embed"].sum()) == 6 * d + 5 * d
    assert int(masks["unembed"].sum()) == d * 6 + 6
    assert torch.equal(masks["unembed"], parameter_mask(model, ["unembed.W_U", "unembed.b_U"]))


def test_sgld_step_moves_only_masked_coordinates_and_live_rows():
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8, d_mlp=0), 6, 5, 6, [0, 1])
    rep = replicate(model, 2)
    anchor = rep.flat.data.clone()
    tokens = torch.randint(0, 6, (4, 16, 5), generator=torch.Generator().manual_seed(0))
    mask = head_mask(model, 0, 1)
    live = torch.tensor([True, True, False, True])
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        rep.flat.zero_grad()
        ce_last(rep, tokens, tokens[..., 0]).sum().backward()
        sgld_step(rep.flat, anchor, 1e-3, 10.0, 100.0, generator, mask=mask, live=live)
    moved = rep.flat.data != anchor
    assert not moved[:, mask == 0].any()
    assert moved[live][:, mask == 1].all()
    assert not moved[2].any()


def test_sgld_step_matches_devinterp_optimizer(monkeypatch, trained):
    """Given the same batches and the same Gaussian draws, headway's whole-buffer step and
    devinterp's SGLD optimizer follow the same trajectory."""
    sgld = pytest.importorskip("devinterp.optim.sgld")
    model, tokens, targets = trained
    lr, nbeta, localization = 3e-3, 15.0, 100.0
    g = torch.Generator().manual_seed(1)
    batches = [torch.randperm(tokens.shape[1], generator=g)[:64] for _ in range(20)]
    ours = replicate(model, 1)
    anchor = ours.flat.data.clone()
    noise_gen = torch.Generator().manual_seed(2)
    for batch in batches:
        ours.flat.zero_grad()
        ce_last(ours, tokens[:, batch], targets[:, batch]).sum().backward()
        sgld_step(ours.flat, anchor, lr, nbeta, localization, noise_gen)
    theirs = copy.deepcopy(Single(model))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optimiser = sgld.SGLD(theirs.parameters(), lr=lr, nbeta=nbeta, localization=localization)
    noise_gen = torch.Generator().manual_seed(2)
    pending: list[torch.Tensor] = []
    monkeypatch.setattr(torch, "normal", lambda *args, size, **kwargs: pending.pop(0).view(size))
    flat = model.flat
    for batch in batches:
        noise = torch.randn((1, flat.data.shape[1]), generator=noise_gen)[0]  # same draws as sgld_step
        pending[:] = [noise[o : o + s] for o, s in zip(flat.offsets, flat.sizes)]
        optimiser.zero_grad()
        F.cross_entropy(theirs(tokens[0, batch]), targets[0, batch]).backward()
        optimiser.step()
    theirs_flat = torch.cat([p.detach().reshape(-1) for p in theirs.parameters()])
    assert (theirs_flat - flat.data[0]).abs().max() > 0.1  # the weights did move
    torch.testing.assert_close(ours.flat.data[0], theirs_flat, rtol=0, atol=1e-5)


@pytest.mark.slow
def test_agrees_with_devinterp_estimate(trained):
    """Same model, pool, ε, γ, nβ, chains, draws, burn-in and batch size as devinterp 1.x's
    estimate_learning_coeff_with_summary: the means agree within the chains' spread."""
    summary = pytest.importorskip("devinterp.slt.sampler").estimate_learning_coeff_with_summary
    model, tokens, targets = trained
    chains, draws, burnin, batch = 8, 150, 50, 64
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=chains, draws=draws, burnin=burnin,
                            batch_size=batch)
    ours = estimate_llc(model, ce_last, tokens, targets, settings)
    loader = torch.utils.data.DataLoader(TensorPool(tokens[0], targets[0]), batch_size=batch, shuffle=True,
                                         collate_fn=lambda pair: pair)
    # devinterp gets our L(w*): its own would average `chains` random batches, and that one shared
    # error would shift all its chains together, outside the chain spread this test compares.
    with warnings.catch_warnings(), torch.random.fork_rng():  # devinterp seeds the global RNG
        warnings.simplefilter("ignore")
        theirs = summary(Single(model), loader, evaluate=lambda m, b: F.cross_entropy(m(b[0]), b[1]),
                         optimizer_kwargs={"lr": 1e-3, "localization": 100.0, "nbeta": ours.settings["nbeta"]},
                         num_draws=draws, num_chains=chains, num_burnin_steps=burnin,
                         init_loss=float(ours.init_loss[0]), seed=0, verbose=False)
    gap = abs(ours.llc_mean[0] - theirs["llc/mean"])
    assert ours.llc_mean[0] > 0.5 and theirs["llc/mean"] > 0.5
    assert gap <= 3 * math.hypot(ours.llc_std[0], theirs["llc/std"]) / math.sqrt(chains)
    assert gap <= max(ours.llc_std[0], theirs["llc/std"])


# --- init loss --------------------------------------------------------------------------------


def test_init_loss_averages_distinct_batches_of_each_instances_pool():
    model, x, y = regression(2, 3, seed=5, n=512)
    seen: list[tuple[torch.Tensor, torch.Tensor]] = []

    def recording(m, xb, yb):
        if m.n_instances == 2:  # the init-loss calls; sampling runs on the 2 × chains model
            seen.append((xb.clone(), yb.clone()))
        return half_mse(m, xb, yb)

    settings = SGLDSettings(chains=2, draws=1, burnin=0, batch_size=64, init_loss_batches=4, init_batch_size=64)
    result = estimate_llc(model, recording, x, y, settings)
    assert len(seen) == 4
    with torch.no_grad():
        expected = torch.stack([half_mse(model, xb, yb) for xb, yb in seen]).double().mean(0)
    np.testing.assert_allclose(result.init_loss, expected.numpy(), rtol=1e-6)
    for e in range(2):
        rows = {tuple(row.tolist()): i for i, row in enumerate(x[e])}
        used = [rows[tuple(row.tolist())] for xb, _ in seen for row in xb[e]]  # KeyError: not its pool
        assert len(set(used)) == 4 * 64
    whole = estimate_llc(model, half_mse, x, y, SGLDSettings(chains=2, draws=1, burnin=0, batch_size=64,
                                                             init_batch_size=100))
    with torch.no_grad():  # the default is the whole pool (here 5 batches of 100 and one of 12)
        np.testing.assert_allclose(whole.init_loss, half_mse(model, x, y).numpy(), rtol=1e-5)
    np.testing.assert_array_equal(whole.init_loss_se, [0.0, 0.0])
    with pytest.raises(ConfigError, match="init_loss_batches = 9 of 64 examples is more than the pool of 512"):
        estimate_llc(model, half_mse, x, y, SGLDSettings(chains=2, draws=1, burnin=0, batch_size=64,
                                                         init_loss_batches=9, init_batch_size=64))


def test_init_loss_error_shrinks_with_more_data_and_enters_the_llc_error_bar():
    model, x, y = regression(1, 6, seed=5, n=8192)
    settings = SGLDSettings(chains=4, draws=50, init_batch_size=64, **REGULAR)
    few, many = (estimate_llc(model, half_mse, x, y, replace(settings, init_loss_batches=k)) for k in (4, 64))
    with torch.no_grad():
        per_example = (0.5 * (model(x) - y) ** 2)[0].double()
    expected = per_example.std().item() / math.sqrt(64 * 64) * math.sqrt(1 - 64 * 64 / 8192)
    assert many.init_loss_se[0] == pytest.approx(expected, rel=0.3)  # batch means estimate the per-example spread
    assert few.init_loss_se[0] > 2 * many.init_loss_se[0]  # 16× the data: about 4× smaller
    nbeta = settings.nbeta or default_nbeta(128)
    for result in (few, many):
        chains = result.llc_std[0] ** 2 / 4
        assert result.llc_se[0] == pytest.approx(math.sqrt(chains + (nbeta * result.init_loss_se[0]) ** 2))
        assert result.to_frame().llc_se[0] == result.llc_se[0]
    shared = anchor_loss(model, half_mse, x, y, replace(settings, init_loss_batches=4))
    again = estimate_llc(model, half_mse, x, y, replace(settings, init_loss_batches=4), init_loss=shared)
    np.testing.assert_array_equal(again.llc_per_chain, few.llc_per_chain)  # the same L(w*), passed in


# --- diagnostics and bad input ----------------------------------------------------------------


def test_mala_acceptance_matches_the_proposal_densities_written_out():
    """Two moves scored by MalaScore against devinterp's form: log q(w|w') − log q(w'|w) + U(w) − U(w')
    with the Gaussian proposal N(w − ε/2·g(w), ε) and U = nβ·L + γ/2·|w − w*|²."""
    model, *_ = regression(2, 3, seed=1)
    flat, g = model.flat, torch.Generator().manual_seed(0)
    anchor = flat.data.clone()
    lr, nbeta, gamma = 0.01, 50.0, 3.0
    score = MalaScore(flat, anchor, lr, nbeta, gamma, None)
    points, expected = [], []
    for _ in range(3):
        flat.data.add_(torch.randn(flat.data.shape, generator=g) * 0.1)
        flat.grad = torch.randn(flat.data.shape, generator=g)
        loss = torch.rand(2, generator=g)
        drift = nbeta * flat.grad + gamma * (flat.data - anchor)
        energy = nbeta * loss + gamma / 2 * ((flat.data - anchor) ** 2).sum(1)
        points.append((flat.data.clone(), drift, energy))
        score.score(loss, torch.ones(2, dtype=torch.bool))
    for (w, gw, uw), (v, gv, uv) in itertools.pairwise(points):
        forward = -((v - w + lr / 2 * gw) ** 2).sum(1) / (2 * lr)
        backward = -((w - v + lr / 2 * gv) ** 2).sum(1) / (2 * lr)
        expected.append(torch.exp(torch.clamp(backward - forward + uw - uv, max=0.0)))
    np.testing.assert_allclose(score.mean().numpy(), torch.stack(expected).double().mean(0).numpy(), rtol=1e-4)


def test_mala_acceptance_is_one_for_a_tiny_step_and_warns_for_a_huge_one():
    model, x, y = regression(1, 6, seed=3, n=512)  # full batch: no minibatch noise in the energy
    settings = SGLDSettings(localization=0.1, chains=4, draws=100, burnin=20, batch_size=512)
    tiny = estimate_llc(model, half_mse, x, y, replace(settings, lr=1e-5))
    huge = estimate_llc(model, half_mse, x, y, replace(settings, lr=2e-2))  # ε·nβ·h ≈ 1.6: stable, but coarse
    assert tiny.acceptance[0] > 0.999 and not tiny.warnings
    assert np.isfinite(huge.llc_mean[0]) and huge.acceptance[0] < 0.8
    assert [w for w in huge.warnings if w.startswith("instance 0: mean MALA acceptance") and "lower lr" in w]
    assert huge.to_frame().acceptance[0] == pytest.approx(huge.acceptance[0])


def test_too_large_step_freezes_the_chain_and_says_so():
    model, x, y = regression(1, 6, seed=6)
    result = estimate_llc(model, half_mse, x, y, SGLDSettings(lr=1.0, localization=1.0, chains=2, draws=60, burnin=0,
                                                              batch_size=512))
    assert np.isnan(result.llc_per_chain).all() and np.isnan(result.llc_mean[0])
    messages = [w for w in result.warnings if "non-finite" in w]
    assert len(messages) == 2 and all(w.startswith("instance 0: chain") for w in messages)
    assert "lower lr" in messages[0]
    assert result.to_frame()["n_warnings"].tolist() == [len(result.warnings)]


def test_diverging_instance_is_named():
    # ε(nβ·h + γ)/2 ≈ 2.1 > 2 for instance 0 (unstable, but finite over 100 steps); its inputs scaled
    # by 0.5 give instance 1 a quarter of the curvature, where the same ε is stable.
    model, x, y = regression(2, 6, seed=7, scales=[1.0, 0.5])
    result = estimate_llc(model, half_mse, x, y, SGLDSettings(lr=0.05, localization=1.0, chains=4, draws=100, burnin=0,
                                                              batch_size=512))
    assert np.isfinite(result.llc_per_chain).all()
    diverging = [w for w in result.warnings if "diverges" in w or "climbing" in w]
    assert diverging and all(w.startswith("instance 0:") for w in diverging)


def shifted(per_step: float = 0.0, per_row: float = 0.0):
    """half_mse plus `per_step` × the sampler step and `per_row` × the row (chain) index, on the
    sampling model only (init-loss calls see the 1-instance model)."""
    calls = [0]

    def loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        base = half_mse(model, x, y)
        if model.n_instances == 1:
            return base
        calls[0] += 1
        return base + per_step * calls[0] + per_row * torch.arange(model.n_instances)

    return loss


def test_climbing_and_disagreeing_chains_are_reported():
    model, x, y = regression(1, 6, seed=9)
    settings = SGLDSettings(chains=4, draws=300, **REGULAR)
    climbing = estimate_llc(model, shifted(per_step=0.01), x, y, settings)
    assert [w for w in climbing.warnings if "still climbing" in w and w.startswith("instance 0:")]
    assert not [w for w in climbing.warnings if "disagree" in w]
    apart = estimate_llc(model, shifted(per_row=1.0), x, y, settings)
    assert [w for w in apart.warnings if "chains disagree" in w and w.startswith("instance 0:")]
    assert not [w for w in apart.warnings if "climbing" in w or "diverges" in w]


def test_the_climb_that_invalidates_is_judged_by_the_callers_limits():
    model, x, y = regression(1, 6, seed=9)
    settings = SGLDSettings(chains=4, draws=300, **REGULAR)
    lenient = ValidityLimits(trend_fraction=1e6)  # a climb this steep is never seen: no chain is still climbing
    result = estimate_llc(model, shifted(per_step=0.01), x, y, settings, validity=lenient)
    assert result.validity == lenient
    assert not [w for w in result.warnings if "still climbing" in w]
    assert "climbing" not in result.to_frame().invalid[0]


def test_negative_llc_warns_that_w_star_is_not_a_minimum():
    model, x, y = regression(1, 6, seed=8)
    with torch.no_grad():
        model.w.add_(0.3)  # away from the least-squares minimum: sampling finds lower loss
    result = estimate_llc(model, half_mse, x, y, SGLDSettings(chains=2, draws=100, **REGULAR))
    assert result.llc_mean[0] < 0
    assert any(w.startswith("instance 0: mean LLC") and "local minimum" in w for w in result.warnings)


@pytest.mark.parametrize("field, value", [("lr", 0.0), ("chains", 0), ("draws", 0), ("batch_size", 0),
                                          ("nbeta", -1.0), ("localization", -1.0), ("burnin", -1),
                                          ("steps_between_draws", 0), ("init_loss_batches", 0), ("seed", 1.5)])
def test_bad_settings_raise_config_error(field, value):
    with pytest.raises(ConfigError, match=f"{field} = {value!r}"):
        SGLDSettings(**{field: value})


def test_bad_names_heads_masks_and_data_raise_config_error():
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8, d_mlp=0), 6, 5, 6, [0])
    with pytest.raises(ConfigError, match="blocks.0.attn.W_X.*valid names: embed.W_E"):
        parameter_mask(model, ["blocks.0.attn.W_X"])
    with pytest.raises(ConfigError, match="head = 2 .*heads 0..1"):
        head_mask(model, 0, 2)
    with pytest.raises(ConfigError, match="layer = 1 .*layers 0..0"):
        head_mask(model, 1, 0)
    with pytest.raises(ConfigError, match="'bogus'"):
        weight_masks(model, "all,bogus")
    tokens = torch.zeros(1, 32, 5, dtype=torch.long)
    with pytest.raises(ConfigError, match="batch_size = 64"):
        estimate_llc(model, ce_last, tokens, tokens[..., 0], SGLDSettings(batch_size=64))
    with pytest.raises(ConfigError, match="mask has shape"):
        estimate_llc(model, ce_last, tokens, tokens[..., 0], SGLDSettings(batch_size=8), mask=torch.ones(3))
    with pytest.raises(ConfigError, match="2 instances"):
        estimate_llc(replicate(model, 2), ce_last, tokens, tokens[..., 0], SGLDSettings(batch_size=8))


def test_a_compiled_sampler_gives_the_eager_numbers_to_float_rounding(recwarn):
    model, x, y = regression(2, 6, seed=5)
    settings = SGLDSettings(chains=4, draws=40, **REGULAR)
    from torch._dynamo.utils import counters

    eager = estimate_llc(model, half_mse, x, y, settings)
    graphs = counters["stats"]["unique_graphs"]
    compiled = estimate_llc(model, half_mse, x, y, settings, compile_mode="default")
    assert counters["stats"]["unique_graphs"] > graphs  # the loss went through torch.compile …
    assert not [w for w in recwarn if "compiling the" in str(w.message)]  # … and did not fall back to eager
    np.testing.assert_allclose(compiled.loss_trace, eager.loss_trace, rtol=1e-4)
    np.testing.assert_allclose(compiled.llc_mean, eager.llc_mean, rtol=1e-3)


def test_drift_reads_a_slow_climb_the_quarter_check_lets_pass():
    rng = np.random.default_rng(3)
    init, draws = 0.5, 2400
    settled = 1.0 + 0.05 * rng.standard_normal((4, draws))
    assert abs(drift(settled, init)) < 0.01
    ramp = np.broadcast_to(1.0 + np.linspace(0.0, 0.1, draws), (4, draws))
    # The last quarter sits 0.025 above the third, 4.5% of the mean rise 0.55: under trend_fraction's 10%, so the
    # chains count as settled; their halves differ by 0.05, 9.1% of λ̂.
    assert 0.025 < ValidityLimits().trend_fraction * 0.55
    assert drift(ramp, init) == pytest.approx(0.05 / 0.55, rel=1e-3)


@pytest.mark.parametrize("trace, init", [(np.ones((4, 1)), 0.5), (np.array([[1.0, np.nan]]), 0.5),
                                         (np.ones((2, 10)), 1.5), (np.ones(10), 0.5)])
def test_drift_is_nan_where_it_means_nothing(trace, init):
    assert math.isnan(drift(trace, init))


def test_the_curve_csv_adds_each_estimates_drift_and_drops_the_traces():
    ramp = [list(1.0 + np.linspace(0.0, 0.1, 100))] * 2
    curve = pd.DataFrame({"step": [1, 2], "llc_mean": [50.0, 60.0], "init_loss": [0.5, 0.5],
                          "loss_trace": [ramp, [[1.0] * 100] * 2]})
    table = pd.read_csv(io.StringIO(curve_csv(curve)))
    assert "loss_trace" not in table.columns
    assert table.llc_drift.tolist() == pytest.approx([0.05 / 0.55, 0.0], abs=2e-3)
    assert "llc_drift" not in pd.read_csv(io.StringIO(curve_csv(curve.drop(columns="loss_trace")))).columns
