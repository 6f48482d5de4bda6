"""The LLC of a plain `nn.Module` (one headway did not build): chains batched with torch.func, the same
numbers as the ensemble path, d/2 for a regular model, agreement with devinterp 1.x, masks, bad input."""

from __future__ import annotations

import math
import warnings
from dataclasses import replace

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from test_llc import REGULAR, Single, TensorPool, ce_last, trained_transformer
from torch import nn

from headway.analysis.llc import SGLDSettings, estimate_llc, head_mask, parameter_mask, sgld_step, weight_masks
from headway.analysis.llc.module_ensemble import ModuleEnsemble, ensemble_loss
from headway.errors import ConfigError


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


def mean_ce(model, x, y):
    return F.cross_entropy(model(x), y)


def mlp_classifier(seed: int = 0, n: int = 2048):
    """A small tanh MLP trained near a minimum of a 3-class problem with 20% label noise, and its pool."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    clean = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    y = torch.where(torch.rand(n, generator=g) < 0.8, clean, torch.randint(0, 3, (n,), generator=g))
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    with torch.no_grad():
        for param in model.parameters():
            param.copy_(torch.randn(param.shape, generator=g) * 0.5)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(600):
        index = torch.randint(0, n, (128,), generator=g)
        optimiser.zero_grad()
        mean_ce(model, x[index], y[index]).backward()
        optimiser.step()
    return model, x, y


class EncoderClassifier(nn.Module):
    """torch's own nn.TransformerEncoder (not headway's attention) classifying a sequence from its last
    position."""

    def __init__(self, vocab: int = 6, d_model: int = 8, ctx: int = 5) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d_model)
        self.pos = nn.Parameter(torch.zeros(ctx, d_model))
        layer = nn.TransformerEncoderLayer(d_model, 2, 16, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens) + self.pos)[:, -1])


def encoder_classifier(seed: int = 0, n: int = 1024):
    """An EncoderClassifier (eval mode) trained near a minimum of copy-the-first-token with 20% label
    noise, and its pool."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 6, (n, 5), generator=g)
    y = torch.where(torch.rand(n, generator=g) < 0.8, x[:, 0], torch.randint(0, 6, (n,), generator=g))
    with torch.random.fork_rng():  # torch's initialisers draw from the global RNG
        torch.manual_seed(seed)
        model = EncoderClassifier()
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(400):
        index = torch.randint(0, n, (64,), generator=g)
        optimiser.zero_grad()
        mean_ce(model, x[index], y[index]).backward()
        optimiser.step()
    return model.eval(), x, y


def test_a_plain_module_gives_the_ensemble_paths_numbers():
    """The same weights as a headway ensemble and as a plain module: equal losses and estimates."""
    model, tokens, targets = trained_transformer()
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=3, draws=30, burnin=10, batch_size=64)
    ensemble = estimate_llc(model, ce_last, tokens, targets, settings)
    plain = estimate_llc(Single(model), mean_ce, tokens[0], targets[0], settings)
    np.testing.assert_allclose(plain.init_loss, ensemble.init_loss, rtol=1e-6)
    np.testing.assert_allclose(plain.loss_trace, ensemble.loss_trace, rtol=0, atol=1e-5)
    np.testing.assert_allclose(plain.llc_per_chain, ensemble.llc_per_chain, rtol=1e-5)
    assert plain.settings == ensemble.settings


def test_attention_under_vmap_is_batched_without_torchs_per_copy_fallback():
    """The fused CPU attention kernel has no vmap batching rule: torch would call it once per chain with a
    "performance drop" warning; the copies run attention as its math instead, with the same numbers."""
    model, tokens, targets = trained_transformer()
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=3, draws=5, burnin=0, batch_size=64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        estimate_llc(Single(model), mean_ce, tokens[0], targets[0], settings)
    assert not [w for w in caught if "batching rule" in str(w.message)]


