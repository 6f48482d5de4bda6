"""Tests and intervals for the small counts studies produce: Wilson intervals, exact one-sided binomial
tests against chance with their power, Fisher's exact test of two groups with its power, the chance that
independent random orders agree, counts pooled over independent cells (exact convolutions), a normal
tail and the power of a one-sided normal test, Student's t quantile, Holm's correction, and a permutation test of
independence between a run's outcome and its group. numpy and the standard library only.

A missing or impossible input (NaN or None, a fractional or negative count, a probability outside [0, 1], a
standard error that is zero or unknown) is refused, never turned into a number: a helper returning a
probability or a statistic returns NaN (which `headway.studies.verdict.judge` calls not testable), one returning
a count or a distribution's shape raises ValueError."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import cache
from statistics import NormalDist

import numpy as np

Z95 = 1.959963984540054  # two-sided 95% normal quantile


def _missing(value: object) -> bool:
    """Whether `value` is a missing value: None, or a float NaN (numpy's included)."""
    return value is None or (isinstance(value, float | np.floating) and math.isnan(value))


def _whole(value: object, least: int | None = 0) -> int | None:
    """`value` as an int when it is a whole number ≥ `least` (None: of any sign; 7, 7.0, numpy integers), else
    None (NaN, None, 7.5, a bool, a string)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    if not math.isfinite(value) or value != int(value) or (least is not None and value < least):
        return None
    return int(value)


def _probability(value: object) -> float | None:
    """`value` as a float when it is a probability in [0, 1], else None (NaN, None, out of range)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.integer | np.floating):
        return None
    return float(value) if 0.0 <= value <= 1.0 else None


def _counts(*values: object) -> list[int] | None:
    """The values as ints when every one is a whole number ≥ 0, else None."""
    counts = [_whole(v) for v in values]
    return None if None in counts else counts  # type: ignore[return-value]


