"""The LLC estimator checked on models whose learning coefficient is known, and its bias at given settings.

Regular models: linear regressions y = x·W (no bias term), W of M × N, whose learning coefficient is half
their d = M·N parameters. Singular models: deep linear networks y = x·W₁·W₂⋯W_L with a teacher of rank r,
whose learning coefficient is Aoyagi's (`learning_coefficient`); their weights at w* have rank r in every
layer (the extra hidden units all zero): the most singular point of the true set, where the global value
(the smallest local one over the set) is taken to be reached. At finite nβ the chains also feel the less
singular points nearby, along the flat directions of the set that only γ holds (see `SGLDSettings`).

Data: inputs whitened so that xᵀx/n = I exactly, targets the teacher's plus Gaussian noise with its part
along the inputs removed, so that the teacher is the exact least-squares minimum of the pool (w* is a true
minimum of the sampled loss, as λ̂ assumes) and the pool loss is ½|W − W*|²_F + const in the product W.
The loss is the Gaussian negative log-likelihood with unit noise, ½|y − ŷ|² per example up to a constant,
so nβ·(E[L] − L(w*)) estimates λ with L as the per-example negative log-likelihood that n·β tempers.
The chance loss (for the basin check) is that of the zero map, ½·mean |y|².

A nonlinear member, `TanhTeacher`: a one-hidden-layer tanh network with biases (3-4-2, d = 26) whose teacher has
distinct hidden directions and unsaturated units, so the model is locally regular at w* and λ = d/2 = 13. Its w* is
the pool loss's own minimum, found from the teacher in float64 (the noise moves it off the teacher). Its Hessian
spans three decades (smallest curvatures about 0.003, largest about 3), which is what it is there for: at the
default settings (γ/nβ ≈ 0.024) several of its directions are below what the sampler can see, λ̂ reads about 10,
and the resolution check (`headway.analysis.llc.resolution`) must say so; at settings with nβ·h ≫ γ in every
direction it reads 13.

A singular member, Watanabe's `SingularTanh`: y = a·tanh(b·x) at the true a = b = 0 (noise-free targets y = 0, so
w* = 0 is the pool loss's exact minimum, L(w*) = 0). Near 0 the loss is ½·a²·mean tanh²(b·x) ≈ ½·a²b², a normal
crossing: λ = 1/2 with multiplicity 2, so λ̂ approaches 1/2 only like 1/2 − O(1/log nβ). At finite nβ and γ the
estimate's own target is exact: for fixed b the localised posterior in a is Gaussian, so
nβ·E[L] = E_b[½·nβc(b) / (nβc(b) + γ)] with c(b) = mean tanh²(b·x) and b weighted by
exp(−γb²/2)·(nβc(b) + γ)^(−1/2), a one-dimensional integral (`singular_tanh_expectation`): 0.30 at the defaults
(nβ ≈ 82, γ = 2), 0.37 at nβ = 1000, 0.42 at nβ = 10⁴ with γ = 1, on a pool of 4096. Both directions are flat at w*
(the Hessian is zero), so the resolution check sees no curved basin to speak of. The flat directions, held by γ
alone, relax in about 2/(εγ) = 1000 steps at the defaults: chains of the default 500 steps read about 0.24, 16
chains of 2000 + 2000 steps 0.28–0.33 (three sampler seeds).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import pandas as pd
import torch
from torch import Tensor, nn

from headway.analysis.llc.estimate import estimate_llc
from headway.analysis.llc.scale_reference import tempered_loss_target
from headway.analysis.llc.settings import SGLDSettings
from headway.errors import ConfigError
from headway.model.flat import FlatParameters
from headway.settings import check_int, is_integer

MIN_POOL = 4096  # examples per pool at least (and 4 batches): whitening and the noise projection need n ≫ M
# Chains per suite estimate at least: chains change only λ̂'s variance, not its expectation, so the suite samples
# with more of them than a study's few (4 at nβ 1e4 put standard errors of up to 9× the truths on the sorting plan's
# suite, the noise then read as bias); 64 cost seconds to a minute on one thread at the studies' settings.
SUITE_CHAINS = 64


def learning_coefficient(widths: tuple[int, ...], rank: int) -> float:
    """Aoyagi's learning coefficient of a deep linear network of layer widths H₁ (input), …, H_{L+1} (output)
    whose true map has rank r (Aoyagi 2024, Theorem 1, as restated by Lau et al. 2023): with Δ_s = H_s − r,
    take the ℓ + 1 smallest Δ (a set Σ with max_Σ Δ < min_{not Σ} Δ, Σ_Σ Δ ≥ ℓ·max_Σ Δ and Σ_Σ Δ < ℓ·min_{not Σ} Δ,
    ℓ ≥ 1); then with S = Σ_Σ Δ and a = S − (⌈S/ℓ⌉ − 1)·ℓ,
    λ = (−r² + r(H₁ + H_{L+1}))/2 + a(ℓ − a)/(4ℓ) − ℓ(ℓ − 1)/4·(S/ℓ)² + ½·Σ_{i<j in Σ} Δ_i·Δ_j.
    One layer (a regression) gives H₁·H₂/2; two layers give Aoyagi & Watanabe's reduced-rank regression values."""
    if len(widths) < 2 or any(not is_integer(h) or h < 1 for h in widths):
        raise ConfigError(f"widths = {widths!r} is invalid; give at least two positive integer widths "
                          "(input, …, output)")
    if not is_integer(rank) or not 0 <= rank <= min(widths):
        raise ConfigError(f"rank = {rank!r} is invalid; use an integer in [0, {min(widths)}] (the narrowest layer)")
    deltas = sorted(h - rank for h in widths)
    for size in range(2, len(deltas) + 1):
        ell, inside, outside = size - 1, deltas[:size], deltas[size:]
        total, largest = sum(inside), inside[-1]
        if outside and not (largest < outside[0] and total < ell * outside[0]):
            continue
        if total < ell * largest:
            continue
        a = total - (math.ceil(total / ell) - 1) * ell
        pairs = sum(inside[i] * inside[j] for i in range(size) for j in range(i + 1, size))
        return ((-rank * rank + rank * (widths[0] + widths[-1])) / 2 + a * (ell - a) / (4 * ell)
                - ell * (ell - 1) / 4 * (total / ell) ** 2 + pairs / 2)
    raise AssertionError(f"no bottleneck set for widths {widths} and rank {rank}; Aoyagi's theorem says one exists")


