"""Which factor of the formulation elicits composition: where a grid trains two levels of one factor (link
order, supervision, attention) with the rest held fixed, the runs of D > L cells that solve by composing
links are counted per level and the two levels compared by Fisher's exact test (docs/study-retrieval.md,
"Which factor composes"). Each comparison is two-sided (either level may be the one that composes), so its p is
twice the smaller one-sided p; its power is that of detecting `effect_factor_high` against `effect_factor_low`.
Beside it, the same test on the runs that solve the cell, by any mechanism and with every run counted: a level
that solves by a route the classifier cannot certify (composition leaf-ward, say) shows there and not in the
composing counts."""

from __future__ import annotations

import pandas as pd

from headway.analysis.statistics import fisher_greater, fisher_power
from headway.studies.retrieval.rules import FORMULATION, RetrievalRules

FACTORS = ("order", "supervision", "attention")  # the factors compared, each with the others held fixed
COLUMNS = ["factor", "held", "layers", "hops", "level_a", "composed_a", "runs_a", "level_b", "composed_b", "runs_b",
           "p_value", "power", "solved_a", "trained_a", "solved_b", "trained_b", "p_solved", "power_solved"]


def factor_table(final: pd.DataFrame, mechanisms: pd.DataFrame, rules: RetrievalRules) -> pd.DataFrame:
    """One row per factor × held-fixed formulation × D > L cell where the grid trained two levels of the factor:
    runs composing (solved and classed compositional) at each level, the two-sided Fisher p and the power. A run
    whose mechanism is not classifiable is left out of its level's count."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic") & (final.hops > final.layers)]
    if plain.empty or mechanisms.empty:
        return pd.DataFrame(columns=COLUMNS)
    runs = plain.merge(mechanisms[["run_id", "mechanism"]], on="run_id", how="left")
    runs["composed"] = runs.solved & (runs.mechanism == "compositional")
    runs["classified"] = runs.mechanism != "not classifiable"  # no evidence either way: left out, never a failure
    rows = []
    for factor in FACTORS:
        held = [c for c in FORMULATION if c != factor]
        for key, cell in runs.groupby([*held, "layers", "hops"]):
            levels = sorted(cell[factor].unique())
            if len(levels) != 2:
                continue
            a, b = (cell[cell[factor] == level] for level in levels)
            composed = _compare(a[a.classified].composed, b[b.classified].composed, rules)
            solved = _compare(a.solved, b.solved, rules)
            rows.append({"factor": factor, "held": "; ".join(f"{k} {v}" for k, v in zip(held, key[:-2], strict=True)),
                         "layers": int(key[-2]), "hops": int(key[-1]), "level_a": levels[0], "composed_a": composed[0],
                         "runs_a": composed[1], "level_b": levels[1], "composed_b": composed[2], "runs_b": composed[3],
                         "p_value": composed[4], "power": composed[5], "solved_a": solved[0], "trained_a": solved[1],
                         "solved_b": solved[2], "trained_b": solved[3], "p_solved": solved[4],
                         "power_solved": solved[5]})
    return pd.DataFrame(rows, columns=COLUMNS)


def _compare(a: pd.Series, b: pd.Series, rules: RetrievalRules) -> tuple[int, int, int, int, float, float]:
    """Positives and runs of two levels (boolean series), their two-sided Fisher p and the power at the stated
    effect."""
    ka, na, kb, nb = int(a.sum()), len(a), int(b.sum()), len(b)
    p = min(1.0, 2 * min(fisher_greater(ka, na, kb, nb), fisher_greater(kb, nb, ka, na)))
    power = fisher_power(na, nb, rules.effect_factor_high, rules.effect_factor_low, rules.alpha / 2)
    return ka, na, kb, nb, p, power