def wilson_interval(successes: int, total: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval for a binomial proportion (sensible at 0% and 100%, unlike the normal one);
    (NaN, NaN) for no trials or counts that are not whole numbers with 0 ≤ successes ≤ total."""
    counts = _counts(successes, total)
    if counts is None or counts[1] == 0 or counts[0] > counts[1] or _missing(z):
        return (math.nan, math.nan)
    successes, total = counts
    p = successes / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return (max(0.0, min(p, centre - half)), min(1.0, max(p, centre + half)))  # holds p despite rounding


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X ≥ k) for X ~ Binomial(n, p), summed exactly: the one-sided p-value of k successes against p
    (NaN for a k or n that is not a whole number, or a p outside [0, 1])."""
    k, n, p = _whole(k, least=None), _whole(n), _probability(p)
    if k is None or n is None or p is None:
        return math.nan
    if k <= 0:
        return 1.0
    return min(1.0, sum(math.comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(k, n + 1)))


def critical_count(n: int, chance: float, alpha: float = 0.05) -> int:
    """Fewest successes out of n that the one-sided exact test calls above `chance` at level alpha
    (n + 1 when no count can); ValueError for an n that is not a count or a chance or level that is no
    probability."""
    if _whole(n) is None or _probability(chance) is None or _probability(alpha) is None:
        raise ValueError(f"critical_count needs a count and two probabilities, not {n!r}, {chance!r}, {alpha!r}")
    n = int(n)
    return next((k for k in range(n + 1) if binomial_tail(k, n, chance) <= alpha), n + 1)


def binomial_power(n: int, chance: float, accuracy: float, alpha: float = 0.05) -> float:
    """Probability that the one-sided exact test at level alpha calls n questions above `chance` when
    the true accuracy is `accuracy`: what a null result at this n can rule out (NaN for inputs that are
    not a count and probabilities)."""
    if _whole(n) is None or None in (_probability(chance), _probability(accuracy), _probability(alpha)):
        return math.nan
    return binomial_tail(critical_count(n, chance, alpha), n, accuracy)


def detectable_accuracy(n: int, chance: float, alpha: float = 0.05, power: float = 0.8) -> float:
    """Smallest true accuracy the one-sided exact test at level alpha detects with probability
    ≥ `power` at n questions (bisection to 1e-6; nan when even accuracy 1 is not detected, or for inputs
    that are not a count and probabilities)."""
    if _whole(n) is None or None in (_probability(chance), _probability(alpha), _probability(power)):
        return math.nan
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
    permutations), shuffling the group labels among the runs: exact under independence at any count.
    (NaN, NaN) when an outcome or a group is missing (None or NaN): a missing label is no category."""
    if any(_missing(v) for v in (*outcomes, *groups)):
        return math.nan, math.nan
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


def stratified_shortfall(strata: Sequence[tuple[Sequence[float], Sequence[float]]], permutations: int,
                         rng: np.random.Generator) -> tuple[float, float, float]:
    """How far `low`'s mean falls below `high`'s, as a share of `high`'s, within each stratum of (high, low)
    values, combined over strata with weights n_high·n_low / (n_high + n_low): the combined shortfall, its
    normal-approximation standard error (each stratum's from its groups' spreads), and the one-sided permutation
    p-value that it is above zero, the group labels shuffled within each stratum only, so a factor that moves
    every value of a stratum (a scale the strata differ in) cannot make the effect. NaN for a value missing or
    a stratum without both groups."""
    if not strata or any(not len(high) or not len(low) for high, low in strata):
        return math.nan, math.nan, math.nan
    values = [np.concatenate([np.asarray(high, dtype=float), np.asarray(low, dtype=float)]) for high, low in strata]
    if not all(np.isfinite(v).all() for v in values):
        return math.nan, math.nan, math.nan
    sizes = [(len(high), len(low)) for high, low in strata]
    weights = np.array([h * lo / (h + lo) for h, lo in sizes])
    combined = np.zeros(permutations + 1)
    variance = 0.0
    for v, (h, lo), w in zip(values, sizes, weights):
        shuffled = rng.permuted(np.tile(v, (permutations + 1, 1)), axis=1)
        shuffled[0] = v  # row 0: the groups seen
        high_mean = shuffled[:, :h].mean(axis=1)
        combined += w * (1 - shuffled[:, h:].mean(axis=1) / high_mean)
        spread = (v[:h].var(ddof=1) / h if h > 1 else 0.0) + (v[h:].var(ddof=1) / lo if lo > 1 else 0.0)
        variance += w ** 2 * spread / v[:h].mean() ** 2
    combined /= weights.sum()
    seen = combined[0]
    exceed = int((combined[1:] >= seen - 1e-9 * max(1.0, abs(seen))).sum())
    return float(seen), math.sqrt(variance) / float(weights.sum()), (1 + exceed) / (1 + permutations)


def sidak(p_values: Sequence[float]) -> float:
    """Šidák's combination of independent tests: the probability that the smallest of len(p_values)
    independent null p-values is at most the smallest one seen (NaN when one of them is missing)."""
    if any(_probability(p) is None for p in p_values):
        return math.nan
    return 1.0 - (1.0 - min(p_values)) ** len(p_values) if len(p_values) else 1.0


def fisher_greater(k1: int, n1: int, k0: int, n0: int) -> float:
    """One-sided p-value of Fisher's exact test that group 1 (k1 successes of n1) succeeds more often than
    group 0 (k0 of n0): P(X ≥ k1) for X hypergeometric with the successes k1 + k0 fixed (NaN for counts that
    are not whole numbers with 0 ≤ k ≤ n)."""
    counts = _counts(k1, n1, k0, n0)
    if counts is None or counts[0] > counts[1] or counts[2] > counts[3]:
        return math.nan
    k1, n1, k0, n0 = counts
    if n1 <= 0 or n0 <= 0:
        return 1.0
    total, successes = n1 + n0, k1 + k0
    denominator = math.comb(total, successes)
    return min(1.0, sum(math.comb(n1, x) * math.comb(n0, successes - x)
                        for x in range(k1, min(n1, successes) + 1)) / denominator)


def fisher_power(n1: int, n0: int, p1: float, p0: float, alpha: float) -> float:
    """Probability that `fisher_greater` rejects at level alpha when group 1 succeeds with probability p1
    and group 0 with p0 (exact: every pair of counts weighed by its binomial probability; NaN for inputs that
    are not counts and probabilities)."""
    if _counts(n1, n0) is None or None in (_probability(p1), _probability(p0), _probability(alpha)):
        return math.nan
    n1, n0 = int(n1), int(n0)
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
    coefficient of x^draws in (Σ_{j<count} x^j/j!)^categories times draws! / categories^draws. NaN for inputs
    that are not whole numbers (at least one category)."""
    counts = _counts(count, draws)
    if counts is None or _whole(categories, least=1) is None:
        return math.nan
    (count, draws), categories = counts, int(categories)
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
    order with probability `share` (else a uniformly random one): what a null result can rule out (NaN for
    inputs that are not counts and probabilities)."""
    if _whole(draws) is None or _whole(categories, least=1) is None or None in (_probability(share),
                                                                               _probability(alpha)):
        return math.nan
    need = next((c for c in range(1, draws + 1) if agreement_tail(c, draws, categories) <= alpha), draws + 1)
    if need > draws:
        return 0.0
    hit = share + (1 - share) / categories  # a seed lands on the fixed order
    return binomial_tail(need, draws, hit)


def normal_tail(z: float) -> float:
    """P(Z ≥ z) for a standard normal Z (NaN, or None, gives NaN)."""
    return math.nan if _missing(z) else 0.5 * math.erfc(z / math.sqrt(2))


def holm(p_values: Sequence[float], alpha: float) -> list[bool]:
    """Holm's step-down rejections at family-wise level alpha, in the order given (a NaN or None never rejects;
    at a level that is no probability nothing does)."""
    p_values = [math.nan if _probability(p) is None else float(p) for p in p_values]
    if _probability(alpha) is None:
        return [False] * len(p_values)
    order = sorted(range(len(p_values)), key=lambda i: (math.isnan(p_values[i]), p_values[i]))
    rejected = [False] * len(p_values)
    m = len(p_values)
    for rank, i in enumerate(order):
        if math.isnan(p_values[i]) or p_values[i] > alpha / (m - rank):
            break
        rejected[i] = True
    return rejected


def binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(X = k) for k = 0…n, X ~ Binomial(n, p): NaN throughout for a p outside [0, 1]; ValueError for an n
    that is not a count (the distribution would have no length)."""
    if _whole(n) is None:
        raise ValueError(f"binomial_pmf needs a count of trials, not {n!r}")
    n = int(n)
    if _probability(p) is None:
        return np.full(n + 1, math.nan)
    return np.array([math.comb(n, k) * p ** k * (1 - p) ** (n - k) for k in range(n + 1)])


