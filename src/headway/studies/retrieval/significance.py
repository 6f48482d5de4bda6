"""What the circuit verdict needs beyond `headway.analysis.statistics`: the rate at which a circuit no better
than random sets passes its random-set test, and the chance that a circuit can beat that null at all."""

from __future__ import annotations

import math
from headway.analysis.statistics import binomial_tail


def null_pass_rate(sets: int, level: float) -> float:
    """The largest chance that a random-set p-value, (1 + #sets at least as good) / (1 + sets), is ≤ `level`
    when the circuit is no better than a random set of its size: ⌊level·(sets + 1)⌋ / (sets + 1)."""
    return math.floor(level * (sets + 1) + 1e-9) / (sets + 1)


def random_set_reach(sets: int, heads: int, size: int, level: float) -> float:
    """The chance that a circuit of `size` of `heads` heads, better than every other set of its size, gets a
    random-set p ≤ `level` from `sets` sets drawn uniformly (with replacement): only draws of the circuit
    itself tie with it. 0 for a circuit of every head (each draw is the circuit) or with no sets."""
    if sets <= 0 or not 0 < size < heads:
        return 0.0
    allowed = math.floor(level * (sets + 1) + 1e-9) - 1  # draws of the circuit itself the p-value can bear
    if allowed < 0:
        return 0.0
    return 1.0 - binomial_tail(allowed + 1, sets, 1 / math.comb(heads, size))
