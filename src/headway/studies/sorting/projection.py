"""What a fresh confirmation of the sorting study's rise-and-fall claim could decide, projected from a traced study
folder: the bias each stability statistic gives on its runs, and the claim's power for N fresh runs like them at a
stated bias, by the verdict's own per-run and claim power (`rise_fall.run_power`, `rise_fall.claim_power`).

A projection is a screen's arithmetic, not a verdict: it assumes fresh runs have the folder's peaks, chain noise and
checkpoints, and it is what a confirmation's design states before its data (docs/study-sorting.md).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd

from headway.analysis.development import Development, development
from headway.analysis.llc.stability import POINTS, model_stability
from headway.analysis.llc.validity import BIAS_STATISTICS
from headway.studies.sorting.rise_fall import claim_power, run_power, run_test
from headway.studies.sorting.rules import SortingRules

TARGET_POWER = 0.8  # the power a "not reproduced" needs (the studies' judge)


def folder_rules(folder: Path) -> SortingRules:
    """The rules the folder was judged by (its summary.json), today's defaults for any rule added since."""
    return SortingRules.from_dict(json.loads((folder / "summary.json").read_text())["rules"])


def traced_runs(folder: Path, rules: SortingRules) -> list[Development]:
    """Each traced run of a sorting study folder (its llc_curve.csv and its runs' metrics) as the verdict reads it,
    with no bias weighed (a projection weighs its own)."""
    curve_path = folder / "llc_curve.csv"
    if not curve_path.exists():
        raise FileNotFoundError(f"{curve_path} does not exist: the folder traced no LLC to project from")
    curve = pd.read_csv(curve_path, dtype={"warnings": str, "invalid": str})
    curve[["warnings", "invalid"]] = curve[["warnings", "invalid"]].fillna("")  # "" reads back as missing
    metrics = pd.concat([pd.read_parquet(path) for path in sorted(folder.glob("runs/*/metrics.parquet"))])
    return [development(str(run_id), metrics, curve, rules.llc_fall, rules.llc_validity(),
                        resolved_only=rules.llc_resolved_only) for run_id in sorted(curve.run_id.unique())]


def measured_biases(folder: Path, runs: list[Development], rules: SortingRules) -> dict[str, float]:
    """The bias each statistic (`BIAS_STATISTICS`) gives on the folder's llc_stability.csv (NaN: not measured)."""
    path = folder / "llc_stability.csv"
    if not path.exists():
        return {statistic: math.nan for statistic in BIAS_STATISTICS}
    table = pd.read_csv(path)
    trace = pd.concat([run.llc for run in runs])
    return {statistic: model_stability(table, trace, rules.llc_validity(), POINTS, statistic).bias
            for statistic in BIAS_STATISTICS}


def projected_power(runs: list[Development], rules: SortingRules, bias: float, count: int, alpha: float) -> float:
    """The claim's power at `alpha` for `count` fresh runs, each like one of the folder's usable `runs` in turn (their
    peaks, chain noise and candidate peaks), with `bias` weighed (NaN when none is usable)."""
    powers = []
    for traced in runs:
        tested = run_test(traced, rules)
        if not tested.unusable:
            powers.append(run_power(traced, tested.candidates, rules, bias))
    if not powers:
        return math.nan
    return claim_power([powers[i % len(powers)] for i in range(count)], rules, alpha)


def largest_bias(runs: list[Development], rules: SortingRules, count: int, alpha: float,
                 target: float = TARGET_POWER) -> float:
    """The largest bias at which `count` fresh runs reach `target` power at `alpha` (bisection to 0.01 points; 0
    when even no bias does not, NaN when no run is usable)."""
    unbiased = projected_power(runs, rules, 0.0, count, alpha)
    if math.isnan(unbiased):
        return math.nan
    if unbiased < target:
        return 0.0
    low, high = 0.0, 0.5
    while high - low > 1e-4:
        middle = (low + high) / 2
        low, high = (middle, high) if projected_power(runs, rules, middle, count, alpha) >= target else (low, middle)
    return low


def power_table(runs: list[Development], rules: SortingRules, biases: list[float], counts: list[int],
                alpha: float) -> pd.DataFrame:
    """The projected power for each bias (rows) and number of fresh runs (columns), with a last row holding the
    largest bias at which each count reaches 0.8."""
    rows = {f"bias {bias:.2%}": [projected_power(runs, rules, bias, count, alpha) for count in counts]
            for bias in biases}
    rows[f"largest bias for power {TARGET_POWER:g}"] = [largest_bias(runs, rules, count, alpha) for count in counts]
    return pd.DataFrame.from_dict(rows, orient="index", columns=[f"{count} runs" for count in counts])
