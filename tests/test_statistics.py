"""The small-count statistics: Wilson intervals, the exact one-sided test against chance and its power,
the permutation test of independence with its Šidák combination, and every helper refusing a missing or
impossible input (NaN, None, a fractional count, a probability outside [0, 1], a zero standard error)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headway.analysis.statistics import (agreement_power, agreement_tail, binomial_pmf, binomial_power, binomial_tail,
                                         chi_square, critical_count, detectable_accuracy, fisher_greater, fisher_power,
                                         holm, largest_agreement_pmf, normal_interval, normal_power, normal_tail,
                                         permutation_independence, poisson_binomial_tail, pooled_count_test, sidak,
                                         stratified_shortfall, t_quantile, upper_tail, wilson_interval, z_score)


def test_wilson_interval_is_sensible_at_the_ends():
    low, high = wilson_interval(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35
    low, high = wilson_interval(50, 100)
    assert low == pytest.approx(0.4038, abs=1e-4) and high == pytest.approx(0.5962, abs=1e-4)
    assert all(math.isnan(x) for x in wilson_interval(0, 0))


def test_exact_test_against_chance_and_its_power_at_twenty_questions():
    # 20 four-way questions: 9 right is the fewest with P(X ≥ k | 0.25) ≤ 0.05 (0.041; 8 right: 0.102)
    assert binomial_tail(9, 20, 0.25) == pytest.approx(0.04093, abs=1e-5)
    assert binomial_tail(8, 20, 0.25) == pytest.approx(0.10181, abs=1e-5)
    assert critical_count(20, 0.25) == 9
    # a model at 0.45 true accuracy reaches 9 of 20 only 59% of the time
    assert binomial_power(20, 0.25, 0.45) == pytest.approx(0.5857, abs=1e-4)
    detectable = detectable_accuracy(20, 0.25)
    assert detectable == pytest.approx(0.519, abs=1e-3)
    assert binomial_power(20, 0.25, detectable) >= 0.8 > binomial_power(20, 0.25, detectable - 1e-3)
    assert detectable_accuracy(100, 0.25) < detectable  # more questions detect smaller effects
    assert math.isnan(detectable_accuracy(1, 0.5))  # one coin flip can never reach p ≤ 0.05


def test_student_t_quantiles_match_their_tables_and_refuse_impossible_inputs():
    # published values (two-sided 90%, 95%, 98% columns) and the Cauchy's closed form, tan(π (q − 1/2))
    for q, df, value in [(0.95, 11, 1.795885), (0.975, 5, 2.570582), (0.99, 2, 6.964557), (0.05, 3, -2.353363),
                         (0.95, 1000, 1.646379)]:
        assert t_quantile(q, df) == pytest.approx(value, abs=2e-6)
    assert t_quantile(0.9999, 1) == pytest.approx(math.tan(math.pi * 0.4999), rel=1e-6)
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    for q, df in [(0.0, 5), (1.0, 5), (math.nan, 5), (0.95, 0), (0.95, 2.5)]:
        assert math.isnan(t_quantile(q, df))


def test_permutation_test_of_independence():
    assert chi_square(np.array([[6, 0], [0, 6]])) == pytest.approx(12.0)
    statistic, p = permutation_independence(["a"] * 6 + ["b"] * 6, ["x"] * 6 + ["y"] * 6, 999,
                                            np.random.default_rng(0))
    assert statistic == pytest.approx(12.0) and p < 0.01  # exact: 2 / C(12, 6) = 0.0022
    assert permutation_independence(["a"] * 12, ["x"] * 6 + ["y"] * 6, 99, np.random.default_rng(0)) == (0.0, 1.0)
    # the p-value is a function of the generator passed in, never of a global one
    args = (["a", "b", "b"] * 4, ["x"] * 6 + ["y"] * 6, 199)
    assert permutation_independence(*args, np.random.default_rng(3)) == \
        permutation_independence(*args, np.random.default_rng(3))
    assert sidak([0.02, 0.5]) == pytest.approx(1 - 0.98 ** 2) and sidak([]) == 1.0


# --- a missing or impossible input is refused, never turned into a number ----------------------------------------

MISSING = [math.nan, None, np.float64("nan")]


@pytest.mark.parametrize("gone", MISSING)
def test_a_normal_test_refuses_a_missing_gap_or_noise(gone):
    assert math.isnan(z_score(gone, 0.1)) and math.isnan(z_score(0.3, gone))
    assert math.isnan(normal_tail(gone)) and math.isnan(normal_tail(z_score(0.3, gone)))
    assert math.isnan(normal_power(gone, 0.1, 0.05)) and math.isnan(normal_power(0.3, gone, 0.05))
    assert math.isnan(normal_power(0.3, 0.1, gone))
    assert all(math.isnan(x) for x in normal_interval(gone, 0.1) + normal_interval(0.3, gone))


def test_zero_noise_is_no_infinite_significance():
    """A standard error of 0 says the spread was not measured: the gap over it is untestable, never p = 0
    (the modular LLC pair test said 'reproduced, p = 5e-12' on an unknown noise)."""
    for noise in (0.0, -0.1):
        assert math.isnan(z_score(0.3, noise)) and math.isnan(z_score(0.0, noise))
        assert math.isnan(normal_power(0.3, noise, 0.05))
    assert math.isnan(normal_tail(z_score(0.3, 0.0)))
    assert z_score(0.3, 0.1) == pytest.approx(3.0)
    assert normal_tail(z_score(0.3, 0.1)) == pytest.approx(0.00135, abs=1e-5)
    assert normal_tail(math.inf) == 0.0 and normal_tail(-math.inf) == 1.0
    assert all(math.isnan(x) for x in normal_interval(0.3, -0.1))
    assert normal_interval(0.3, 0.0) == (0.3, 0.3)


@pytest.mark.parametrize("bad", [*MISSING, 2.5, -1, True, "3"])
def test_counting_tests_refuse_counts_that_are_not_whole_numbers(bad):
    assert all(math.isnan(x) for x in wilson_interval(bad, 10)) and all(math.isnan(x) for x in wilson_interval(3, bad))
    assert math.isnan(binomial_tail(3, bad, 0.5)) and math.isnan(fisher_greater(bad, 4, 1, 4))
    assert math.isnan(fisher_greater(3, 4, 1, bad)) and math.isnan(fisher_power(bad, 4, 0.9, 0.1, 0.05))
    assert math.isnan(binomial_power(bad, 0.5, 0.9)) and math.isnan(detectable_accuracy(bad, 0.25))
    assert math.isnan(agreement_tail(bad, 3, 6)) and math.isnan(agreement_power(bad, 6, 0.9, 0.05))
    with pytest.raises(ValueError, match="critical_count needs a count"):
        critical_count(bad, 0.5)
    with pytest.raises(ValueError, match="binomial_pmf needs a count"):
        binomial_pmf(bad, 0.5)
    with pytest.raises(ValueError, match="largest_agreement_pmf needs counts"):
        largest_agreement_pmf(bad, 6)


@pytest.mark.parametrize("bad", [*MISSING, 1.5, -0.1])
def test_probabilities_outside_zero_one_are_refused(bad):
    assert math.isnan(binomial_tail(3, 10, bad)) and math.isnan(binomial_power(10, bad, 0.9))
    assert math.isnan(binomial_power(10, 0.5, bad)) and math.isnan(binomial_power(10, 0.5, 0.9, bad))
    assert math.isnan(fisher_power(4, 4, bad, 0.1, 0.05)) and math.isnan(fisher_power(4, 4, 0.9, 0.1, bad))
    assert math.isnan(agreement_power(8, 6, bad, 0.05)) and math.isnan(poisson_binomial_tail(1, [0.5, bad]))
    assert np.isnan(binomial_pmf(3, bad)).all() and len(binomial_pmf(3, bad)) == 4
    assert math.isnan(sidak([0.02, bad])) and math.isnan(sidak([bad, 0.02]))
    assert holm([0.001, bad], 0.05) == [True, False] and holm([0.001], bad) == [False]
    with pytest.raises(ValueError, match="critical_count needs a count"):
        critical_count(10, bad)


def test_impossible_counts_and_missing_distributions_are_refused():
    assert all(math.isnan(x) for x in wilson_interval(11, 10))  # more successes than trials
    assert math.isnan(fisher_greater(5, 4, 1, 4))
    assert math.isnan(upper_tail(np.array([0.5, math.nan]), 1))  # min(1.0, nan) would have said 1.0
    assert math.isnan(upper_tail(np.array([0.5, 0.5]), 0.5)) and math.isnan(upper_tail(np.array([0.5, 0.5]), None))
    p, power = pooled_count_test(1, [np.array([0.5, math.nan])], [np.array([0.1, 0.9])])
    assert math.isnan(p) and math.isnan(power(0.05))  # the critical count of a NaN null would have been "none"
    assert wilson_interval(3.0, 10.0) == wilson_interval(3, 10) and binomial_tail(np.int64(9), 20, 0.25) == \
        binomial_tail(9, 20, 0.25)  # whole numbers of any numeric type are counts
    assert binomial_tail(-1, 5, 0.5) == 1.0 and binomial_tail(6, 5, 0.5) == 0.0
    assert np.isnan(chi_square(np.array([[6, math.nan], [0, 6]])))  # a missing count leaves no statistic


def test_a_missing_label_is_no_category_of_the_permutation_test():
    rng = np.random.default_rng(0)
    for outcomes, groups in ((["a", None, "b", "a"], ["x", "x", "y", "y"]),
                             (["a", "b", "b", "a"], ["x", math.nan, "y", "y"])):
        statistic, p = permutation_independence(outcomes, groups, 99, rng)
        assert math.isnan(statistic) and math.isnan(p)


def test_the_stratified_shortfall_matches_the_exact_count_and_refuses_missing_values():
    """Three high values above three low ones: one of the C(6, 3) = 20 labelings is as extreme, p = 1/20."""
    shortfall, noise, p = stratified_shortfall([([5.0, 6.0, 7.0], [1.0, 2.0, 3.0])], 99_999, np.random.default_rng(0))
    assert p == pytest.approx(1 / 20, abs=0.003)
    assert shortfall == pytest.approx(1 - 2 / 6)  # the low mean 2 is two thirds below the high mean 6
    assert noise == pytest.approx(math.sqrt(1 / 3 + 1 / 3) / 6)
    assert stratified_shortfall([([1.0, 2.0, 3.0], [5.0, 6.0, 7.0])], 9_999, np.random.default_rng(0))[2] == 1.0
    for strata in ([([5.0, math.nan], [1.0, 2.0])], [([], [1.0, 2.0])], []):
        assert all(math.isnan(x) for x in stratified_shortfall(strata, 99, np.random.default_rng(0)))


def test_the_stratified_shortfall_compares_within_strata_only():
    """A scale that differs five-fold between strata and goes with the labels makes no effect: within each stratum
    the groups are alike, so the test keeps its level, where pooling the strata would find a large gap."""
    rng = np.random.default_rng(1)
    found = []
    for _ in range(300):
        high = [rng.normal(1000, 50, 1), rng.normal(200, 10, 20)]  # the high group mostly in the low-scale stratum
        low = [rng.normal(1000, 50, 20), rng.normal(200, 10, 2)]
        found.append(stratified_shortfall(list(zip(high, low)), 199, rng)[2])
    assert np.mean(np.asarray(found) <= 0.05) <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300)
    # and a real shortfall in each stratum is found
    _, _, p = stratified_shortfall([([1000, 1010, 990], [800, 790, 810]), ([200, 205, 195], [160, 158, 162])], 9_999,
                                   np.random.default_rng(0))
    assert p < 0.01
