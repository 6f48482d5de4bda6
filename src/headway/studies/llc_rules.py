"""The rules of every study that judges a claim by the LLC: the limits beyond which an LLC estimate is no
estimate (`headway.analysis.llc.validity.ValidityLimits`), so that a claim resting on invalid estimates is
untestable by the study's own stated rules rather than by constants of the estimator.

`llc_bias_source` says what the LLC claims weigh as the estimator's bias: the traced models' own stability
(`headway.analysis.llc.stability`) or the known-answer suite's error at the plan's settings; `weighed_bias` turns
it into the number a study's summary weighs.

The values are the estimator's own defaults, read from `ValidityLimits` (defined there once, with the
measurements behind them), and `LLCRules.llc_validity()` hands them back to the functions that decide
validity: the LLC trace and the final LLC while analysing (stage "analysis": the stored `invalid` column and
diagnostics depend on them, so they are part of the analysis stamp and of the trace's own), and
`headway.analysis.development.development` while summarising. The ceiling and the resolution's shortfall are
summary rules: they judge stored columns (moving_weights, shortfall), so a study re-summarised after a change of
either is judged by it without sampling again, and estimates stored before those columns existed are not judged.
They are not swept: the diverging and climbing limits act only on the sampler's traces while analysing, and the
sorting study's sensitivity table re-judges its mode claims alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from headway.analysis.llc.validity import BEFORE_SETTINGS, BIAS_STATISTICS, ValidityLimits
from headway.settings import check_choice
from headway.studies.rules import Rules, rule

if TYPE_CHECKING:  # pandas and the stability's sampler load with a summary, not with the rules
    import pandas as pd

    from headway.analysis.llc.stability import ModelStability

BIAS_SOURCES = ("model", "suite")  # what the LLC claims weigh as the estimator's bias (llc_bias_source)

_ESTIMATOR = ValidityLimits()  # the estimator's own limits: the rules' defaults


@dataclass(frozen=True)
class LLCRules(Rules):
    """The LLC validity limits, shared by the studies whose claims read the LLC (sorting, modular)."""

    llc_basin_fraction: float = rule(_ESTIMATOR.basin_fraction, "share of the way from L(w*) to a uniform guess's "
                                     "loss the chains' mean draw loss may go before λ̂ describes the landscape at "
                                     "large, not w*'s basin: the estimate is invalid (right estimates on the "
                                     "known-answer suite reach 0.23)", stage="analysis", low=0.0,
                                     was=BEFORE_SETTINGS["basin_fraction"])
    llc_min_acceptance: float = rule(_ESTIMATOR.min_acceptance, "mean MALA acceptance below which the SGLD step is "
                                     "too coarse and the estimate invalid (0.52-0.61 where λ̂ is right on the "
                                     "known-answer suite; below 0.4 only where it was ≥ 29% off)",
                                     stage="analysis", low=0.0, high=1.0,
                                     was=BEFORE_SETTINGS["min_acceptance"])
    llc_diverge_factor: float = rule(_ESTIMATOR.diverge_factor, "multiple of its typical rise plus early spread a "
                                     "chain's last-quarter loss rise must exceed to count as diverging, which "
                                     "makes the estimate invalid", stage="analysis", low=1.0,
                                     was=BEFORE_SETTINGS["diverge_factor"])
    llc_trend_fraction: float = rule(_ESTIMATOR.trend_fraction, "share of the mean loss rise by which the last "
                                     "quarter of draws must exceed the third for the chains to be still climbing "
                                     "(not settled: the estimate is invalid)", stage="analysis", low=0.0,
                                     was=BEFORE_SETTINGS["trend_fraction"])
    llc_trend_sigmas: float = rule(_ESTIMATOR.trend_sigmas, "standard errors across chains that climb must also "
                                   "exceed, so that noise alone rarely invalidates an estimate", stage="analysis",
                                   low=0.0, was=BEFORE_SETTINGS["trend_sigmas"])
    llc_ceiling: float = rule(_ESTIMATOR.ceiling, "multiple of d/2 (half the moving weights, the most any basin "
                              "allows) above which λ̂ comes from chains that left w*'s basin and is invalid (1.15: "
                              "the known-answer suite's accepted error); judged on the stored moving_weights, so "
                              "estimates stored before it existed are not", low=1.0)
    llc_max_shortfall: float = rule(_ESTIMATOR.max_shortfall, "share of the curved basin (the Hessian's quadratic "
                                    "prediction at the estimate's nβ and γ against its γ → 0 limit) the settings may "
                                    "leave unseen before λ̂ is only a lower bound of the LLC (resolution-limited), and "
                                    "by which it may exceed the Hessian's quadratic prediction before the basin is not "
                                    "quadratic; judged on the stored shortfall, so estimates stored before the check "
                                    "existed are not", low=0.0, high=1.0)
    llc_resolved_only: bool = rule(False, "whether the LLC claims read only estimates the resolution check vouches "
                                   "for (the LLC itself, which no finite nβ resolves on a network whose Hessian has a "
                                   "bulk near zero) rather than every valid estimate, read as λ̂ at the plan's stated "
                                   "nβ and γ (the LLC at that scale, as devinterp's and the papers' estimates are); "
                                   "the check's label stays on every estimate either way (docs/decisions.md)")
    llc_bias_source: str = rule("model", "the estimator's bias the LLC claims weigh into each λ̂: 'model', the "
                                "traced models' own stability (twice the largest difference between two checkpoints "
                                "of each traced run, the sorting study's first valid and last, the modular study's "
                                "peak and last, in λ̂'s relative change under a halved step or a doubled batch; not "
                                "measured: the claim is not testable), or 'suite', the known-answer "
                                "suite's error at the plan's settings (docs/decisions.md)")
    llc_bias_statistic: str = rule("largest", "how the traced models' stability becomes one bias (llc_bias_source "
                                   "'model'): 'largest', twice the largest difference over runs and variants, or "
                                   "'pooled', twice the upper 95% bound of a variant's mean difference over the runs "
                                   "(Student's t), the part they share, which does not grow as runs are added "
                                   "(docs/study-sorting.md)")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("rule llc_bias_source", self.llc_bias_source, BIAS_SOURCES)
        check_choice("rule llc_bias_statistic", self.llc_bias_statistic, BIAS_STATISTICS)

    def llc_validity(self) -> ValidityLimits:
        """The LLC validity rules as the estimator and `invalid_reasons` take them."""
        return ValidityLimits(basin_fraction=self.llc_basin_fraction, min_acceptance=self.llc_min_acceptance,
                              diverge_factor=self.llc_diverge_factor, trend_fraction=self.llc_trend_fraction,
                              trend_sigmas=self.llc_trend_sigmas, ceiling=self.llc_ceiling,
                              max_shortfall=self.llc_max_shortfall)

    def llc_bias_target(self) -> str:
        """What the estimator's bias weighed into the LLC claims is measured against, in words: the target of the
        estimates they read (`llc_resolved_only`)."""
        if self.llc_resolved_only:
            return "against their LLC (the claims read resolved estimates only)"
        return ("against the λ they have at the stated nβ and γ, sampled exactly (the target of an estimate read at "
                "its stated scale, as the claims read it)")

    def llc_reading(self) -> str:
        """Which estimates the LLC claims read, in words for a claim's test (`llc_resolved_only`)."""
        if self.llc_resolved_only:
            return "only estimates the resolution check vouches for (the LLC itself)"
        return ("every valid estimate, read as λ̂ at the plan's stated nβ and γ, those the resolution check cannot "
                "vouch for included")

    def llc_bias_source_text(self, points: tuple[str, str] | None = None) -> str:
        """What the LLC claims weigh as the estimator's bias (`llc_bias_source`), in words; `points`: the two
        checkpoints the models' stability is compared at (`headway.analysis.llc.stability`, default its POINTS)."""
        if self.llc_bias_source == "model":
            from headway.analysis.llc.stability import POINTS, points_text

            between = (f"{points_text(points or POINTS)} in λ̂'s relative change under a halved step or a doubled "
                       "batch")
            if self.llc_bias_statistic == "pooled":
                return (f"the traced models' own stability, twice the upper 95% bound of the mean difference over "
                        f"the runs between a run's {between}")
            return f"the traced models' own stability, twice the largest difference between a run's {between}"
        return f"the known-answer suite's error at the plan's settings, {self.llc_bias_target()}"

    def weighed_bias(self, stability: pd.DataFrame, trace: pd.DataFrame, suite_bias: float,
                     points: tuple[str, str] | None = None) -> tuple[float, ModelStability | None]:
        """The relative bias the LLC claims weigh into each λ̂ under `llc_bias_source`, with the models' stability
        it came from: "model", the `model_stability` of the `llc_stability` table `stability` at `points` (default
        its POINTS) over the traced runs of `trace` (NaN when a testable run lacks it: the claims are then not
        testable), by `llc_bias_statistic`; "suite", `suite_bias` as measured (NaN: not measured) and None."""
        if self.llc_bias_source == "suite":
            return suite_bias, None
        from headway.analysis.llc.stability import POINTS, model_stability

        measured = model_stability(stability, trace, self.llc_validity(), points or POINTS, self.llc_bias_statistic)
        return measured.bias, measured