def test_a_devinterp_evaluate_may_use_the_modules_attributes_and_submodules():
    """devinterp hands `evaluate` the module: a loss that indexes a holder or reads a weight gets the chain's."""
    model, x, y = mlp_classifier()
    holder = torch.nn.ModuleDict({"one": model})
    settings = SGLDSettings(lr=1e-3, chains=2, draws=20, burnin=0, batch_size=64, seed=3)
    plain = estimate_llc(model, mean_ce, x, y, settings)
    held = estimate_llc(holder, lambda m, batch: mean_ce(m["one"], batch[0], batch[1]), x, y, settings)
    np.testing.assert_allclose(held.loss_trace, plain.loss_trace, rtol=1e-6)
    first = next(iter(model.parameters()))  # a penalty read off a parameter moves with the chain, not w*
    decayed = estimate_llc(model, lambda m, batch: mean_ce(m, *batch) + next(iter(m.parameters())).pow(2).sum(),
                           x, y, settings)
    penalty = first.detach().pow(2).sum().item()
    assert not np.allclose(decayed.loss_trace - penalty, plain.loss_trace, atol=1e-6)
    np.testing.assert_allclose(decayed.init_loss, plain.init_loss + penalty, rtol=1e-5)


def test_the_docs_devinterp_recipe_for_a_headway_model_runs_as_written():
    """docs/api.md: a holder of one headway instance and an evaluate that indexes it give the ensemble's numbers."""
    one, tokens, targets = trained_transformer()  # an E = 1 ensemble, as load_model(run_dir, instances=i) gives
    holder = torch.nn.ModuleDict({"one": one})
    evaluate = lambda m, batch: ce_last(m["one"], batch[0][None], batch[1][None])[0]  # noqa: E731 - as documented
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=2, draws=20, burnin=5, batch_size=64)
    held = estimate_llc(holder, evaluate, tokens[0], targets[0], settings)
    alone = estimate_llc(one, ce_last, tokens[:1], targets[:1], settings)
    np.testing.assert_allclose(held.init_loss, alone.init_loss, rtol=1e-6)
    np.testing.assert_allclose(held.loss_trace, alone.loss_trace, rtol=0, atol=1e-5)


def test_same_seed_same_numbers_and_the_module_is_untouched():
    model, x, y = mlp_classifier()
    before = [p.detach().clone() for p in model.parameters()]
    settings = SGLDSettings(lr=1e-3, chains=2, draws=20, burnin=0, batch_size=64, seed=3)
    first, again = (estimate_llc(model, mean_ce, x, y, settings) for _ in range(2))
    np.testing.assert_array_equal(first.loss_trace, again.loss_trace)
    other = estimate_llc(model, mean_ce, x, y, replace(settings, seed=4))
    assert not np.array_equal(first.loss_trace, other.loss_trace)
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


@pytest.mark.slow
def test_a_regular_plain_model_has_llc_half_its_dimension():
    """y = x·w + noise with w ∈ R^d, as nn.Linear: λ = d/2 for this regular model."""
    d = 6
    g = torch.Generator().manual_seed(11)
    x = torch.randn(16 * 128, d, generator=g)
    y = x @ torch.randn(d, generator=g) + torch.randn(len(x), generator=g)
    model = nn.Linear(d, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_((torch.linalg.pinv(x) @ y).unsqueeze(0))
    result = estimate_llc(model, lambda m, xb, yb: 0.5 * ((m(xb)[:, 0] - yb) ** 2).mean(), x, y,
                          SGLDSettings(**REGULAR, chains=16, draws=400))
    se = result.llc_std[0] / math.sqrt(16)
    assert abs(result.llc_mean[0] - d / 2) <= max(4 * se, 0.1 * d / 2), (result.llc_mean, se)


@pytest.mark.slow
@pytest.mark.parametrize("build", [mlp_classifier, encoder_classifier])
def test_agrees_with_devinterp_on_a_model_headway_did_not_build(build):
    """An nn.Sequential MLP and an nn.TransformerEncoder classifier at equal settings (ε, γ, nβ, chains,
    draws, burn-in, batch, L(w*)): the means of headway and devinterp 1.x agree within the chains' spread
    (three standard errors of the difference of two means of 8 independent chains)."""
    summary = pytest.importorskip("devinterp.slt.sampler").estimate_learning_coeff_with_summary
    model, x, y = build()
    chains, draws, burnin, batch = 8, 150, 50, 64
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=chains, draws=draws, burnin=burnin,
                            batch_size=batch, init_loss_batches=16, init_batch_size=batch)  # L(w*) as when measured
    ours = estimate_llc(model, mean_ce, x, y, settings)
    loader = torch.utils.data.DataLoader(TensorPool(x, y), batch_size=batch, shuffle=True,
                                         collate_fn=lambda pair: pair)
    with warnings.catch_warnings(), torch.random.fork_rng():  # devinterp seeds the global RNG
        warnings.simplefilter("ignore")
        theirs = summary(model, loader, evaluate=lambda m, b: mean_ce(m, b[0], b[1]),
                         optimizer_kwargs={"lr": 1e-3, "localization": 100.0, "nbeta": ours.settings["nbeta"]},
                         num_draws=draws, num_chains=chains, num_burnin_steps=burnin,
                         init_loss=float(ours.init_loss[0]), seed=0, verbose=False)
    gap = abs(ours.llc_mean[0] - theirs["llc/mean"])
    print(f"headway {ours.llc_mean[0]:.3f} ± {ours.llc_std[0]:.3f}, devinterp {theirs['llc/mean']:.3f} ± "
          f"{theirs['llc/std']:.3f} (chain std)")
    assert ours.llc_mean[0] > 0.5 and theirs["llc/mean"] > 0.5
    assert gap <= 3 * math.hypot(ours.llc_std[0], theirs["llc/std"]) / math.sqrt(chains)


