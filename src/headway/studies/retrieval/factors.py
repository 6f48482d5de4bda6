"""Which factor of the formulation elicits composition: where a grid trains two levels of one factor (link
order, supervision, attention) with the rest held fixed, the runs of D > L cells that solve by composing
links are counted per level and the two levels compared by Fisher's exact test (docs/study-retrieval.md,
"Which factor composes"). Each comparison is two-sided (either level may be the one that composes), so its p is
twice the smaller one-sided p; its power is that of detecting `effect_factor_high` against `effect_factor_low`."""

from __future__ import annotations

import pandas as pd

from headway.analysis.statistics import fisher_greater, fisher_power
from headway.studies.retrieval.rules import FORMULATION, RetrievalRules

FACTORS = ("order", "supervision", "attention")  # the factors compared, each with the others held fixed
COLUMNS = ["factor", "held", "layers", "hops", "level_a", "composed_a", "runs_a", "level_b", "composed_b", "runs_b",
           "p_value", "power"]


def factor_table(final: pd.DataFrame, mechanisms: pd.DataFrame, rules: RetrievalRules) -> pd.DataFrame:
    """One row per factor × held-fixed formulation × D > L cell where the grid trained two levels of the factor:
    runs composing (solved and classed compositional) at each level, the two-sided Fisher p and the power. A run
    whose mechanism is not classifiable is left out of its level's count."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic") & (final.hops > final.layers)]
    if plain.empty or mechanisms.empty:
        return pd.DataFrame(columns=COLUMNS)
    runs = plain.merge(mechanisms[["run_id", "mechanism"]], on="run_id", how="left")
    runs = runs[runs.mechanism != "not classifiable"]  # no evidence either way: left out, never a failure
    runs["composed"] = runs.solved & (runs.mechanism == "compositional")
    rows = []
    for factor in FACTORS:
        held = [c for c in FORMULATION if c != factor]
        for key, cell in runs.groupby([*held, "layers", "hops"]):
            levels = sorted(cell[factor].unique())
            if len(levels) != 2:
                continue
            rows.append(_compare(factor, dict(zip(held, key[:-2], strict=True)), int(key[-2]), int(key[-1]),
                                 cell, levels, rules))
    return pd.DataFrame(rows, columns=COLUMNS)


def _compare(factor: str, held: dict[str, str], layers: int, hops: int, cell: pd.DataFrame, levels: list[str],
             rules: RetrievalRules) -> dict:
    """The two levels' composing counts, their two-sided Fisher p and the power at the stated effect."""
    a, b = (cell[cell[factor] == level] for level in levels)
    ka, na, kb, nb = int(a.composed.sum()), len(a), int(b.composed.sum()), len(b)
    p = min(1.0, 2 * min(fisher_greater(ka, na, kb, nb), fisher_greater(kb, nb, ka, na)))
    power = fisher_power(na, nb, rules.effect_factor_high, rules.effect_factor_low, rules.alpha / 2)
    return {"factor": factor, "held": "; ".join(f"{k} {v}" for k, v in held.items()), "layers": layers,
            "hops": hops, "level_a": levels[0], "composed_a": ka, "runs_a": na, "level_b": levels[1],
            "composed_b": kb, "runs_b": nb, "p_value": p, "power": power}
