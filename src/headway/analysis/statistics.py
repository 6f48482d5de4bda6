"""Tests and intervals for the small counts studies produce: Wilson intervals, exact one-sided binomial
tests against chance with their power, Fisher's exact test of two groups with its power, the chance that
independent random orders agree, counts pooled over independent cells (exact convolutions), a normal
tail and the power of a one-sided normal test, Holm's correction, and a permutation test of
independence between a run's outcome and its group. numpy and the standard library only."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from statistics import NormalDist

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


def fisher_greater(k1: int, n1: int, k0: int, n0: int) -> float:
    """One-sided p-value of Fisher's exact test that group 1 (k1 successes of n1) succeeds more often than
    group 0 (k0 of n0): P(X ≥ k1) for X hypergeometric with the successes k1 + k0 fixed."""
    if n1 <= 0 or n0 <= 0:
        return 1.0
    total, successes = n1 + n0, k1 + k0
    denominator = math.comb(total, successes)
    return min(1.0, sum(math.comb(n1, x) * math.comb(n0, successes - x)
                        for x in range(k1, min(n1, successes) + 1)) / denominator)


def fisher_power(n1: int, n0: int, p1: float, p0: float, alpha: float) -> float:
    """Probability that `fisher_greater` rejects at level alpha when group 1 succeeds with probability p1
    and group 0 with p0 (exact: every pair of counts weighed by its binomial probability)."""
    if n1 <= 0 or n0 <= 0:
        return 0.0
    power = 0.0
    for k1 in range(n1 + 1):
        w1 = math.comb(n1, k1) * p1 ** k1 * (1 - p1) ** (n1 - k1)
        for k0 in range(n0 + 1):
            if fisher_greater(k1, n1, k0, n0) <= alpha:
                power += w1 * math.comb(n0, k0) * p0 ** k0 * (1 - p0) ** (n0 - k0)
    return min(1.0, power)


def agreement_tail(count: int, draws: int, categories: int) -> float:
    """P(some category occurs ≥ `count` times) among `draws` independent uniform draws from `categories`
    categories: the chance that `count` of `draws` random orders of U units (U! categories) coincide.
    Exact: the complement counts the sequences using every category fewer than `count` times, the
    coefficient of x^draws in (Σ_{j<count} x^j/j!)^categories times draws! / categories^draws."""
    if count <= 1:
        return 1.0 if draws >= 1 else 0.0
    if count > draws:
        return 0.0
    base = [1.0 / math.factorial(j) for j in range(min(count, draws + 1))]
    poly = [1.0]
    for _ in range(categories):  # truncated product; categories is at most a few hundred here
        poly = [sum(poly[i] * base[d - i] for i in range(max(0, d - len(base) + 1), min(d, len(poly) - 1) + 1))
                for d in range(min(draws, len(poly) - 1 + len(base) - 1) + 1)]
    below = poly[draws] * math.factorial(draws) / categories ** draws if draws < len(poly) else 0.0
    return min(1.0, max(0.0, 1.0 - below))


def agreement_power(draws: int, categories: int, share: float, alpha: float) -> float:
    """Probability that `agreement_tail` rejects at level alpha when each of `draws` seeds follows one fixed
    order with probability `share` (else a uniformly random one): what a null result can rule out."""
    need = next((c for c in range(1, draws + 1) if agreement_tail(c, draws, categories) <= alpha), draws + 1)
    if need > draws:
        return 0.0
    hit = share + (1 - share) / categories  # a seed lands on the fixed order
    return binomial_tail(need, draws, hit)


def normal_tail(z: float) -> float:
    """P(Z ≥ z) for a standard normal Z (NaN stays NaN)."""
    return 0.5 * math.erfc(z / math.sqrt(2)) if z == z else math.nan


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections at family-wise level alpha, in the order given (a NaN never rejects)."""
    order = sorted(range(len(p_values)), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]) or p_values[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(X = k) for k = 0…n, X ~ Binomial(n, p)."""
    return np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)])


def sum_pmf(pmfs: Sequence[np.ndarray]) -> np.ndarray:
    """The distribution of a sum of independent counts, each given by its pmf over 0, 1, 2, …"""
    total = np.ones(1)
    for pmf in pmfs:
        total = np.convolve(total, pmf)
    return total


def upper_tail(pmf: np.ndarray, count: int) -> float:
    """P(X ≥ count) for X with the given pmf over 0, 1, 2, …"""
    return float(min(1.0, pmf[max(0, count):].sum())) if count < len(pmf) else 0.0


def poisson_binomial_tail(k: int, probabilities: Sequence[float]) -> float:
    """P(X ≥ k) for X the number of successes of independent trials with the given success probabilities
    (exact): the power of counting runs that each pass with their own probability."""
    return upper_tail(sum_pmf([np.array([1 - q, q]) for q in probabilities]), k)


def pooled_count_test(observed: int, null: Sequence[np.ndarray], effect: Sequence[np.ndarray]
                      ) -> tuple[float, Callable[[float], float]]:
    """One-sided exact test of a count summed over independent cells: its p-value, P(Σ ≥ observed) under the
    cells' `null` pmfs, and its power at a level, P(Σ ≥ the critical count) under their `effect` pmfs."""
    under_null, under_effect = sum_pmf(null), sum_pmf(effect)

    def power(level: float) -> float:
        critical = next((c for c in range(len(under_null)) if upper_tail(under_null, c) <= level), len(under_null))
        return upper_tail(under_effect, critical)

    return upper_tail(under_null, observed), power


@cache
def largest_agreement_pmf(draws: int, categories: int) -> np.ndarray:
    """P(M = c) for c = 0…draws, M the largest number of `draws` uniform draws from `categories` categories
    that coincide: the null distribution of the seeds sharing a cell's most common order (U! categories)."""
    tail = [agreement_tail(c, draws, categories) for c in range(draws + 2)]
    tail[0] = 1.0
    return np.clip(np.array([tail[c] - tail[c + 1] for c in range(draws + 1)]), 0.0, 1.0)


def z_score(gap: float, noise: float) -> float:
    """`gap` in units of `noise`; with no noise, ±inf by the sign of the gap (0 for none)."""
    if noise > 0:
        return gap / noise
    return math.copysign(math.inf, gap) if gap else 0.0


def normal_power(effect: float, noise: float, level: float) -> float:
    """Probability that a one-sided z-test at `level` rejects when the true gap is `effect` and its standard
    error `noise`: P(Z > z_(1−level) − effect / noise) (NaN for a level outside (0, 1))."""
    if not 0 < level < 1:
        return math.nan
    return normal_tail(NormalDist().inv_cdf(1 - level) - z_score(effect, noise))


def normal_interval(gap: float, noise: float, z: float = Z95) -> tuple[float, float]:
    """The two-sided 95% normal interval of `gap` with standard error `noise`."""
    return gap - z * noise, gap + z * noise
