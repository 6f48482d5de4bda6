"""Tests and intervals for the small counts studies produce: Wilson intervals, exact one-sided
binomial tests against chance with their power, and a permutation test of independence between a
run's outcome and its group. numpy and the standard library only."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def wilson_interval(successes: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible at 0% and 100%, unlike the normal one)."""
    if total <= 0:
        return (math.nan, math.nan)
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))  # holds p despite rounding


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p), summed exactly: the one-sided p-value of k successes against p."""
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def critical_count(n: int, chance: float, alpha: float = 0.05) -> int:
    """Fewest successes out of n that the one-sided exact test calls above `chance` at level alpha
    (n + 1 when no count can)."""
    return next((k for k in range(n + 1) if binomial_tail(k, n, chance) <= alpha), n + 1)


def binomial_power(n: int, chance: float, accuracy: float, alpha: float = 0.05) -> float:
    """Probability that the one-sided exact test at level alpha calls n questions above `chance` when
    the true accuracy is `accuracy`: what a null result at this n can rule out."""
    return binomial_tail(critical_count(n, chance, alpha), n, accuracy)


def detectable_accuracy(n: int, chance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true accuracy the one-sided exact test at level alpha detects with probability
    ≥ `power` at n questions (bisection to 1e-6; nan when even accuracy 1 is not detected)."""
    k = critical_count(n, chance, alpha)
    if k > n:
        return math.nan
    low, high = chance, 1.0
    while high - low > 1e-6:
        middle = (low + high) / 2
        low, high = (low, middle) if binomial_tail(k, n, middle) >= power else (middle, high)
    return high


def chi_square(table: np.ndarray) -> np.ndarray:
    """Pearson's χ² of contingency tables [..., rows, columns] with no empty row or column."""
    table = np.asarray(table, dtype=np.float64)
    total = table.sum(axis=(-2, -1), keepdims=True)
    expected = table.sum(axis=-1, keepdims=True) * table.sum(axis=-2, keepdims=True) / total
    return ((table - expected) ** 2 / expected).sum(axis=(-2, -1))


def permutation_independence(outcomes: Sequence, groups: Sequence, permutations: int,
                             rng: np.random.Generator) -> tuple[float, float]:
    """χ² of the outcome × group table and its permutation p-value, (1 + #{χ²_perm ≥ χ²}) / (1 +
    permutations), shuffling the group labels among the runs: exact under independence at any count."""
    rows, row_index = np.unique(np.asarray(outcomes), return_inverse=True)
    columns, column_index = np.unique(np.asarray(groups), return_inverse=True)
    r, c = len(rows), len(columns)
    if r < 2 or c < 2:
        return 0.0, 1.0
    shuffled = rng.permuted(np.tile(column_index, (permutations + 1, 1)), axis=1)
    shuffled[0] = column_index  # row 0: the table seen
    cells = (np.arange(permutations + 1)[:, None] * r + row_index[None, :]) * c + shuffled
    tables = np.bincount(cells.ravel(), minlength=(permutations + 1) * r * c).reshape(-1, r, c)
    statistic = chi_square(tables)
    seen = statistic[0]
    exceed = int((statistic[1:] >= seen - 1e-9 * max(1.0, abs(seen))).sum())
    return float(seen), (1 + exceed) / (1 + permutations)


def sidak(p_values: Sequence[float]) -> float:
    """Šidák's combination of independent tests: the probability that the smallest of len(p_values)
    independent null p-values is at most the smallest one seen."""
    return 1.0 - (1.0 - min(p_values)) ** len(p_values) if len(p_values) else 1.0
