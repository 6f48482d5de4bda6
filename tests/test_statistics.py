"""The small-count statistics: Wilson intervals, the exact one-sided test against chance and its power,
and the permutation test of independence with its Šidák combination."""

from __future__ import annotations

import math

import numpy as np
import pytest

from headway.analysis.statistics import (binomial_power, binomial_tail, chi_square, critical_count,
                                         detectable_accuracy, permutation_independence, sidak, wilson_interval)


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
