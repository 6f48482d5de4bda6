"""Exact tests for the small counts studies produce."""

from __future__ import annotations

from math import comb


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the table [[a, b], [c, d]]: the probability, with
    the margins fixed, of a table no more likely than the one seen."""
    row, col, n = a + b, a + c, a + b + c + d

    def probability(x: int) -> float:
        return comb(col, x) * comb(n - col, row - x) / comb(n, row)

    seen = probability(a)
    return min(1.0, sum(p for x in range(max(0, row + col - n), min(row, col) + 1)
                        if (p := probability(x)) <= seen * (1 + 1e-9)))