def test_a_mask_moves_only_its_parameters():
    model, x, y = mlp_classifier()
    mask = parameter_mask(model, ["0.weight"])
    assert mask.sum() == 4 * 8 and mask[: 4 * 8].all()  # named_parameters order: 0.weight first
    copies = ModuleEnsemble.wrap(model, mean_ce).replicated(3)
    anchor = copies.flat.data.detach().clone()
    g = torch.Generator().manual_seed(0)
    for _ in range(5):
        copies.flat.zero_grad()
        ensemble_loss(copies, x[:192].view(3, 64, 4), y[:192].view(3, 64)).sum().backward()
        sgld_step(copies.flat, anchor, 1e-3, 10.0, 100.0, g, mask=mask)
    moved = copies.flat.data.detach() != anchor
    assert moved[:, mask == 1].all() and not moved[:, mask == 0].any()


@pytest.mark.slow
def test_restricted_and_frozen_coordinates_of_a_plain_module_do_not_count():
    """y = x·w + noise, w ∈ R^6: an element mask freeing k of the weights gives λ = k/2, and a frozen
    parameter (requires_grad=False) stays put exactly as if masked out."""
    d, k = 6, 2
    g = torch.Generator().manual_seed(12)
    x = torch.randn(16 * 128, d, generator=g)
    y = x @ torch.randn(d, generator=g) + torch.randn(len(x), generator=g)
    model = nn.Linear(d, 1)
    with torch.no_grad():
        model.weight.copy_((torch.linalg.pinv(x) @ y).unsqueeze(0))
        model.bias.zero_()

    def loss(m, xb, yb):
        return 0.5 * ((m(xb)[:, 0] - yb) ** 2).mean()

    free = torch.zeros(1, d, dtype=torch.bool)
    free[0, :k] = True
    mask = parameter_mask(model, {"weight": free})
    assert mask.tolist() == [1.0] * k + [0.0] * (d - k) + [0.0]  # weight then bias, by named_parameters
    settings = SGLDSettings(**REGULAR, chains=16, draws=400)
    restricted = estimate_llc(model, loss, x, y, settings, mask=mask)
    se = restricted.llc_std[0] / math.sqrt(16)
    assert abs(restricted.llc_mean[0] - k / 2) <= max(4 * se, 0.15 * k / 2), (restricted.llc_mean, se)
    short = SGLDSettings(**{**REGULAR, "burnin": 5}, chains=2, draws=20)
    masked = estimate_llc(model, loss, x, y, short, mask=parameter_mask(model, ["weight"]))
    model.bias.requires_grad_(False)
    frozen = estimate_llc(model, loss, x, y, short)
    np.testing.assert_array_equal(frozen.loss_trace, masked.loss_trace)