def sum_pmf(pmfs: Sequence[np.ndarray]) -> np.ndarray:
    """The distribution of a sum of independent counts, each given by its pmf over 0, 1, 2, …"""
    total = np.ones(1)
    for pmf in pmfs:
        total = np.convolve(total, pmf)
    return total


def upper_tail(pmf: np.ndarray, count: int) -> float:
    """P(X ≥ count) for X with the given pmf over 0, 1, 2, … (NaN for a pmf holding NaN or a count that is
    not a whole number)."""
    pmf = np.asarray(pmf, dtype=float)
    if np.isnan(pmf).any() or _whole(count, least=None) is None:
        return math.nan
    count = int(count)
    return float(min(1.0, pmf[max(0, count):].sum())) if count < len(pmf) else 0.0


def poisson_binomial_tail(k: int, probabilities: Sequence[float]) -> float:
    """P(X ≥ k) for X the number of successes of independent trials with the given success probabilities
    (exact): the power of counting runs that each pass with their own probability (NaN for a probability that
    is missing or outside [0, 1])."""
    if any(_probability(q) is None for q in probabilities):
        return math.nan
    return upper_tail(sum_pmf([np.array([1 - q, q]) for q in probabilities]), k)


def pooled_count_test(observed: int, null: Sequence[np.ndarray], effect: Sequence[np.ndarray]
                      ) -> tuple[float, Callable[[float], float]]:
    """One-sided exact test of a count summed over independent cells: its p-value, P(Σ ≥ observed) under the
    cells' `null` pmfs, and its power at a level, P(Σ ≥ the critical count) under their `effect` pmfs. A pmf
    holding NaN makes both NaN."""
    under_null, under_effect = sum_pmf(null), sum_pmf(effect)

    def power(level: float) -> float:
        if np.isnan(under_null).any() or np.isnan(under_effect).any() or _probability(level) is None:
            return math.nan
        critical = next((c for c in range(len(under_null)) if upper_tail(under_null, c) <= level), len(under_null))
        return upper_tail(under_effect, critical)

    return upper_tail(under_null, observed), power