@dataclass(frozen=True)
class KnownModel:
    """A deep linear network (one layer: a linear regression) and the rank of its teacher."""

    widths: tuple[int, ...]  # input, hidden …, output
    rank: int

    @property
    def name(self) -> str:
        kind = "linear" if len(self.widths) == 2 else "deep linear"
        return f"{kind} {'×'.join(map(str, self.widths))} rank {self.rank}"

    @property
    def regular(self) -> bool:
        """A linear regression: identifiable, λ = d/2."""
        return len(self.widths) == 2

    @property
    def parameters(self) -> int:
        return sum(a * b for a, b in zip(self.widths, self.widths[1:]))

    @property
    def truth(self) -> float:
        return learning_coefficient(self.widths, self.rank)


# Regular: λ = d/2 at three sizes (d = 4, 30, 100). Singular: two layers with extra hidden units (Aoyagi &
# Watanabe's third case, full and reduced rank), two layers in the first case, three layers with extra units.
SUITE = (KnownModel((4, 1), 1), KnownModel((10, 3), 3), KnownModel((20, 5), 5),
         KnownModel((10, 5, 3), 3), KnownModel((10, 5, 3), 1), KnownModel((4, 4, 4), 1),
         KnownModel((6, 4, 4, 3), 2), KnownModel((5, 4, 3, 4), 1))


