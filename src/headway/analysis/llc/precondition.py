"""A fixed diagonal metric for SGLD, measured at w*: preconditioned Langevin dynamics sample the same localised
posterior as plain SGLD, but let soft coordinates move as fast as stiff ones.

With a constant positive diagonal P, the update w ← w − ε/2·P·∇U(w) + √ε·P^½·ξ (U = nβ·L + γ/2·|w − w*|²) has
exp(−U) as its stationary law, as the plain update (P = 1) has, so λ̂ keeps its meaning; what changes is how
fast each direction relaxes (ε·Pᵢ·stiffnessᵢ instead of ε·stiffnessᵢ). A model whose curvature spans many orders
of magnitude (a transformer near zero loss) needs a step small enough for its stiffest direction, and then the
burn-in of its softest resolved direction, in steps, grows as the ratio of the two; a metric Pᵢ = 1/(nβ·Hᵢᵢ + γ)
takes most of that ratio away where the Hessian's large entries sit on its diagonal. P is measured once and held
fixed: an adaptive metric (devinterp's RMSprop-SGLD) changes the stationary law unless a correction term is added,
and it has none.

The diagonal comes from Hutchinson's estimator, the mean of z ⊙ Hz over Rademacher probes z, with the
Hessian-vector products of `resolution.hessian_operator` on a seeded subsample of the pool. Its noise only makes P
less effective, never the posterior wrong; negative entries (noise, or w* off a minimum) count as flat, held by γ.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from headway.analysis.llc.module_ensemble import ModuleLossFn
from headway.analysis.llc.resolution import hessian_operator
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta

PROBES = 16  # Rademacher probes of the diagonal
ROWS = 1024  # pool rows the Hessian-vector products are taken on (seeded subsample; all of a smaller pool)
FLOOR = 1e-6  # a coordinate's stiffness is at least this share of the instance's largest: P stays bounded at γ = 0


def diagonal_preconditioner(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                            settings: SGLDSettings, mask: Tensor | None = None, probes: int = PROBES,
                            rows: int | None = ROWS) -> Tensor:
    """[E, P] the metric Pᵢ = 1/(nβ·max(Hᵢᵢ, 0) + γ) of every instance of `model` at its weights (w*), its
    inputs taken as `estimate_llc` takes them; Hᵢᵢ from `probes` Hutchinson probes on `rows` pool rows (seeded by
    `settings.seed`). Coordinates off the mask get 1 (they do not move)."""
    nbeta = default_nbeta(settings.batch_size) if settings.nbeta is None else settings.nbeta
    apply, e, p, keep = hessian_operator(model, loss_fn, tokens, targets, settings, mask, rows)
    generator = torch.Generator().manual_seed(settings.seed + 1)  # not the spectrum's probes
    diagonal = torch.zeros(e, p, dtype=torch.float64)
    for _ in range(probes):
        z = torch.randint(0, 2, (e, p), generator=generator).float() * 2 - 1
        diagonal += (z * apply(z).cpu()).double()  # apply's products carry no graph: nothing accumulates
    stiffness = nbeta * (diagonal / probes).clamp_min(0.0) + settings.localization
    stiffness = torch.maximum(stiffness, FLOOR * stiffness.amax(dim=1, keepdim=True))
    stiffness = torch.where(stiffness > 0, stiffness, torch.ones_like(stiffness))  # γ = 0 and no curvature at all
    metric = (1.0 / stiffness).float()
    return metric if keep is None else torch.where(keep.bool(), metric, torch.ones_like(metric))