@cache
def largest_agreement_pmf(draws: int, categories: int) -> np.ndarray:
    """P(M = c) for c = 0…draws, M the largest number of `draws` uniform draws from `categories` categories
    that coincide: the null distribution of the seeds sharing a cell's most common order (U! categories).
    ValueError for inputs that are not counts."""
    if _whole(draws) is None or _whole(categories, least=1) is None:
        raise ValueError(f"largest_agreement_pmf needs counts, not {draws!r} and {categories!r}")
    tail = [agreement_tail(c, draws, categories) for c in range(draws + 2)]
    tail[0] = 1.0
    return np.clip(np.array([tail[c] - tail[c + 1] for c in range(draws + 1)]), 0.0, 1.0)


def z_score(gap: float, noise: float) -> float:
    """`gap` in units of `noise`, its standard error. NaN when either is missing, and when the noise is not
    positive: every noise headway tests against is an estimated standard error, and an estimate of exactly 0
    says the spread was not measured (one chain, one draw, a bias and noise both unrecorded), not that there is
    none, so a gap over it is no infinite significance but an untestable one."""
    if _missing(gap) or _missing(noise) or not noise > 0:
        return math.nan
    return gap / noise


def normal_power(effect: float, noise: float, level: float) -> float:
    """Probability that a one-sided z-test at `level` rejects when the true gap is `effect` and its standard
    error `noise`: P(Z > z_(1−level) − effect / noise) (NaN for a level outside (0, 1), and where `z_score` is:
    a missing effect or noise, or a noise that is not positive)."""
    if _missing(level) or not 0 < level < 1:
        return math.nan
    return normal_tail(NormalDist().inv_cdf(1 - level) - z_score(effect, noise))


def t_quantile(q: float, df: int) -> float:
    """The `q` quantile of Student's t with `df` degrees of freedom (the bound of a mean over few runs): its
    distribution function, integrated in θ = arctan(x / √df) where the density is the smooth cos^(df−1) θ (Simpson's
    rule), inverted by bisection, to about 1e-6 (NaN for q outside (0, 1) or df below 1)."""
    if _missing(q) or not 0 < q < 1 or _whole(df, 1) is None:
        return math.nan
    scale = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(math.pi)

    def cdf(x: float) -> float:
        theta = np.linspace(0.0, math.atan(abs(x) / math.sqrt(df)), 2001)
        density = np.cos(theta) ** (df - 1)
        simpson = (theta[1] - theta[0]) / 3 * (density[0] + density[-1] + 4 * density[1:-1:2].sum()
                                               + 2 * density[2:-1:2].sum())
        return 0.5 + math.copysign(scale * simpson, x)

    low, high = -1.0, 1.0
    while cdf(low) > q:
        low *= 2
    while cdf(high) < q:
        high *= 2
    for _ in range(60):
        middle = (low + high) / 2
        low, high = (middle, high) if cdf(middle) < q else (low, middle)
    return (low + high) / 2


def normal_interval(gap: float, noise: float, z: float = Z95) -> tuple[float, float]:
    """The two-sided 95% normal interval of `gap` with standard error `noise` ((NaN, NaN) for a missing gap or
    noise, or a negative noise)."""
    if _missing(gap) or _missing(noise) or noise < 0:
        return math.nan, math.nan
    return gap - z * noise, gap + z * noise
