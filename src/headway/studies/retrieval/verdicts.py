"""The verdict on each claim of the stacked-heads paper, computed from the study's tables alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pandas as pd

from headway.studies.retrieval.tables import NEAR_BASELINE, OTHER_HEAD_LIMIT, SOLVED, RetrievalTables
from headway.studies.verdict import Verdict, share_status

VARIANTS = ("layout", "attention", "order")


def verdicts(tables: RetrievalTables) -> list[Verdict]:
    """Every claim the tables can speak to, in report order: depth law, curriculum, circuit,
    emergence order of heads and of hops, probe reach, conditional retrieval."""
    checks = (depth_law(tables.minimal), curriculum_contrast(tables.depth), circuit_carries_answer(tables.mechanism),
              heads_emerge_in_order(tables.emergence), hops_learned_in_order(tables.hop_emergence),
              reach_within_bound(tables.final, tables.reach),
              conditional_learned(tables.depth, tables.minimal, tables.mechanism))
    return [verdict for verdict in checks if verdict is not None]


def depth_law(minimal: pd.DataFrame) -> Verdict:
    """Measured minimum depth per D (plain task, IC) against ⌈log₃(2D)⌉."""
    plain_ic = minimal[(minimal.part == "plain") & (minimal.curriculum == "ic")]
    checkable = plain_ic.dropna(subset=["measured_min_layers"])
    agree = (checkable.measured_min_layers == checkable.bound).all() and len(checkable) > 0
    several = len(plain_ic[list(VARIANTS)].drop_duplicates()) > 1

    def describe(r: Any) -> str:
        measured = (f"none ≤ {int(r.max_layers_trained)}" if pd.isna(r.measured_min_layers)
                    else str(int(r.measured_min_layers)))
        prefix = f"{'/'.join(str(getattr(r, v)) for v in VARIANTS)} " if several else ""
        return f"{prefix}D={int(r.hops)}: measured {measured}, bound {int(r.bound)}"

    status = ("reproduced" if agree and len(checkable) == len(plain_ic) else
              "partly reproduced" if agree else "not reproduced")
    return Verdict("The minimum depth is ⌈log₃(2D)⌉ (IC, plain task)", status,
                   "; ".join(describe(r) for r in plain_ic.itertuples()))


def curriculum_contrast(depth: pd.DataFrame) -> Verdict | None:
    """Cells with D ≥ 2 solved with the implicit curriculum but not with answer-only targets."""
    plain = depth[depth.part == "plain"]
    if not {"ic", "none"} <= set(plain.curriculum):
        return None
    both = plain[plain.hops > 1].pivot_table(index=["layout", "attention", "order", "hops", "layers"],
                                             columns="curriculum", values="accuracy")
    only_ic = both[(both.ic >= SOLVED) & (both["none"] < SOLVED)]
    none_solves = both[both["none"] >= SOLVED]
    return Verdict("Only the implicit curriculum (IC) learns; answer-only targets do not (D ≥ 2)",
                   "reproduced" if len(none_solves) == 0 and len(only_ic) > 0 else "not reproduced",
                   f"cells (D ≥ 2) solved with IC but not without: {len(only_ic)}; solved without IC: "
                   f"{len(none_solves)}; best non-IC accuracy {both['none'].max():.3f}.")


def circuit_carries_answer(mechanism: pd.DataFrame) -> Verdict | None:
    """Share of solved runs whose named circuit carries the answer (mechanism_table's rule)."""
    solved = mechanism[mechanism.solved]
    if solved.empty:
        return None
    share = solved.circuit_carries_answer.mean()
    return Verdict("The automatically named heads carry the answer (ablating them → baseline; any other single "
                   f"head < {OTHER_HEAD_LIMIT * 100:.0f} points)",
                   share_status(solved.circuit_carries_answer),
                   f"{share:.0%} of {len(solved)} solved runs; circuit-ablated accuracy "
                   f"{solved.circuit_ablated_accuracy.mean():.3f} (baseline + {NEAR_BASELINE} allowed), "
                   f"worst other head {solved.max_other_head_drop.max():.3f}.")


def heads_emerge_in_order(emergence: pd.DataFrame) -> Verdict:
    """Circuit groups emerge in one order in every seed (cells with ≥ 2 groups and ≥ 2 seeds)."""
    claim = "Heads emerge one at a time in the same order in every seed"
    multi = emergence[(emergence.seeds >= 2) & emergence.most_common_order.str.contains(" → ")] \
        if not emergence.empty else emergence
    if multi.empty:
        return Verdict(claim, "not testable",
                       "no solved IC cell has two or more circuit groups and two or more seeds.")
    return order_verdict(claim, multi)


def hops_learned_in_order(hop_emergence: pd.DataFrame) -> Verdict | None:
    """Hop k reaches its emergence before hop k+1 (solved IC cells with D > 1)."""
    cells = hop_emergence[(hop_emergence.hops > 1) & (hop_emergence.seeds >= 1)] \
        if not hop_emergence.empty else hop_emergence
    if cells.empty:
        return None
    return order_verdict("Implicit curriculum: hop k is learned before hop k+1", cells,
                         lambda cell: " → ".join(f"hop {k}" for k in range(1, cell.hops + 1)))


def order_verdict(claim: str, cells: pd.DataFrame, expected: Callable[[Any], str] | None = None) -> Verdict:
    """"Units emerge in a fixed order" over `cells` (rows of emergence_summary): `not reproduced` when
    seeds disagree (or differ from `expected(cell)`), `partly reproduced` when the only agreement comes
    from seeds whose units emerged at the same checkpoint, else `reproduced`."""
    disagree = tied = False
    parts = []
    for cell in cells.itertuples():
        wrong = expected is not None and cell.most_common_order != expected(cell)
        disagree |= cell.share_most_common < 1 or wrong
        tied |= cell.tied_seeds > 0
        tau = (f"τ mean {cell.kendall_tau_mean:.2f}" if pd.notna(cell.kendall_tau_mean)
               else "τ undefined (no two seeds with two units emerged at distinct steps to compare)")
        parts.append(f"D={cell.hops}, {cell.layers} layers: {cell.most_common_order} in {cell.share_most_common:.0%} "
                     f"of {cell.seeds} seeds, {cell.tied_seeds} with ties, {tau}")
    status = "not reproduced" if disagree else "partly reproduced" if tied else "reproduced"
    evidence = "; ".join(parts) + ("." if not tied else ". Ties: two units emerged at the same checkpoint, so "
                                   "their order is not resolved at this checkpoint spacing.")
    return Verdict(claim, status, evidence)


def query_reach(final: pd.DataFrame, reach: pd.DataFrame) -> pd.DataFrame:
    """Probe reach at the query of the plain-task IC runs, per run and layer."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic")]
    return reach[(reach.site == "query") & reach.run_id.isin(set(plain.run_id))]


def reach_within_bound(final: pd.DataFrame, reach: pd.DataFrame) -> Verdict | None:
    """No (run, layer) reaches further at the query than ⌊3ᵗ/2⌋ hops."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic")]
    if plain.empty or reach.empty:
        return None
    query = query_reach(final, reach)
    over = query[query.reach > query.bound_theorem]
    return Verdict("After t layers the query reaches at most ⌊3ᵗ/2⌋ hops (Theorem 1)",
                   "reproduced" if over.empty else "not reproduced",
                   f"{len(over)} of {len(query)} (run, layer) pairs exceed the bound; largest reach "
                   f"measured {int(query.reach.max())}.")


def conditional_learned(depth: pd.DataFrame, minimal: pd.DataFrame, mechanism: pd.DataFrame) -> Verdict | None:
    """Some conditional cell is solved (IC)."""
    if minimal[minimal.part == "conditional"].empty:
        return None
    solved = mechanism[(mechanism.part == "conditional") & mechanism.solved]
    cells = depth[depth.part == "conditional"]
    return Verdict("Conditional retrieval is learned with the implicit curriculum",
                   "reproduced" if (cells.accuracy >= SOLVED).any() else "not reproduced",
                   "; ".join(f"D={r.hops}, {r.layers} layers: {r.accuracy:.3f}" for r in cells.itertuples())
                   + f". Solved runs analysed: {len(solved)}.")
