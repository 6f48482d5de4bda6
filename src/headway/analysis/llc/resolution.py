"""What an LLC estimate's settings can resolve: the quadratic (Laplace) prediction of λ̂ from the Hessian of the
pool loss at w*, beside its limit as the localisation γ → 0, and the directions the settings cannot see.

SGLD samples the localised tempered posterior ∝ exp(−nβ·L(w) − γ/2·|w − w*|²). Where L is quadratic around w*
with Hessian eigenvalues hᵢ, that posterior is Gaussian and nβ·(E[L] − L(w*)) = ½·Σᵢ nβhᵢ / (nβhᵢ + γ): a
direction whose curvature is well above γ/nβ counts ½, one below it almost nothing. The limit as γ → 0 is half
the number of directions of positive curvature, which for a locally regular model is its learning coefficient
d/2. When the prediction at the estimate's own nβ and γ falls short of that limit by more than the estimator's
accepted error, the settings cannot see part of the basin: λ̂ is then a lower bound (resolution-limited), however
well the chains mixed. (A singular model's flat directions have zero curvature and no quadratic term; they count in
neither number, so the check speaks only of the curved part of the basin.)

The spectrum is exact for models of up to `EXACT_MAX` parameters (the Hessian assembled from one Hessian-vector
product per parameter), and for larger ones comes from stochastic Lanczos quadrature (Rademacher probes, each a
Lanczos run of Hessian-vector products, whose Ritz values and weights estimate the spectral sums).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from headway.analysis.llc.module_ensemble import ModuleLossFn
from headway.analysis.llc.prepare import prepared
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta
from headway.errors import ConfigError

EXACT_MAX = 512  # parameters up to which the Hessian is assembled exactly
FLAT = 1e-6  # eigenvalues within this share of the largest are zero: a flat direction (float32 Hessian-vector
# products leave |h| ≈ 1e-8 of the largest on exactly flat directions of the known-answer suite)
HVP_ROWS = 4096  # pool rows per Hessian-vector product pass (the pool's mean is the sum of its chunks')
# Pool rows the studies measure the Hessian on (`estimate_llc(resolution_rows=...)`; by default the whole pool): a
# larger pool is subsampled (seeded), so that the check's cost does not grow with the pool: PROBES × STEPS products of
# 256 rows (on 4096 rows and 4 × 24 products the sorting study's four traced 49k-parameter models took over 4
# minutes a checkpoint on two cores). Its noise is that of the curvature's estimate from 256 examples: a rough
# spectrum, enough for the orders of magnitude of γ/nβ against the curvature that the check is about
RESOLUTION_ROWS = 256
PROBES, STEPS = 4, 16  # stochastic Lanczos: Rademacher probes, and Lanczos steps of each


@dataclass(frozen=True)
class Resolution:
    """The Hessian's verdict on one estimate's settings, one entry per instance ([E] arrays)."""

    prediction: np.ndarray  # ½·Σ nβh/(nβh + γ) over the curved directions: what λ̂ should read at these settings
    limit: np.ndarray  # ½ × the curved directions: the prediction as γ → 0
    unresolved: np.ndarray  # curved directions with h < γ/nβ (counting less than ¼ each)
    negative: np.ndarray  # directions of negative curvature beyond the flat share: w* is no minimum along them
    directions: int  # the parameters (masked coordinates) the spectrum is over
    method: str  # "exact" or "lanczos"

    @property
    def shortfall(self) -> np.ndarray:
        """1 − prediction / limit: the share of the curved basin the settings cannot see (NaN with no curvature)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.limit > 0, 1.0 - self.prediction / self.limit, np.nan)

    def to_frame(self) -> pd.DataFrame:
        """One row per instance: quadratic_llc, quadratic_limit, unresolved_directions, negative_directions,
        shortfall, spectrum (the method)."""
        return pd.DataFrame({"instance": np.arange(len(self.prediction)), "quadratic_llc": self.prediction,
                             "quadratic_limit": self.limit, "unresolved_directions": self.unresolved,
                             "negative_directions": self.negative, "shortfall": self.shortfall,
                             "spectrum": self.method})