class TransformerLensNamed(nn.Module):
    """Parameters with TransformerLens names and shapes (as in a HookedTransformer), no instance axis."""

    def __init__(self, layers: int = 2, heads: int = 3, d_model: int = 6, d_head: int = 2) -> None:
        super().__init__()
        self.embed = nn.Module()
        self.embed.W_E = nn.Parameter(torch.randn(5, d_model))
        self.pos_embed = nn.Module()
        self.pos_embed.W_pos = nn.Parameter(torch.randn(4, d_model))
        self.blocks = nn.ModuleList()
        for _ in range(layers):
            block, attn = nn.Module(), nn.Module()
            for name in ("W_Q", "W_K", "W_V"):
                setattr(attn, name, nn.Parameter(torch.randn(heads, d_model, d_head)))
                setattr(attn, name.replace("W", "b"), nn.Parameter(torch.randn(heads, d_head)))
            attn.W_O = nn.Parameter(torch.randn(heads, d_head, d_model))
            attn.b_O = nn.Parameter(torch.randn(d_model))
            block.attn = attn
            self.blocks.append(block)


def test_per_head_masks_work_on_a_plain_module_with_transformer_lens_names():
    model = TransformerLensNamed()
    masks = weight_masks(model, "all,heads,embed")
    assert list(masks) == ["all", *(f"L{layer}H{h}" for layer in range(2) for h in range(3)), "embed"]
    per_head = 3 * (6 * 2 + 2) + 2 * 6  # W_Q, W_K, W_V with biases, and W_O
    assert all(masks[f"L{layer}H{h}"].sum() == per_head for layer in range(2) for h in range(3))
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    w_q = model.blocks[1].attn.W_Q.detach()
    picked = flat[head_mask(model, 1, 2) == 1]
    assert any(torch.equal(picked[i : i + 12], w_q[2].reshape(-1)) for i in range(len(picked) - 11))
    overlap = sum(masks[f"L{layer}H{h}"] for layer in range(2) for h in range(3))
    assert overlap.max() == 1  # heads own disjoint coordinates


def test_bad_plain_modules_and_losses_are_named():
    model, x, y = mlp_classifier(n=256)
    settings = SGLDSettings(chains=2, draws=3, burnin=0, batch_size=32)
    with pytest.raises(ConfigError, match="must return the batch's mean loss, a scalar"):
        estimate_llc(model, lambda m, xb, yb: F.cross_entropy(m(xb), yb, reduction="none"), x, y, settings)
    with pytest.raises(ConfigError, match="has no parameters"):
        estimate_llc(nn.Identity(), mean_ce, x, y, settings)
    with pytest.raises(ConfigError, match="cannot run as a batch of copies under torch.func.vmap .*item"):
        estimate_llc(model, lambda m, xb, yb: mean_ce(m, xb, yb) if mean_ce(m, xb, yb).item() > 0 else 0, x, y,
                     settings)
    with pytest.raises(ConfigError, match="evaluate.model, batch. returned str; return the loss"):
        estimate_llc(model, lambda m, batch: "loss", x, y, settings)
    with pytest.raises(ConfigError, match="mixes parameter dtypes"):
        estimate_llc(nn.Sequential(nn.Linear(4, 3), nn.Linear(3, 3).double()), mean_ce, x, y, settings)
    with pytest.raises(ConfigError, match="tokens hold 256 examples per instance but targets 100"):
        estimate_llc(model, mean_ce, x, y[:100], settings)
    with pytest.raises(ConfigError, match="has no attention weights named blocks.L.attn.W_Q"):
        weight_masks(model, "heads")
    with pytest.raises(ConfigError, match=r"unknown parameter\(s\) 9.weight; valid names: 0.weight"):
        parameter_mask(model, ["9.weight"])
    with pytest.raises(ConfigError, match=r"the mask of 0.bias has shape \(4,\); it must be the parameter's \(8,\)"):
        parameter_mask(model, {"0.bias": torch.ones(4)})
    with pytest.raises(ConfigError, match=r"fails on a batch of inputs \(64, 5\) and targets \(64,\): RuntimeError: "
                                          "mat1 and mat2"):  # L(w*)'s first batch: batch_size × chains
        estimate_llc(model, mean_ce, torch.randn(256, 5), y, settings)
    with pytest.raises(ConfigError, match="fails on a batch .*TypeError: .*positional argument"):
        estimate_llc(model, lambda m: mean_ce(m, x, y), x, y, settings)
    with pytest.raises(ConfigError, match=r"tokens is \(\); it must be a tensor \[examples, ...\]"):
        estimate_llc(model, mean_ce, torch.tensor(1.0), y, settings)
    frozen = nn.Linear(4, 3).requires_grad_(False)
    with pytest.raises(ConfigError, match="every parameter of Linear has requires_grad=False"):
        estimate_llc(frozen, mean_ce, x, y, settings)


