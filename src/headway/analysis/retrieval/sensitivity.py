"""The circuit rule recomputed over its thresholds, so a report can show where a verdict flips.

For each role threshold (step 1 of the rule) and each minimum drop (step 2) of the sweeps given (the
study's rules say which): the circuit the rule names, its size, the accuracy with it ablated and with
everything else ablated, and the largest single-head drop outside it. The random-set null of
`faithfulness` is measured at the study's own thresholds only (it costs 2 × its random sets of forwards).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from headway.analysis.retrieval.interventions import HeadIntervention
from headway.analysis.retrieval.roles import attention_roles, circuit_membership, group_drops, head_grid

def circuit_sensitivity(heads: pd.DataFrame, intervention: HeadIntervention, role_thresholds: Sequence[float],
                        min_drops: Sequence[float]) -> pd.DataFrame:
    """One row per (instance, role threshold, min drop) from `heads` (head scores with head_effects'
    drops): circuit_heads, circuit_ablated_accuracy, rest_ablated_accuracy, max_other_head_drop."""
    n, layers, n_heads = intervention.model.n_instances, intervention.layers, intervention.heads
    rows = []
    for threshold in role_thresholds:
        roled = attention_roles(heads, threshold).sort_values(["instance", "layer", "head"]).reset_index(drop=True)
        roled["group_drop"], roled["member_drop"] = group_drops(roled, intervention)
        circuits = [roled.assign(in_circuit=circuit_membership(roled, m)[0]) for m in min_drops]
        grids = [[head_grid(c[(c.instance == e) & c.in_circuit], layers, n_heads) for c in circuits] for e in range(n)]
        ablated = intervention.ablated_accuracy([[g for grid in mine for g in (grid, ~grid)] for mine in grids])
        for e in range(n):
            for k, (min_drop, circuit) in enumerate(zip(min_drops, circuits, strict=True)):
                outside = circuit[(circuit.instance == e) & ~circuit.in_circuit]
                rows.append({"instance": e, "role_threshold": threshold, "min_drop": min_drop,
                             "circuit_heads": int(grids[e][k].sum()),
                             "circuit_ablated_accuracy": ablated[e][2 * k], "rest_ablated_accuracy": ablated[e][2 * k + 1],
                             "max_other_head_drop": float(outside[["mean_drop", "zero_drop"]].max().max())
                             if len(outside) else 0.0})
    return pd.DataFrame(rows)
