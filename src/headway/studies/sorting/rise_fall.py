"""The per-run test behind the sorting study's LLC claim: does one traced run's whole-model LLC (or, read the same
way for the report, one head's restricted LLC) rise to a peak and fall from it beyond noise and the estimator's bias?

A run's p-value is the intersection–union of the one-sided rise and fall tests of
`headway.analysis.development.development` (p = the larger), times the number of interior valid
checkpoints the peak was chosen from: the peak is the highest of them, and without that Bonferroni factor a
flat noisy curve would pass far more often than the per-run level (tests/test_verdicts_sorting.py measures
both). The power assumes the claim's stated effect, a rise and a fall each `llc_fall` of the run's peak,
with each difference's uncertainty √2 times the run's typical checkpoint uncertainty.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from headway.analysis.development import Development, applied_bias
from headway.analysis.statistics import critical_count, normal_power, normal_tail, poisson_binomial_tail
from headway.studies.sorting.rules import SortingRules


@dataclass(frozen=True)
class RunTest:
    """One traced run's rise-and-fall test: `unusable` says why the run cannot be tested ("" when it can),
    `candidates` is how many interior valid checkpoints the peak was chosen from, `p` the run's p-value,
    `counted` whether it passes the per-run level, and `power` its chance to pass under the stated effect."""

    run_id: str
    unusable: str
    candidates: int = 0
    p: float = math.nan
    counted: bool = False
    power: float = math.nan


def run_level(rules: SortingRules) -> float:
    """The per-run level: the one-sided normal tail of `llc_change_z` (the rate at which a run with no rise
    and fall is counted, at most)."""
    return normal_tail(rules.llc_change_z)


def run_test(traced: Development, rules: SortingRules) -> RunTest:
    """The test of one traced run (module docstring), with the estimator's bias its Development was weighed
    with (`traced.bias`), so its power and p-values share one bias. Unusable when it has fewer than three valid
    checkpoints (no interior peak is possible), its last traced checkpoint is invalid (the fall would be read
    before an estimate the sampler lost), or its rise or fall has no p-value (no uncertainty to weigh it by)."""
    whole = traced.llc[traced.llc.weights == traced.weights].sort_values("step")
    steps = whole.step.to_numpy()
    valid = ~np.isin(steps, list(traced.excluded))
    if valid.sum() < 3:
        return RunTest(traced.run_id, f"{int(valid.sum())} valid checkpoint(s) of {len(steps)}, fewer than three")
    if not valid[-1]:
        return RunTest(traced.run_id, f"its last checkpoint (step {int(steps[-1])}) is invalid: "
                                      f"{traced.excluded[int(steps[-1])]}")
    if math.isnan(traced.p_rise) or math.isnan(traced.p_fall):
        return RunTest(traced.run_id, "its rise or fall has no p-value: a standard error of 0 and no bias to weigh "
                                      "it by")
    candidates = int(valid.sum()) - 2
    p = min(1.0, candidates * max(traced.p_rise, traced.p_fall))
    level = run_level(rules)
    return RunTest(traced.run_id, "", candidates, p, p <= level, run_power(traced, candidates, rules, traced.bias))


def run_power(traced: Development, candidates: int, rules: SortingRules, bias: float) -> float:
    """A usable run's chance to pass under the stated effect (module docstring) with `bias` weighed into its peak
    (NaN: not measured, weighed as 0): the run's own chain noise (the median standard error of its valid
    checkpoints) and its peak, so a projection can ask what the same run would give at another bias."""
    whole = traced.llc[traced.llc.weights == traced.weights]
    valid = ~whole.step.isin(list(traced.excluded)).to_numpy()
    typical = math.hypot(float(np.median(whole.llc_se.to_numpy(dtype=float)[valid])), applied_bias(bias) * traced.peak)
    return normal_power(rules.llc_fall * traced.peak, math.sqrt(2) * typical, run_level(rules) / candidates) ** 2


def claim_power(powers: list[float], rules: SortingRules, alpha: float) -> float:
    """The claim's power at `alpha` over runs of these per-run `powers`: the chance that, with each run showing the
    stated rise and fall with probability `llc_effect_share` and then passing with its power, the count reaches the
    binomial test's critical count against the per-run level."""
    probabilities = [rules.llc_effect_share * power for power in powers]
    return poisson_binomial_tail(critical_count(len(powers), run_level(rules), alpha), probabilities)
