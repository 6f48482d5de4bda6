"""The SGLD sampler's settings and devinterp's default inverse temperature."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from headway.errors import ConfigError
from headway.settings import Settings, check_int, check_number

if TYPE_CHECKING:  # settings are read by study plans when the CLI parses options; torch loads with sampling
    from torch import Tensor, nn

PRECONDITIONERS = ("none", "diagonal")  # SGLDSettings.preconditioner
LossFn = Callable[["nn.Module", "Tensor", "Tensor"], "Tensor"]


@dataclass(frozen=True)
class SGLDSettings(Settings):
    """SGLD sampler and LLC estimate settings (devinterp 1.x names in comments).

    The defaults are calibrated on the known-answer suite (`headway.analysis.llc.known_answers`: linear
    regressions and deep linear networks with unit-scale curvature), where they estimate every model within
    15% of its learning coefficient: with nβ = B/ln B ≈ 82, ε·nβ ≈ 0.08 makes the discretisation bias about
    +2% and a unit-curvature direction relax in 2/(ε·nβ) ≈ 24 steps (burn-in: about ten of them), γ/nβ ≈ 2%
    shrinks such a direction by that much, and 250 draws end before the flat directions of a singular
    model's true set (held only by γ) carry the chains to the less singular points near w* (by 1000 steps
    the suite's three-layer network reads +20%). A model whose curvature is of another scale (a transformer
    near zero loss) needs its own settings, checked with `known_answers.suite_bias` and the validity checks.

    `preconditioner = "diagonal"` samples the same posterior with a fixed diagonal metric P measured at w*
    (`precondition.diagonal_preconditioner`: Pᵢ = 1/(nβ·Hᵢᵢ + γ) from the Hessian's diagonal), so that stiff and
    soft coordinates relax at comparable rates; `lr` is then dimensionless, the step in units of each coordinate's
    own stiffness (0.1–0.2 is a moderate step), where plain SGLD ("none", devinterp's) takes it in weight units.
    """

    LATER: ClassVar[dict[str, Any]] = {"preconditioner": "none"}

    lr: float = 1e-3  # ε, the step size
    nbeta: float | None = None  # n·β, inverse temperature; None → default_nbeta(batch_size)
    localization: float = 2.0  # γ, pull towards w*
    chains: int = 8
    draws: int = 250
    burnin: int = 250  # SGLD steps before the first draw (num_burnin_steps)
    steps_between_draws: int = 1  # num_steps_bw_draws
    batch_size: int = 512
    init_loss_batches: int | None = None  # disjoint random batches averaged for L(w*); None: the whole pool
    init_batch_size: int | None = None  # examples per L(w*) batch; None: batch_size × chains (one step's)
    seed: int = 0
    preconditioner: str = "none"  # "none": plain SGLD (devinterp's sgld); "diagonal": a fixed metric from H's diagonal

    def __post_init__(self) -> None:
        positive = ("chains", "draws", "steps_between_draws", "batch_size")
        self.normalise(**{name: check_int(name, getattr(self, name), 1) for name in positive})
        self.normalise(**{name: check_int(name, getattr(self, name), 1) for name in ("init_loss_batches",
                                                                                       "init_batch_size")
                          if getattr(self, name) is not None})
        self.normalise(burnin=check_int("burnin", self.burnin, 0), seed=check_int("seed", self.seed, 0))
        self.normalise(
            lr=check_number("lr", self.lr, 0.0, low_open=True),
            nbeta=None if self.nbeta is None else check_number("nbeta", self.nbeta, 0.0, low_open=True),
            localization=check_number("localization", self.localization, 0.0),
        )
        if self.preconditioner not in PRECONDITIONERS:
            raise ConfigError(f"preconditioner = {self.preconditioner!r} is unknown; choose one of "
                              f"{', '.join(PRECONDITIONERS)}")

    @property
    def steps(self) -> int:
        """SGLD steps per chain: burn-in, then `draws` draws `steps_between_draws` apart."""
        return self.burnin + self.draws * self.steps_between_draws

    @property
    def init_size(self) -> int:
        """Examples per batch of the L(w*) evaluation."""
        return self.init_batch_size or self.batch_size * self.chains


def default_nbeta(batch_size: int) -> float:
    """devinterp's default n·β = B / ln B (1 for B = 1, where it is undefined)."""
    return float(batch_size / math.log(batch_size)) if batch_size > 1 else 1.0
