"""What λ̂ estimates at finite nβ and γ, sampled exactly on the known-answer suite's deep linear members: the
localised tempered posterior's nβ·E[L(w) − L(w*)], the target an estimate read at its stated scale has (as
devinterp's and the papers' are), which the LLC itself is only the nβ → ∞, γ → 0 limit of.

The suite's pools are whitened (xᵀx/n = I) with noise orthogonal to the inputs, so the pool loss is
½|W₁⋯W_L − W₁*⋯W_L*|²_F + L(w*) in the product of the layers (`known_answers`): the reference samples that closed form
in float64, with no minibatches and its exact gradient, by the Metropolis-adjusted Langevin algorithm (MALA), whose accept step makes it exact
for any step size; the step is adapted to a 0.574 acceptance during the burn-in and then fixed. For a linear regression
(one layer) the posterior is Gaussian and the target is d/2·nβ/(nβ + γ), which the tests check the sampler against.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.settings import check_int

TARGET_ACCEPTANCE = 0.574  # MALA's optimal acceptance in high dimension (Roberts & Rosenthal 1998)
ADAPT_EVERY = 50  # burn-in steps between step-size adjustments
CURVATURE = 4.0  # the largest curvature of the suite's loss in one layer's weights (teacher singular values ≤ 2)
RELAXATIONS = 6.0  # burn-in in units of the slowest direction's time (held by γ alone); as many draws follow
MIN_BURNIN, MAX_BURNIN = 500, 20_000


@dataclass(frozen=True)
class ScaleReference:
    """nβ·E[L − L(w*)] under the localised tempered posterior (`value`), its Monte Carlo standard error over
    chains, the MALA acceptance during the draws, and the steps taken."""

    value: float
    se: float
    acceptance: float
    burnin: int
    draws: int


def tempered_loss_target(layers: list[Tensor], nbeta: float, localization: float, chains: int = 64,
                         seed: int = 0) -> ScaleReference:
    """The reference for a deep linear network at w* = `layers` (each [1, Hᵢ, Hᵢ₊₁] or [Hᵢ, Hᵢ₊₁]) at inverse
    temperature `nbeta` and localisation γ = `localization` (module docstring), from `chains` MALA chains seeded
    with `seed`. Burn-in and draws grow with the conditioning (nβ·CURVATURE + γ)/γ, so that directions held by γ
    alone relax."""
    if not (nbeta > 0 and localization > 0):
        raise ConfigError(f"nbeta = {nbeta!r}, localization = {localization!r} are invalid; the reference needs "
                          "both > 0 (with γ = 0 the flat directions of a singular model have no stationary law)")
    check_int("chains", chains, 2)  # the standard error is the chains' spread
    g = torch.Generator().manual_seed(seed)
    centre = [w.detach().double().reshape(w.shape[-2:]) for w in layers]
    product = _product([w.unsqueeze(0) for w in centre])
    w = [c.expand(chains, *c.shape).clone() for c in centre]

    conditioning = (nbeta * CURVATURE + localization) / localization
    burnin = int(min(MAX_BURNIN, max(MIN_BURNIN, RELAXATIONS * 2 * conditioning)))
    draws = burnin
    step = 1.0 / (nbeta * CURVATURE + localization)
    energy, loss, grad = _energy(w, centre, product, nbeta, localization)
    sums = torch.zeros(chains, dtype=torch.float64)
    accepted_draws, accepted_window = 0.0, 0.0
    for t in range(burnin + draws):
        noise = [torch.randn(x.shape, generator=g, dtype=torch.float64) for x in w]
        proposal = [x - 0.5 * step * d + math.sqrt(step) * z for x, d, z in zip(w, grad, noise)]
        p_energy, p_loss, p_grad = _energy(proposal, centre, product, nbeta, localization)
        forward = sum(z.pow(2).sum(dim=(1, 2)) for z in noise) / 2
        backward = sum((x - y + 0.5 * step * d).pow(2).sum(dim=(1, 2))
                       for x, y, d in zip(w, proposal, p_grad)) / (2 * step)
        log_ratio = energy - p_energy + forward - backward
        accept = torch.log(torch.rand(chains, generator=g, dtype=torch.float64)) < log_ratio
        keep = accept.view(-1, 1, 1)
        w = [torch.where(keep, y, x) for x, y in zip(w, proposal)]
        grad = [torch.where(keep, y, x) for x, y in zip(grad, p_grad)]
        energy, loss = torch.where(accept, p_energy, energy), torch.where(accept, p_loss, loss)
        rate = accept.double().mean().item()
        if t < burnin:
            accepted_window += rate
            if (t + 1) % ADAPT_EVERY == 0:
                step *= math.exp(2.0 * (accepted_window / ADAPT_EVERY - TARGET_ACCEPTANCE))
                accepted_window = 0.0
        else:
            sums += nbeta * loss
            accepted_draws += rate
    means = sums / draws
    return ScaleReference(float(means.mean()), float(means.std() / math.sqrt(chains)), accepted_draws / draws,
                          burnin, draws)


def _energy(ws: list[Tensor], centre: list[Tensor], product: Tensor, nbeta: float,
            localization: float) -> tuple[Tensor, Tensor, list[Tensor]]:
    """Per chain: the energy nβ·L + γ/2·|w − w*|², the loss L − L(w*) = ½|W₁⋯W_L − W*|²_F, and the energy's gradient
    in each layer (Wᵢ's is (W₁⋯Wᵢ₋₁)ᵀ·nβ·residual·(Wᵢ₊₁⋯W_L)ᵀ + γ·(Wᵢ − Wᵢ*))."""
    prefix: list[Tensor | None] = [None] * len(ws)  # W₁⋯W_{i−1} before layer i
    suffix: list[Tensor | None] = [None] * len(ws)  # W_{i+1}⋯W_L after it
    for i in range(1, len(ws)):
        prefix[i] = ws[0] if i == 1 else torch.bmm(prefix[i - 1], ws[i - 1])
    for i in range(len(ws) - 2, -1, -1):
        suffix[i] = ws[-1] if i == len(ws) - 2 else torch.bmm(ws[i + 1], suffix[i + 1])
    residual = (torch.bmm(prefix[-1], ws[-1]) if len(ws) > 1 else ws[0]) - product
    loss = 0.5 * residual.pow(2).sum(dim=(1, 2))
    energy = nbeta * loss + sum(0.5 * localization * (x - c).pow(2).sum(dim=(1, 2)) for x, c in zip(ws, centre))
    grads = []
    for i, (x, c) in enumerate(zip(ws, centre)):
        through = residual if suffix[i] is None else torch.bmm(residual, suffix[i].transpose(1, 2))
        through = through if prefix[i] is None else torch.bmm(prefix[i].transpose(1, 2), through)
        grads.append(nbeta * through + localization * (x - c))
    return energy, loss, grads


def _product(layers: list[Tensor]) -> Tensor:
    """W₁⋯W_L per chain: layers [C, Hᵢ, Hᵢ₊₁] → [C, H₁, H_{L+1}]."""
    out = layers[0]
    for w in layers[1:]:
        out = torch.bmm(out, w)
    return out