def dropout_classifier(seed: int = 0, n: int = 2048):
    """A tanh MLP with dropout 0.5 trained (in train mode, as it stays) on the noisy 3-class problem, and its pool."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    clean = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    y = torch.where(torch.rand(n, generator=g) < 0.8, clean, torch.randint(0, 3, (n,), generator=g))
    with torch.random.fork_rng():  # initialisers and dropout draw from the global RNG
        torch.manual_seed(seed)
        model = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Dropout(0.5), nn.Linear(32, 3))
        optimiser = torch.optim.Adam(model.parameters(), lr=1e-2)
        for _ in range(600):
            index = torch.randint(0, n, (128,), generator=g)
            optimiser.zero_grad()
            mean_ce(model, x[index], y[index]).backward()
            optimiser.step()
    return model, x, y


def test_train_mode_is_devinterps_on_a_dropout_model():
    """devinterp samples in train mode (dropout on) with `evaluate(model, batch)`: headway takes that evaluate
    as it is, and with train_mode=True agrees with devinterp 1.3.2 within the chains' spread (measured: 1.27 ±
    0.10 against 1.27 ± 0.13, chain std of 8 chains); in eval mode the same model reads 0.79 ± 0.10."""
    summary = pytest.importorskip("devinterp.slt.sampler").estimate_learning_coeff_with_summary
    model, x, y = dropout_classifier()
    evaluate = lambda m, batch: (mean_ce(m, batch[0], batch[1]), {"output": None})  # noqa: E731 - devinterp's kind
    chains, draws, burnin, batch = 8, 150, 50, 64
    settings = SGLDSettings(lr=1e-3, localization=100.0, chains=chains, draws=draws, burnin=burnin,
                            batch_size=batch, init_loss_batches=16, init_batch_size=batch)
    trained = estimate_llc(model, evaluate, x, y, settings, train_mode=True)
    evaluated = estimate_llc(model, evaluate, x, y, settings, train_mode=False)
    assert model.training and model[2].training  # its mode as it was
    again = estimate_llc(model, mean_ce, x, y, settings, train_mode=True)  # the same dropout masks: same seed
    np.testing.assert_array_equal(again.loss_trace, trained.loss_trace)
    loader = torch.utils.data.DataLoader(TensorPool(x, y), batch_size=batch, shuffle=True,
                                         collate_fn=lambda pair: pair)
    with warnings.catch_warnings(), torch.random.fork_rng():
        warnings.simplefilter("ignore")
        theirs = summary(model, loader, evaluate=evaluate,
                         optimizer_kwargs={"lr": 1e-3, "localization": 100.0, "nbeta": trained.settings["nbeta"]},
                         num_draws=draws, num_chains=chains, num_burnin_steps=burnin,
                         init_loss=float(trained.init_loss[0]), seed=0, verbose=False)
    spread = 3 * math.hypot(trained.llc_std[0], theirs["llc/std"]) / math.sqrt(chains)
    print(f"train mode {trained.llc_mean[0]:.2f} ± {trained.llc_std[0]:.2f}, eval mode {evaluated.llc_mean[0]:.2f} ± "
          f"{evaluated.llc_std[0]:.2f}, devinterp {theirs['llc/mean']:.2f} ± {theirs['llc/std']:.2f}")
    assert abs(trained.llc_mean[0] - theirs["llc/mean"]) <= spread
    assert theirs["llc/mean"] - evaluated.llc_mean[0] > spread  # eval mode is another estimate
    assert evaluated.init_loss[0] < trained.init_loss[0]  # L(w*) without dropout's noise


def test_batch_norm_in_train_mode_uses_batch_statistics_and_keeps_the_modules():
    _, x, y = mlp_classifier(n=256)
    settings = SGLDSettings(chains=2, draws=3, burnin=0, batch_size=32)
    batch_norm = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 3))
    statistics = [b.clone() for b in batch_norm.buffers()]
    trained = estimate_llc(batch_norm, mean_ce, x, y, settings)  # its own mode: train, as devinterp samples
    evaluated = estimate_llc(batch_norm, mean_ce, x, y, settings, train_mode=False)  # reads the statistics
    assert all(torch.equal(a, b) for a, b in zip(statistics, batch_norm.buffers(), strict=True))
    assert batch_norm.training and trained.init_loss[0] != evaluated.init_loss[0]
