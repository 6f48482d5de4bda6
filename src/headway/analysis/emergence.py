"""When head roles emerge during training, in which order, and how stable that order is across seeds.

The rule: a unit (head role or hop) emerges at the first checkpoint from which its score stays at or
above s0 + fraction·(s1 − s0), where s0 and s1 are its first and final scores; if s1 − s0 < min_rise it
never emerged (NaN).
"""

from __future__ import annotations

from collections import Counter
from itertools import combinations

import numpy as np
import pandas as pd

from headway.errors import ConfigError

CURVE_COLUMNS = ("seed", "unit", "step", "score")


def emergence_step(steps: np.ndarray, scores: np.ndarray, fraction: float = 0.5, min_rise: float = 0.2) -> float:
    """First step from which `scores` stays at or above s0 + fraction·(s1 − s0); NaN if the rise s1 − s0
    is below `min_rise`. Requiring it to stay above makes a transient spike not count as emergence."""
    steps = np.asarray(steps, dtype=float)
    scores = np.asarray(scores, dtype=float)
    _check_curve(steps, scores)
    if not 0.0 < fraction < 1.0:
        raise ConfigError(f"fraction = {fraction!r} must be strictly between 0 and 1")
    if not min_rise >= 0.0:
        raise ConfigError(f"min_rise = {min_rise!r} must be >= 0")
    first, final = scores[0], scores[-1]
    if final - first < min_rise:
        return float("nan")
    level = min(first + fraction * (final - first), final)  # min() guards against rounding above s1
    return stays_above_from(steps, scores, level)


def stays_above_from(steps: np.ndarray, scores: np.ndarray, level: float) -> float:
    """First step from which `scores` stays at or above `level` to the end; NaN if the last score is below."""
    steps, scores = np.asarray(steps, dtype=float), np.asarray(scores, dtype=float)
    stays_above = np.minimum.accumulate(scores[::-1])[::-1] >= level
    return float(steps[np.argmax(stays_above)]) if stays_above[-1] else float("nan")


def _check_curve(steps: np.ndarray, scores: np.ndarray) -> None:
    """Raise ConfigError unless steps and scores are finite 1-D arrays of one length ≥ 2, steps increasing."""
    if steps.ndim != 1 or scores.ndim != 1 or len(steps) != len(scores):
        raise ConfigError(f"steps (shape {steps.shape}) and scores (shape {scores.shape}) must be 1-D "
                          "arrays of the same length")
    if len(steps) < 2:
        raise ConfigError(f"a curve has {len(steps)} checkpoint(s); at least 2 are needed")
    if not np.all(np.isfinite(scores)):
        raise ConfigError(f"scores {scores.tolist()} contain NaN or infinite values; all must be finite")
    if not np.all(np.diff(steps) > 0):
        raise ConfigError(f"steps {steps.tolist()} must be strictly increasing")


def emergence_table(curves: pd.DataFrame, fraction: float = 0.5, min_rise: float = 0.2) -> pd.DataFrame:
    """One row per (seed, unit) of a long curves table (seed, unit, step, score): its emergence step
    (NaN if never) and its initial and final scores, so orders can be compared across seeds."""
    missing = [c for c in CURVE_COLUMNS if c not in curves.columns]
    if missing:
        raise ConfigError(f"curves lack column(s) {missing}; required are {list(CURVE_COLUMNS)}")
    rows = []
    for (seed, unit), curve in curves.sort_values("step").groupby(["seed", "unit"], sort=True):
        steps, scores = curve.step.to_numpy(float), curve.score.to_numpy(float)
        try:
            step = emergence_step(steps, scores, fraction, min_rise)
        except ConfigError as error:
            raise ConfigError(f"seed {seed}, unit {unit!r}: {error}") from error
        rows.append({"seed": seed, "unit": unit, "emergence_step": step, "initial_score": float(scores[0]),
                     "final_score": float(scores[-1])})
    return pd.DataFrame(rows, columns=["seed", "unit", "emergence_step", "initial_score", "final_score"])


def emergence_orders(table: pd.DataFrame) -> pd.DataFrame:
    """Per seed, the units that emerged sorted by emergence step (ties by name, flagged in `ties`)."""
    rows = []
    for seed, group in table.groupby("seed", sort=True):
        emerged = group.dropna(subset=["emergence_step"]).sort_values(["emergence_step", "unit"])
        order = tuple(str(unit) for unit in emerged.unit)
        rows.append({"seed": seed, "order": order, "ties": bool(emerged.emergence_step.duplicated().any()),
                     "n_units": len(order)})
    return pd.DataFrame(rows, columns=["seed", "order", "ties", "n_units"])


def kendall_tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's τ-b of two paired samples (ties lower the denominator); NaN if either is all ties."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    upper = np.triu_indices(len(x), k=1)
    sign_x = np.sign(x[:, None] - x[None, :])[upper]
    sign_y = np.sign(y[:, None] - y[None, :])[upper]
    untied = np.count_nonzero(sign_x) * np.count_nonzero(sign_y)
    if untied == 0:
        return float("nan")
    return float(np.sum(sign_x * sign_y) / np.sqrt(untied))


def order_consistency(table: pd.DataFrame) -> dict:
    """How reproducible the emergence order is over seeds: the most common order and its share, and
    Kendall τ-b between every pair of seeds on the units that emerged in both (pairs with < 2 such
    units, or τ undefined, are skipped). The most common order breaks count ties by lowest seed;
    `tied_seeds` counts seeds in which two units emerged at the same checkpoint, whose order is
    then only the alphabetical tie-break, not evidence."""
    orders = emergence_orders(table)
    counts = Counter(orders.order)
    most_common, count = counts.most_common(1)[0] if counts else ((), 0)
    steps = {seed: group.dropna(subset=["emergence_step"]).set_index("unit").emergence_step
             for seed, group in table.groupby("seed", sort=True)}
    taus = []
    for first, second in combinations(steps, 2):
        common = sorted(set(steps[first].index) & set(steps[second].index))
        if len(common) < 2:
            continue
        tau = kendall_tau_b(steps[first][common].to_numpy(), steps[second][common].to_numpy())
        if not np.isnan(tau):
            taus.append(tau)
    n_seeds = len(orders)
    return {"seeds": n_seeds,
            "most_common_order": list(most_common),
            "share_most_common": float(count / n_seeds) if n_seeds else float("nan"),
            "kendall_tau_mean": float(np.mean(taus)) if taus else float("nan"),
            "kendall_tau_min": float(np.min(taus)) if taus else float("nan"),
            "pairs": len(taus),
            "tied_seeds": int(orders.ties.sum())}
