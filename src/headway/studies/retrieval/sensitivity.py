"""Every verdict that rests on a threshold, recomputed over a sweep of it, so the report shows where
each verdict flips (docs/study-retrieval.md, "Threshold sensitivity"). The thresholds themselves are
fixed in advance (`rules`, `tasks.retrieval.roles`, `tasks.retrieval.faithfulness`), not on a
study's own models; the sweep shows how much a verdict depends on them."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import pandas as pd

from headway.studies.retrieval import rules
from headway.studies.retrieval.depth import depth_table, measured_min_layers
from headway.studies.retrieval.verdicts import (
    circuit_carries_answer,
    depth_law,
    reach_beyond_one_hop_per_layer,
    stacked_heads_compose,
)
from headway.studies.verdict import share_status
from headway.tasks.retrieval import faithfulness, roles

SOLVED_SWEEP = (0.5, 0.7, 0.8, 0.9, 0.95)
NEAR_BASELINE_SWEEP = (0.05, 0.1, 0.2)
OTHER_HEAD_SWEEP = (0.02, 0.05, 0.1)
SUFFICIENT_SWEEP = (0.6, 0.8, 0.9)
NULL_LEVEL_SWEEP = (0.02, 0.05, 0.1)
PATH_SHARE_SWEEP = (0.25, 0.5, 0.75)
REACH_SWEEP = (0.8, 0.9, 0.95)


def verdict_sensitivity(metrics: pd.DataFrame, facets: tuple[str, ...], mechanism: pd.DataFrame,
                        circuits: pd.DataFrame, final: pd.DataFrame, paths: pd.DataFrame,
                        reach_at: Mapping[float, pd.DataFrame]) -> pd.DataFrame:
    """Rows (claim, threshold, value, default, status): each threshold-dependent verdict at every value
    of its sweep, the other thresholds at their defaults. `circuits` is the per-model circuit_sensitivity
    table, `reach_at` the probe reach table per probe-accuracy threshold."""
    rows: list[dict] = []

    def sweep(claim: str, threshold: str, values: Iterable, default: float, status: Callable[[float], str | None]) -> None:
        for value in values:
            found = status(value)
            if found is not None:
                rows.append({"claim": claim, "threshold": threshold, "value": value, "default": value == default,
                             "status": found})

    def depth_status(threshold: float) -> str:
        return depth_law(measured_min_layers(depth_table(metrics, threshold=threshold, by=facets), by=facets)).status

    sweep("depth law", "solved (mean final-hop accuracy)", SOLVED_SWEEP, rules.SOLVED, depth_status)
    solved = mechanism[mechanism.solved]
    if len(solved):
        def circuit_status(**kwargs: float) -> str:
            return share_status(rules.carries_answer(solved, **kwargs))

        claim = "named heads carry the answer"
        sweep(claim, "near baseline", NEAR_BASELINE_SWEEP, rules.NEAR_BASELINE, lambda v: circuit_status(near=v))
        sweep(claim, "other head limit", OTHER_HEAD_SWEEP, rules.OTHER_HEAD_LIMIT,
              lambda v: circuit_status(other_limit=v))
        sweep(claim, "sufficient (faithfulness)", SUFFICIENT_SWEEP, faithfulness.SUFFICIENT,
              lambda v: circuit_status(sufficient=v))
        sweep(claim, "random-set p level", NULL_LEVEL_SWEEP, faithfulness.NULL_LEVEL,
              lambda v: circuit_status(null_level=v))
        rows.extend(_rule_sweep(claim, solved, circuits))
    if len(paths):
        def path_status(share: float) -> str | None:
            found = stacked_heads_compose(paths, share)
            return None if found is None else found.status

        sweep("stacked heads read each other", "path share", PATH_SHARE_SWEEP, rules.PATH_SHARE, path_status)

    def reach_status(threshold: float) -> str | None:
        found = reach_beyond_one_hop_per_layer(final, reach_at[threshold])
        return None if found is None else found.status

    sweep("reach beyond one hop per layer", "probe accuracy", REACH_SWEEP, rules.REACH_ACCURACY, reach_status)
    return pd.DataFrame(rows, columns=["claim", "threshold", "value", "default", "status"])


def _rule_sweep(claim: str, solved: pd.DataFrame, circuits: pd.DataFrame) -> list[dict]:
    """The circuit verdict over the role threshold × minimum drop of the rule (the circuit renamed at
    each), judged without the random-set null, which is measured at the default rule only."""
    if circuits.empty:
        return []
    merged = circuits.merge(solved[["run_id", "chance", "clean_accuracy", "all_ablated_accuracy"]], on="run_id")
    merged["faithfulness"] = faithfulness.faithfulness(merged.rest_ablated_accuracy.to_numpy(),
                                                       merged.clean_accuracy.to_numpy(),
                                                       merged.all_ablated_accuracy.to_numpy())
    rows = []
    for (threshold, min_drop), cell in merged.groupby(["role_threshold", "min_drop"]):
        rows.append({"claim": claim, "threshold": "role threshold × min drop (no random-set null)",
                     "value": f"{threshold:g} × {min_drop:g}",
                     "default": threshold == roles.THRESHOLD and min_drop == roles.MIN_DROP,
                     "status": share_status(rules.carries_answer(cell, null_level=None))})
    return rows


def flips(sensitivity: pd.DataFrame) -> list[str]:
    """One sentence per (claim, threshold) whose verdict changes over its sweep: which values give which status."""
    out = []
    for (claim, threshold), group in sensitivity.groupby(["claim", "threshold"], sort=False):
        if group.status.nunique() > 1:
            parts = [f"{status} at {', '.join(str(v) for v in part.value)}" for status, part in group.groupby("status", sort=False)]
            out.append(f"{claim} — {threshold}: " + "; ".join(parts))
    return out