def hessian_operator(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                     settings: SGLDSettings, mask: Tensor | None = None, rows: int | None = None
                     ) -> tuple[Callable[[Tensor], Tensor], int, int, Tensor | None]:
    """(v ↦ H·v, E, P, mask): the Hessian of every instance's pool loss at its current weights (w*), applied to a
    batch of vectors v [E, P] (each instance's Hessian to its own row, zero outside the [P] `mask` it returns:
    the one given, times a plain module's trainable parameters; None for all), the instances and the parameters.
    The model and pool are taken as `estimate_llc` takes them (fp32); with `rows` below the pool's size, the loss is
    that of `rows` pool rows drawn without replacement (seeded by `settings.seed`, the same rows of every instance)."""
    model, loss_fn, tokens, targets, trainable = prepared(model, loss_fn, tokens, targets, settings, mask, "fp32")
    if rows is not None and rows < tokens.shape[1]:
        keep_rows = torch.randperm(tokens.shape[1], generator=torch.Generator().manual_seed(settings.seed))[:rows]
        tokens, targets = tokens[:, keep_rows.to(tokens.device)], targets[:, keep_rows.to(targets.device)]
    if trainable is not None:
        mask = trainable if mask is None else mask.to(trainable) * trainable
    flat = model.flat
    stacked = flat.data.requires_grad  # a wrapped plain module's weights are one leaf; an ensemble's are views
    named = dict(model.named_parameters())
    leaves = [flat.data] if stacked else [named[name] for name in flat.names]
    e, p = flat.data.shape
    keep = None if mask is None else mask.to(flat.data.device, flat.data.dtype)
    n = tokens.shape[1]

    def joined(parts: tuple[Tensor, ...]) -> Tensor:
        return parts[0] if stacked else torch.cat([part.reshape(e, -1) for part in parts], dim=1)

    def split(v: Tensor) -> list[Tensor]:
        return [v] if stacked else [v[:, o : o + s].view(shape) for o, s, shape in
                                    zip(flat.offsets, flat.sizes, flat.shapes)]

    def apply(v: Tensor) -> Tensor:
        v = v.to(flat.data) if keep is None else v.to(flat.data) * keep
        out = torch.zeros_like(v)
        with sdpa_kernel(SDPBackend.MATH):  # the only fused-attention backend with a second derivative
            for start in range(0, n, HVP_ROWS):
                chunk = slice(start, min(n, start + HVP_ROWS))
                rows = chunk.stop - chunk.start
                loss = loss_fn(model, tokens[:, chunk], targets[:, chunk])
                grads = torch.autograd.grad(loss.sum(), leaves, create_graph=True)
                inner = sum((g * part).sum() for g, part in zip(grads, split(v)))
                out += joined(torch.autograd.grad(inner, leaves)) * (rows / n)
        return out if keep is None else out * keep

    return apply, e, p, None if keep is None else keep.cpu()


def exact_spectrum(apply: Callable[[Tensor], Tensor], instances: int, parameters: int,
                   mask: Tensor | None = None) -> np.ndarray:
    """Every eigenvalue [E, P'] of each instance's Hessian over its P' masked coordinates (of `parameters`), from
    one Hessian-vector product per coordinate, symmetrised, in float64."""
    columns = list(range(parameters)) if mask is None else torch.nonzero(mask).flatten().tolist()
    hessian = torch.empty(instances, len(columns), len(columns), dtype=torch.float64)
    for j, column in enumerate(columns):
        v = torch.zeros(instances, parameters)
        v[:, column] = 1.0
        hessian[:, :, j] = apply(v)[:, columns].double().cpu()
    return torch.linalg.eigvalsh(0.5 * (hessian + hessian.transpose(1, 2))).numpy()