class DeepLinear(nn.Module):
    """E deep linear networks in one flat buffer (a headway-style ensemble): x [E, B, H₁] → x·W₁⋯W_L."""

    def __init__(self, layers: list[Tensor]) -> None:
        super().__init__()
        self.layers = nn.ParameterList([nn.Parameter(w.clone()) for w in layers])
        self.n_instances = layers[0].shape[0]
        self.flat = FlatParameters(self, self.n_instances)

    def forward(self, x: Tensor) -> Tensor:
        for w in self.layers:
            x = torch.bmm(x, w)
        return x


def gaussian_nll(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Per-instance mean over the batch of ½|y − ŷ|²: the unit-noise Gaussian negative log-likelihood up to a
    constant."""
    return 0.5 * (model(x) - y).pow(2).sum(dim=-1).mean(dim=1)


def known_pool(model: KnownModel, size: int, seed: int,
               device: torch.device | str = "cpu") -> tuple[DeepLinear, Tensor, Tensor]:
    """The network at w* and its pool x [1, size, H₁], y [1, size, H_{L+1}] (see the module docstring). The
    teacher's singular values are spread evenly over [1, 2], split equally over the layers (balanced
    weights); its singular vectors, the inputs and the noise come from `seed`."""
    g = torch.Generator().manual_seed(seed)
    widths, rank, depth = model.widths, model.rank, len(model.widths) - 1
    if size < 2 * widths[0]:
        raise ConfigError(f"size = {size} is too small; the pool needs at least {2 * widths[0]} examples")
    basis, _ = torch.linalg.qr(torch.randn(size, widths[0], generator=g, dtype=torch.float64))
    x = basis * math.sqrt(size)
    left, _ = torch.linalg.qr(torch.randn(widths[0], rank, generator=g, dtype=torch.float64))
    right, _ = torch.linalg.qr(torch.randn(widths[-1], rank, generator=g, dtype=torch.float64))
    singular = torch.linspace(1.0, 2.0, rank, dtype=torch.float64)  # [1.0] for rank 1
    root = torch.diag(singular ** (1.0 / depth))
    layers = []
    for i in range(depth):
        into = left if i == 0 else torch.eye(widths[i], rank, dtype=torch.float64)
        out = right if i == depth - 1 else torch.eye(widths[i + 1], rank, dtype=torch.float64)
        layers.append((into @ root @ out.T).float().unsqueeze(0).to(device))
    noise = torch.randn(size, widths[-1], generator=g, dtype=torch.float64)
    noise -= basis @ (basis.T @ noise)
    y = x @ (left @ torch.diag(singular) @ right.T) + noise
    return DeepLinear(layers), x.float().unsqueeze(0).to(device), y.float().unsqueeze(0).to(device)


@dataclass(frozen=True)
class TanhTeacher:
    """x ∈ R^inputs → W₂·tanh(W₁x + b₁) + b₂ ∈ R^outputs at a generic teacher (module docstring): λ = d/2."""

    inputs: int = 3
    hidden: int = 4
    outputs: int = 2

    @property
    def name(self) -> str:
        return f"tanh {self.inputs}-{self.hidden}-{self.outputs}"

    @property
    def parameters(self) -> int:
        return (self.inputs + 1) * self.hidden + (self.hidden + 1) * self.outputs

    @property
    def truth(self) -> float:
        return self.parameters / 2


def plain_gaussian_nll(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    """Mean over the batch of ½|y − ŷ|² for a plain module (`gaussian_nll` of one instance)."""
    return 0.5 * (model(x) - y).pow(2).sum(dim=-1).mean()


def tanh_pool(known: TanhTeacher, size: int, seed: int) -> tuple[nn.Module, Tensor, Tensor]:
    """The network at w* (float32) and its pool x [size, inputs], y [size, outputs]: inputs standard normal, targets
    the teacher's plus unit Gaussian noise; the teacher's hidden directions orthonormal (scaled 1.5), its hidden
    biases spread over [−0.5, 0.5], its output weights standard normal, all from `seed`; w* the float64 minimum of
    the pool's loss reached from the teacher by L-BFGS."""
    if known.hidden < known.inputs:
        raise ConfigError(f"hidden = {known.hidden} is too small; the teacher's hidden directions need hidden ≥ "
                          f"inputs = {known.inputs}")
    g = torch.Generator().manual_seed(seed)
    net = nn.Sequential(nn.Linear(known.inputs, known.hidden), nn.Tanh(), nn.Linear(known.hidden, known.outputs))
    net = net.double()
    with torch.no_grad():
        directions, _ = torch.linalg.qr(torch.randn(known.hidden, known.hidden, generator=g, dtype=torch.float64))
        net[0].weight.copy_(1.5 * directions[:, : known.inputs])
        net[0].bias.copy_(torch.linspace(-0.5, 0.5, known.hidden, dtype=torch.float64))
        net[2].weight.copy_(torch.randn(known.outputs, known.hidden, generator=g, dtype=torch.float64))
        net[2].bias.zero_()
        x = torch.randn(size, known.inputs, generator=g, dtype=torch.float64)
        y = net(x) + torch.randn(size, known.outputs, generator=g, dtype=torch.float64)
    fit = torch.optim.LBFGS(net.parameters(), lr=1.0, max_iter=500, tolerance_grad=1e-12, tolerance_change=1e-15,
                            history_size=50, line_search_fn="strong_wolfe")

    def closure() -> Tensor:
        fit.zero_grad()
        loss = plain_gaussian_nll(net, x, y)
        loss.backward()
        return loss

    for _ in range(5):
        fit.step(closure)
    return net.float(), x.float(), y.float()


