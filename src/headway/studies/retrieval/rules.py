"""The study's pre-specified thresholds and the per-run check of a named circuit, in one place so the
verdicts and the threshold sweeps read the same rule (docs/study-retrieval.md, "Verdicts")."""

from __future__ import annotations

import pandas as pd

from headway.tasks.retrieval.faithfulness import NULL_LEVEL, SUFFICIENT

SOLVED = 0.9  # mean final-hop accuracy of a cell (or a run) that counts as solved
NEAR_BASELINE = 0.1  # a circuit "carries the answer" when ablating it leaves at most baseline + this,
OTHER_HEAD_LIMIT = 0.05  # ... ablating any single head outside it costs less than this,
# ... it keeps faithfulness ≥ SUFFICIENT alone, and random head sets of its size kept alone do as well
# with p ≤ NULL_LEVEL only
REACH_ACCURACY = 0.9  # probe accuracy at which a hop counts as decoded (probe reach)
PATH_SHARE = 0.5  # a receiver reads its senders when the path carries ≥ this share of their direct flip
FORMULATION = ("supervision", "attention", "order", "layout")  # what one panel of the depth phase diagram holds fixed


def carries_answer(table: pd.DataFrame, near: float = NEAR_BASELINE, other_limit: float = OTHER_HEAD_LIMIT,
                   sufficient: float = SUFFICIENT, null_level: float | None = NULL_LEVEL) -> pd.Series:
    """The circuit check per run: ablating the circuit leaves ≤ chance + `near`, no single head outside
    it costs ≥ `other_limit`, it alone keeps faithfulness ≥ `sufficient`, and (unless `null_level` is
    None) random head sets of its size kept alone are as sufficient with p ≤ `null_level` only. Necessity
    is not held against random sets: where one head is a bottleneck, every set holding it is as necessary
    (a k-set of N heads holds it with probability k/N), so that comparison cannot single a circuit out."""
    passes = ((table.circuit_ablated_accuracy <= table.chance + near) & (table.max_other_head_drop < other_limit)
              & (table.faithfulness >= sufficient))
    if null_level is not None:
        passes &= table.p_sufficient <= null_level
    return passes