def lanczos_nodes(apply: Callable[[Tensor], Tensor], instances: int, parameters: int, probes: int, steps: int,
                  seed: int, mask: Tensor | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Stochastic Lanczos quadrature: Ritz values and weights [E, probes, steps] such that for a function f of
    the eigenvalues, Σᵢ f(hᵢ) ≈ P'/probes · Σ weights·f(nodes) (P' the masked coordinates of `parameters`).
    Each probe is a Rademacher vector run through `steps` Lanczos steps with full reorthogonalisation."""
    g = torch.Generator().manual_seed(seed)
    keep = None if mask is None else mask.to(torch.float64)
    nodes = np.zeros((instances, probes, steps))
    weights = np.zeros((instances, probes, steps))
    for probe in range(probes):
        v = torch.randint(0, 2, (instances, parameters), generator=g).double() * 2 - 1
        if keep is not None:
            v = v * keep
        basis = [v / v.norm(dim=1, keepdim=True)]
        alphas, betas = [], []
        for k in range(steps):
            w = apply(basis[-1].float()).double().cpu()
            alpha = (w * basis[-1]).sum(dim=1)
            alphas.append(alpha)
            for b in basis:  # full reorthogonalisation: a few dozen steps, so it costs nothing
                w = w - (w * b).sum(dim=1, keepdim=True) * b
            beta = w.norm(dim=1)
            if k == steps - 1:
                break
            betas.append(beta)
            basis.append(w / beta.clamp_min(1e-30)[:, None])
        for i in range(instances):
            t = torch.diag(torch.stack([a[i] for a in alphas]))
            if betas:
                off = torch.stack([b[i] for b in betas])
                t += torch.diag(off, 1) + torch.diag(off, -1)
            values, vectors = torch.linalg.eigh(t)
            nodes[i, probe], weights[i, probe] = values.numpy(), (vectors[0] ** 2).numpy()
    return nodes, weights


def hessian_spectrum(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                     settings: SGLDSettings, mask: Tensor | None = None, probes: int = PROBES,
                     steps: int = STEPS, rows: int | None = None) -> Spectrum:
    """The Hessian spectrum at w* of every instance of `model` over the masked coordinates, on `rows` pool rows
    (None: the whole pool; `hessian_operator`): exact up to `EXACT_MAX` of them, else by stochastic Lanczos
    quadrature with `probes` probes of `steps` steps (seeded by `settings.seed`)."""
    apply, e, p, keep = hessian_operator(model, loss_fn, tokens, targets, settings, mask, rows)
    directions = p if keep is None else int(keep.sum().item())
    if directions <= EXACT_MAX:
        values = exact_spectrum(apply, e, p, keep)
        return Spectrum(values, np.ones_like(values), directions, "exact")
    if not (probes >= 1 and 2 <= steps <= directions):
        raise ConfigError(f"probes = {probes}, steps = {steps} are invalid; use probes ≥ 1 and 2 ≤ steps ≤ "
                          f"{directions}")
    nodes, weights = lanczos_nodes(apply, e, p, probes, steps, settings.seed, keep)
    return Spectrum(nodes.reshape(e, -1), weights.reshape(e, -1) * (directions / probes), directions, "lanczos")


def basin_resolution(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                     settings: SGLDSettings, mask: Tensor | None = None, probes: int = PROBES,
                     steps: int = STEPS, rows: int | None = None) -> Resolution:
    """The `Resolution` of an estimate at `settings` (its nβ, default devinterp's, and γ) for every instance of
    `model` at its current weights (w*), over the masked coordinates (`hessian_spectrum`)."""
    return hessian_spectrum(model, loss_fn, tokens, targets, settings, mask, probes, steps, rows).resolution(settings)


@dataclass(frozen=True)
class Spectrum:
    """Hessian eigenvalues (or Ritz nodes) [E, K] at w*, each counted with its weight [E, K] (1 for exact ones), over
    `directions` coordinates."""

    values: np.ndarray
    weights: np.ndarray
    directions: int
    method: str  # "exact" or "lanczos"

    @property
    def floor(self) -> np.ndarray:
        """[E, 1] the magnitude below which a value is a flat direction: `FLAT` of the largest."""
        top = np.abs(self.values).max(axis=1, keepdims=True)
        return FLAT * np.where(top > 0, top, 1.0)

    @property
    def curved(self) -> np.ndarray:
        """[E, K] which values are curvature rather than a flat direction."""
        return self.values > self.floor

    @property
    def stiffest(self) -> np.ndarray:
        """[E] the largest eigenvalue."""
        return self.values.max(axis=1)

    def shortfall(self, ratio: float) -> np.ndarray:
        """[E] the share of the curved basin unseen at γ/nβ = `ratio` (the quadratic prediction depends on nothing
        else): 1 − Σ h/(h + ratio) / (curved directions); NaN with no curvature."""
        curved = self.curved
        with np.errstate(invalid="ignore", divide="ignore"):
            seen = (self.weights * np.where(curved, self.values / (self.values + ratio), 0.0)).sum(axis=1)
            return np.where(curved.any(axis=1), 1.0 - seen / (self.weights * curved).sum(axis=1), np.nan)

    def resolution(self, settings: SGLDSettings) -> Resolution:
        """What an estimate at `settings` (its nβ, default devinterp's, and γ) resolves of this spectrum."""
        nbeta = default_nbeta(settings.batch_size) if settings.nbeta is None else settings.nbeta
        gamma = settings.localization
        values, weights, curved = self.values, self.weights, self.curved
        with np.errstate(invalid="ignore", divide="ignore"):
            share = np.where(curved, nbeta * values / (nbeta * values + gamma), 0.0)
        prediction = 0.5 * (weights * share).sum(axis=1)
        limit = 0.5 * (weights * curved).sum(axis=1)
        unresolved = (weights * (curved & (values < gamma / nbeta))).sum(axis=1)
        negative = (weights * (values < -self.floor)).sum(axis=1)
        return Resolution(prediction, limit, np.round(unresolved, 1), np.round(negative, 1), self.directions,
                          self.method)
