"""The power a sorting plan gives each mode claim before anything trains, if every run learns: what sizes a
scale. The binomial claims' power is exact; the gap claim's is read off `tables.gap_power`'s simulated
studies on the planned grid, with each data value's δ̄ measured on the lists the analysis reads."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from headway.analysis.statistics import binomial_power
from headway.studies.sorting.plan import SortingPlan, data_label
from headway.studies.sorting.rules import SortingRules
from headway.tasks.sorting.task import generate

# The claims a design can be sized for before training; the LLC claims' power depends on how many estimates the
# sampler's checks accept and on their spread, known only after sampling.
SIZED_CLAIMS = ("learns-to-sort", "splitting", "simple-modes", "copy-suppression", "gap-decides-mode")


def planned_final(plan: SortingPlan) -> pd.DataFrame:
    """One row per planned run as the final table will hold it if the run learns: its data value, the δ̄ of
    the lists the analysis reads for that value, weight decay and seed (the mode is left for a simulation)."""
    from headway.studies.sorting.analyse import ANALYSIS_SEED

    runs = plan.runs()
    gaps = {}
    for run in runs:
        label = data_label(run)
        if label not in gaps:
            gaps[label] = float(generate(run.task, plan.examples, np.random.default_rng(ANALYSIS_SEED)).gaps.mean())
    return pd.DataFrame([{"run_id": f"planned-{i}", "data": data_label(run), "mean_gap": gaps[data_label(run)],
                          "weight_decay": run.train.weight_decay, "seed": run.seed, "val_accuracy": 1.0,
                          "mode": "unknown"} for i, run in enumerate(runs)])


def design_power(plan: SortingPlan, rules: SortingRules, claims: int) -> dict[str, float]:
    """Each sized claim's power for its stated effect at α / `claims` (the strictest Holm level when `claims`
    are tested), if every run of `plan` learns; the gap claim's is NaN when every data value has one δ̄."""
    from headway.studies.sorting.tables import gap_power_at, gap_test_with_power

    final = planned_final(plan)
    level = rules.alpha / claims
    n = len(final)
    per_decay = final.groupby("weight_decay").size()
    both = (per_decay.index == 0).any() and (per_decay.index > 0).any()  # the splitting claim needs both
    gap_test = gap_test_with_power(final, rules)
    return {
        "learns-to-sort": binomial_power(n, rules.learning_null, rules.learning_effect, level),
        "splitting": (math.prod(binomial_power(int(k), rules.splitting_noise_rate, rules.splitting_effect, level)
                                for k in per_decay) if both else 0.0),
        "simple-modes": binomial_power(n, rules.simple_null, rules.simple_effect, level),
        "copy-suppression": binomial_power(n, rules.copy_suppression_null, rules.copy_suppression_effect, level),
        "gap-decides-mode": gap_power_at(gap_test, level) if gap_test is not None else 0.0,
    }