class SingularTanh(nn.Module):
    """x ↦ a·tanh(b·x) for a batch of scalars x [B, 1], at a = b = 0 (the module docstring)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Parameter(torch.zeros(()))
        self.b = nn.Parameter(torch.zeros(()))

    def forward(self, x: Tensor) -> Tensor:
        return self.a * torch.tanh(self.b * x)


def singular_tanh_pool(size: int, seed: int) -> tuple[SingularTanh, Tensor, Tensor]:
    """The model at w* = 0 and its pool: x [size, 1] standard normal from `seed`, y = 0."""
    x = torch.randn(size, 1, generator=torch.Generator().manual_seed(seed))
    return SingularTanh(), x, torch.zeros(size, 1)


def singular_tanh_expectation(x: Tensor, nbeta: float, gamma: float, points: int = 20001) -> float:
    """nβ·E[L] under the localised tempered posterior of `SingularTanh` on the pool `x` (the module docstring's
    integral over b, on `points` nodes spanning 12 standard deviations of the localisation)."""
    if not (nbeta > 0 and gamma > 0):
        raise ConfigError(f"nbeta = {nbeta!r}, gamma = {gamma!r} are invalid; the integral needs both > 0")
    b = torch.linspace(-12 / math.sqrt(gamma), 12 / math.sqrt(gamma), points, dtype=torch.float64)
    xs = x.double().flatten()
    c = torch.stack([torch.tanh(value * xs).pow(2).mean() for value in b])
    log_weight = -gamma * b.pow(2) / 2 - 0.5 * torch.log(nbeta * c + gamma)
    weight = torch.exp(log_weight - log_weight.max())
    return float((weight * 0.5 * nbeta * c / (nbeta * c + gamma)).sum() / weight.sum())


@dataclass
class SuiteBias:
    """The estimator on the known-answer suite at one setting: one row per model."""

    table: pd.DataFrame  # model, regular, parameters, truth, estimate, se, relative_error, scale_truth, scale_se,
    #                      scale_error, acceptance, basin_fraction, warnings, invalid
    settings: dict  # the SGLD settings used (nβ resolved)

    @property
    def max_abs_relative_error(self) -> float:
        """The worst |λ̂/λ − 1| over the suite: the bias to allow for beside an estimate at these settings."""
        return float(self.table.relative_error.abs().max())

    @property
    def max_abs_scale_error(self) -> float:
        """The worst |λ̂/λ(nβ, γ) − 1| over the suite, against what λ̂ estimates at its own nβ and γ
        (`scale_reference`): the sampler's own error, without the part of the LLC these settings do not resolve, the
        bias to allow for beside an estimate read at its stated scale."""
        return float(self.table.scale_error.abs().max())

    @property
    def mean_relative_error(self) -> float:
        """The mean of λ̂/λ − 1 over the suite (signed: a shared lean of the estimator)."""
        return float(self.table.relative_error.mean())

    @property
    def max_relative_se(self) -> float:
        """The largest standard error over truth: where it rivals the errors, the suite did not resolve the bias."""
        return float((self.table.se / self.table.truth).max())

    def summary(self) -> str:
        """One line for a report, e.g. "known-answer suite (8 models): λ̂/λ − 1 from −9% to +6% (mean −1%,
        worst 9%; relative SE up to 4%); against λ at these nβ and γ from −5% to +8% (worst 8%)", with how many
        estimates were invalid (a refused choice among them)."""
        errors, invalid = self.table.relative_error, int((self.table.invalid != "").sum())
        scale = self.table.scale_error
        return (f"known-answer suite ({len(errors)} models): λ̂/λ − 1 from {errors.min():+.0%} to {errors.max():+.0%} "
                f"(mean {errors.mean():+.0%}, worst {self.max_abs_relative_error:.0%}; relative SE up to "
                f"{self.max_relative_se:.0%}); against λ at these nβ and γ from {scale.min():+.0%} to "
                f"{scale.max():+.0%} (worst {self.max_abs_scale_error:.0%})"
                + (f"; {invalid} of them invalid at these settings" if invalid else ""))


def suite_bias(settings: SGLDSettings, device: torch.device | str = "cpu", seed: int = 0,
               budget: int | None = None, min_chains: int = SUITE_CHAINS) -> SuiteBias:
    """λ̂ of every `SUITE` model at `settings` (L(w*) on the whole pool) against its known λ: the estimator's
    bias at a study's own SGLD settings, and against λ at the nβ and γ each estimate used (`scale_reference`), its
    bias as an estimate read at its stated scale. `seed` draws the pools; the sampler's seed is `settings.seed`. Each
    estimate samples at least `min_chains` chains (more than `settings.chains` when it has fewer): the bias of
    the step size, γ, nβ and steps, with the noise of a study's few chains averaged out (`SUITE_CHAINS`). The
    suite's models have unit curvature in their regular directions, so the bias measured here is the one an
    estimate at these settings carries on models of that scale, not a property of the settings alone. With a
    `budget`, each model's settings are chosen from `settings` within that many steps a chain, as a study with
    that budget chooses its own (`auto.choose_settings`): the bias of the choice, not of one setting."""
    from headway.analysis.llc.auto import choose_settings

    check_int("min_chains", min_chains, 1)
    settings = replace(settings, init_loss_batches=None, chains=max(settings.chains, min_chains))
    rows, used = [], {}
    for i, known in enumerate(SUITE):
        size = max(MIN_POOL, 4 * settings.batch_size)
        model, x, y = known_pool(known, size, seed + i, device)
        centre = [w.detach().cpu().clone() for w in model.layers]
        chance = 0.5 * y.double().pow(2).sum(dim=-1).mean().item()
        result = estimate_llc(model, gaussian_nll, x, y, settings, chance_loss=chance) if budget is None else \
            choose_settings(model, gaussian_nll, x, y, settings, max_steps=budget, chance_loss=chance).result
        frame = result.to_frame().iloc[0]
        used = result.settings if budget is None else {**settings.stored_dict(), "budget": budget}
        scale = tempered_loss_target(centre, result.settings["nbeta"],
                                     result.settings["localization"], seed=seed + i)
        rows.append({"model": known.name, "regular": known.regular, "parameters": known.parameters,
                     "truth": known.truth, "estimate": frame.llc_mean, "se": frame.llc_se,
                     "relative_error": frame.llc_mean / known.truth - 1, "scale_truth": scale.value,
                     "scale_se": scale.se, "scale_error": frame.llc_mean / scale.value - 1,
                     "acceptance": frame.acceptance,
                     "basin_fraction": frame.basin_fraction, "warnings": frame.warnings, "invalid": frame.invalid})
    return SuiteBias(pd.DataFrame(rows), used)
