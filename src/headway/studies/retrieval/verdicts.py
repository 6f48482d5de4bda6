"""The verdict on each claim of the stacked-heads paper, computed from the study's tables alone."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pandas as pd

from headway.studies.retrieval.rules import FORMULATION, NEAR_BASELINE, OTHER_HEAD_LIMIT, PATH_SHARE, SOLVED
from headway.studies.verdict import Verdict, share_status
from headway.tasks.retrieval.faithfulness import NULL_LEVEL, SUFFICIENT

if TYPE_CHECKING:  # tables imports the sensitivity sweep, which imports these verdicts
    from headway.studies.retrieval.tables import RetrievalTables

VARIANTS = ("layout", "attention", "order", "supervision")


def verdicts(tables: RetrievalTables) -> list[Verdict]:
    """Every claim the tables can speak to, in report order: depth law, curriculum, circuit, emergence
    order of heads and of hops, stacked heads reading each other, probe reach, conditional retrieval."""
    checks = (depth_law(tables.minimal), curriculum_contrast(tables.depth), circuit_carries_answer(tables.mechanism),
              heads_emerge_in_order(tables.emergence), hops_learned_in_order(tables.hop_emergence),
              stacked_heads_compose(tables.paths), reach_beyond_one_hop_per_layer(tables.final, tables.reach),
              layers_solve_more_hops(tables.phase),
              conditional_learned(tables.depth, tables.minimal, tables.mechanism))
    return [verdict for verdict in checks if verdict is not None]


DEPTH_CLAIM = ("The minimum depth is the fewest layers whose information flow reaches the answer: ⌈log₃(2D)⌉ "
               "for bidirectional attention, more under a causal mask (IC, plain task)")
DEPTH_REFUTED_BY = ("Refuted at a hop count D where the bound and one hop per layer differ if the bound depth, "
                    "trained, fails, or one layer fewer solves; the bound is the one that applies to the variant's "
                    "attention, order and layout (Theorem 1's is given beside it where they differ)")


def depth_law(minimal: pd.DataFrame) -> Verdict:
    """Measured minimum depth per D (plain task, IC) against ⌈log₃(2D)⌉, judged only where it can fail:
    at hop counts where the bound differs from one hop per layer (D > bound), with the bound depth and
    one layer fewer both trained, per variant (layout, attention, order). D = 1 and 2 agree with both
    laws and are shown as evidence only; with no such cell the claim is not testable."""
    plain_ic = minimal[(minimal.part == "plain") & (minimal.curriculum == "ic")]
    variants = [v for v in VARIANTS if v in plain_ic.columns]
    several = len(plain_ic[variants].drop_duplicates()) > 1
    tests = plain_ic[(plain_ic.hops > plain_ic.bound) & plain_ic.bound_testable]
    holds = [r.measured_min_layers == r.bound for r in tests.itertuples()]

    def describe(r: Any) -> str:
        measured = (f"none ≤ {int(r.max_layers_trained)}" if pd.isna(r.measured_min_layers)
                    else str(int(r.measured_min_layers)))
        prefix = f"{'/'.join(str(getattr(r, v)) for v in variants)} " if several else ""
        theorem = getattr(r, "theorem_bound", r.bound)
        bound = f"{int(r.bound)}" + (f" (Theorem 1: {int(theorem)})" if theorem != r.bound else "")
        role = ("a test" if r.hops > r.bound and r.bound_testable else
                "not discriminating: one hop per layer gives the same depth" if r.hops <= r.bound else
                "not tested: the bound depth and one layer fewer were not both trained")
        return f"{prefix}D={int(r.hops)}: measured {measured}, bound {bound} ({role})"

    status = "not testable" if not holds else share_status(holds)
    return Verdict(DEPTH_CLAIM, status, f"{DEPTH_REFUTED_BY}. " + "; ".join(describe(r) for r in plain_ic.itertuples()))


def curriculum_contrast(depth: pd.DataFrame) -> Verdict | None:
    """Cells with D ≥ 2 solved with the implicit curriculum but not with answer-only targets."""
    plain = depth[(depth.part == "plain") & (depth.supervision == "query")]
    if not {"ic", "none"} <= set(plain.curriculum):
        return None
    both = plain[plain.hops > 1].pivot_table(index=["layout", "attention", "order", "hops", "layers"],
                                             columns="curriculum", values="accuracy")
    only_ic = both[(both.ic >= SOLVED) & (both["none"] < SOLVED)]
    none_solves = both[both["none"] >= SOLVED]
    status = ("not reproduced" if len(none_solves) else "reproduced" if len(only_ic) else "not testable")
    return Verdict("Only the implicit curriculum (IC) learns; answer-only targets do not (D ≥ 2)", status,
                   "Refuted if an answer-only cell with D ≥ 2 is solved; not testable when no IC cell beside it is. "
                   f"Cells (D ≥ 2) solved with IC but not without: {len(only_ic)}; solved without IC: "
                   f"{len(none_solves)}; best non-IC accuracy {both['none'].max():.3f}.")


CIRCUIT_CLAIM = ("The automatically named heads carry the answer: necessary, and sufficient where random head sets "
                 "of their size are not")


def circuit_carries_answer(mechanism: pd.DataFrame) -> Verdict | None:
    """Share of solved runs whose named circuit passes every part of the check (rules.carries_answer)."""
    solved = mechanism[mechanism.solved]
    if solved.empty:
        return None
    necessary = solved.circuit_ablated_accuracy <= solved.chance + NEAR_BASELINE
    sufficient = solved.faithfulness >= SUFFICIENT
    beats_null = solved.p_sufficient <= NULL_LEVEL
    alone = solved.max_other_head_drop < OTHER_HEAD_LIMIT
    refuted_by = (f"Refuted for a run if mean-ablating its circuit leaves more than the baseline + {NEAR_BASELINE}, "
                  f"if the circuit alone keeps faithfulness < {SUFFICIENT} (everything else mean-ablated), if random "
                  f"head sets of the same size kept alone are as sufficient (p > {NULL_LEVEL}, "
                  f"{int(solved.random_sets.max())} sets), or if a head outside it costs ≥ {OTHER_HEAD_LIMIT * 100:.0f} points")
    return Verdict(CIRCUIT_CLAIM, share_status(solved.circuit_carries_answer),
                   f"{refuted_by}. Passing all: {int(solved.circuit_carries_answer.sum())} of {len(solved)} solved runs "
                   f"(necessary {int(necessary.sum())}, sufficient {int(sufficient.sum())}, more sufficient than random sets "
                   f"{int(beats_null.sum())}, no other head matters {int(alone.sum())}). Circuit size "
                   f"{solved.circuit_heads.min()}–{solved.circuit_heads.max()} heads (minimal sufficient subset "
                   f"{solved.minimal_heads.min()}–{solved.minimal_heads.max()}); circuit-ablated accuracy "
                   f"{solved.circuit_ablated_accuracy.mean():.3f} mean-ablated, {solved.circuit_resample_accuracy.mean():.3f} "
                   f"resample-ablated, random sets of its size {solved.random_ablated_accuracy.mean():.3f} (as necessary as "
                   f"the circuit at p ≤ {NULL_LEVEL} in {int((solved.p_necessary <= NULL_LEVEL).sum())} runs: necessity "
                   "alone does not single it out where any set holding a bottleneck head breaks the model); faithfulness "
                   f"{solved.faithfulness.min():.2f}–{solved.faithfulness.max():.2f}; kept alone "
                   f"{solved.rest_ablated_accuracy.mean():.3f} vs random sets {solved.random_rest_accuracy.mean():.3f}; "
                   f"worst other head {solved.max_other_head_drop.max():.3f}. The minimal sufficient subsets keep "
                   f"faithfulness {solved.minimal_faithfulness.min():.2f}–{solved.minimal_faithfulness.max():.2f} and beat "
                   f"random sets of their size (p ≤ {NULL_LEVEL}) in {int((solved.p_minimal_sufficient <= NULL_LEVEL).sum())} "
                   f"of {len(solved)} runs.")


def stacked_heads_compose(paths: pd.DataFrame, share: float = PATH_SHARE) -> Verdict | None:
    """Each layer's circuit heads read what the previous layer's circuit heads wrote (path patching,
    solved runs whose senders matter)."""
    claim = "Stacked heads: each layer's circuit heads read what the previous layer's circuit heads wrote"
    if paths.empty or not paths.solved.any():
        return None
    qkv = paths[paths.solved & (paths.channel == "qkv")]
    testable = qkv[qkv.direct_drop >= NEAR_BASELINE]
    refuted_by = (f"Refuted for a pair of circuit layers if resampling the earlier layer's circuit heads only into "
                  f"the later layer's circuit heads (their q, k, v) costs less than {share:.0%} of what resampling "
                  f"them along every path costs, or no more than patching them into the later layer's other heads. "
                  f"Only pairs whose senders matter (direct drop ≥ {NEAR_BASELINE}) can test it")
    if testable.empty:
        return Verdict(claim, "not testable", f"{refuted_by}; no solved run has such a pair.")
    holds = (testable.path_drop >= share * testable.direct_drop) & ~(testable.other_drop >= testable.path_drop)
    channels = paths[paths.solved & paths.channel.isin(["q", "k", "v"])].groupby("channel").path_drop.mean()
    return Verdict(claim, share_status(holds),
                   f"{refuted_by}. Holds for {int(holds.sum())} of {len(testable)} (run, layer pair)s; path drop "
                   f"{testable.path_drop.mean():.3f} vs direct {testable.direct_drop.mean():.3f} vs other heads "
                   f"{testable.other_drop.mean():.3f} (means); by channel: "
                   + ", ".join(f"{c} {v:.3f}" for c, v in channels.items()) + ".")


def heads_emerge_in_order(emergence: pd.DataFrame) -> Verdict:
    """Circuit groups emerge in one order in every seed (cells with ≥ 2 groups and ≥ 2 seeds)."""
    claim = "Heads emerge one at a time in the same order in every seed"
    multi = emergence[(emergence.seeds >= 2) & emergence.most_common_order.str.contains(" → ")] \
        if not emergence.empty else emergence
    if multi.empty:
        return Verdict(claim, "not testable",
                       "no solved IC cell has two or more circuit groups and two or more seeds.")
    return order_verdict(claim, multi, refuted_by="Refuted if, in any cell with two or more seeds and circuit "
                         "groups, the seeds' groups emerge in different orders")


def hops_learned_in_order(hop_emergence: pd.DataFrame) -> Verdict | None:
    """Hop k reaches its emergence before hop k+1 (solved IC cells with D > 1)."""
    cells = hop_emergence[(hop_emergence.hops > 1) & (hop_emergence.seeds >= 1)] \
        if not hop_emergence.empty else hop_emergence
    if cells.empty:
        return None
    return order_verdict("Implicit curriculum: hop k is learned before hop k+1", cells,
                         lambda cell: " → ".join(f"hop {k}" for k in range(1, cell.hops + 1)),
                         "Refuted if, in any solved IC cell with D > 1, a seed reaches hop k+1 before hop k")


def order_verdict(claim: str, cells: pd.DataFrame, expected: Callable[[Any], str] | None = None,
                  refuted_by: str = "") -> Verdict:
    """"Units emerge in a fixed order" over `cells` (rows of emergence_summary): `not reproduced` when
    seeds disagree (or differ from `expected(cell)`), `partly reproduced` when the only agreement comes
    from seeds whose units emerged at the same checkpoint, else `reproduced`. The null beside each cell:
    the chance that independent random orders of its U units agree in all S seeds, (1/U!)^(S−1), or
    match the expected order, (1/U!)^S."""
    disagree = tied = False
    parts = []
    for cell in cells.itertuples():
        wrong = expected is not None and cell.most_common_order != expected(cell)
        disagree |= cell.share_most_common < 1 or wrong
        tied |= cell.tied_seeds > 0
        tau = (f"τ mean {cell.kendall_tau_mean:.2f}" if pd.notna(cell.kendall_tau_mean)
               else "τ undefined (no two seeds with two units emerged at distinct steps to compare)")
        units = cell.most_common_order.count(" → ") + 1
        chance = (1 / math.factorial(units)) ** (cell.seeds - (0 if expected else 1))
        parts.append(f"D={cell.hops}, {cell.layers} layers: {cell.most_common_order} in {cell.share_most_common:.0%} "
                     f"of {cell.seeds} seeds, {cell.tied_seeds} with ties, {tau}, by chance {chance:.2g}")
    status = "not reproduced" if disagree else "partly reproduced" if tied else "reproduced"
    evidence = "; ".join(parts) + ("." if not tied else ". Ties: two units emerged at the same checkpoint, so "
                                   "their order is not resolved at this checkpoint spacing.")
    return Verdict(claim, status, f"{refuted_by}. {evidence}" if refuted_by else evidence)


def query_reach(final: pd.DataFrame, reach: pd.DataFrame) -> pd.DataFrame:
    """Probe reach at the query of the plain-task IC runs, per run and layer."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic")]
    return reach[(reach.site == "query") & reach.run_id.isin(set(plain.run_id))]


REACH_CLAIM = "Reach grows faster than one hop per layer, within ⌊3ᵗ/2⌋ after t layers (Theorem 1's tripling)"


def reach_beyond_one_hop_per_layer(final: pd.DataFrame, reach: pd.DataFrame) -> Verdict | None:
    """Solved plain IC runs whose query reach exceeds t after some layer t, none above ⌊3ᵗ/2⌋. The
    bound alone cannot fail (an unsolved model with reach 0 satisfies it); reach beyond one hop per
    layer is what the tripling adds, and what a model that takes one hop per layer never shows."""
    plain = final[(final.part == "plain") & (final.curriculum == "ic") & final.solved]
    query = query_reach(final, reach)
    query = query[query.run_id.isin(set(plain.run_id)) & (query.layer >= 1)]
    if query.empty:
        return None
    over = query[query.reach > query.bound_theorem]
    beyond = (query.reach > query.layer).groupby(query.run_id).any()
    status = "not reproduced" if len(over) else share_status(beyond)
    return Verdict(REACH_CLAIM, status,
                   "Refuted if every solved model's query reach is at most t hops after t layers (one hop per layer), "
                   f"or if any exceeds ⌊3ᵗ/2⌋. Solved plain IC runs reaching beyond one hop per layer: "
                   f"{int(beyond.sum())} of {len(beyond)}; (run, layer) pairs above ⌊3ᵗ/2⌋: {len(over)} of {len(query)}; "
                   f"largest reach {int(query.reach.max())}.")


COMPOSITION_CLAIM = "L layers solve D > L hops by composing links (logarithmic, not linear, depth)"
COMPOSITION_REFUTED_BY = ("Refuted if no formulation solves a cell with D > L whose information flow allows it (accuracy "
                          "ceiling ≥ the solved threshold), or if a model solved there is classified linear")


def layers_solve_more_hops(phase: pd.DataFrame) -> Verdict | None:
    """Per formulation (supervision, attention, order, layout), the cells with D > L: solved ones
    (mean accuracy ≥ SOLVED) whose solved runs are all classified compositional reproduce the claim;
    cells whose ceiling is below SOLVED are unsolvable, not failures. The claim asks whether some
    formulation shows it, so one reproducing formulation suffices; the evidence names each."""
    if phase.empty:
        return None
    cells = phase[phase.beyond_linear]
    testable = cells[cells.solvable]
    if testable.empty:
        return Verdict(COMPOSITION_CLAIM, "not testable",
                       f"{COMPOSITION_REFUTED_BY}. No cell with D > L whose ceiling reaches {SOLVED} was trained "
                       f"({len(cells)} cells with D > L, all unsolvable under their attention and order).")
    parts, showing, linear = [], [], 0
    for key, group in testable.groupby(list(FORMULATION)):
        name = "/".join(str(k) for k in key)
        solved = group[group.solved]
        linear += int(solved.linear.sum())
        if len(solved) and (solved.compositional == solved.solved_runs).all():
            showing.append(name)
        best = group.sort_values("accuracy", ascending=False).iloc[0]
        listed = ", ".join(f"L{int(r.layers)}/D{int(r.hops)} {r.accuracy:.2f} ({int(r.compositional)} of "
                           f"{int(r.solved_runs)} solved runs compositional)" for r in solved.itertuples())
        parts.append(f"{name}: {len(solved)} of {len(group)} solvable D > L cells solved"
                     + (f" — {listed}" if listed else f"; best L{int(best.layers)}/D{int(best.hops)} "
                        f"{best.accuracy:.2f} (ceiling {best.ceiling:.2f})"))
    unsolvable = len(cells) - len(testable)
    status = "not reproduced" if linear or not showing else "reproduced"
    named = f"Formulations showing it: {', '.join(showing)}. " if showing else ""
    return Verdict(COMPOSITION_CLAIM, status,
                   f"{COMPOSITION_REFUTED_BY}. {named}" + "; ".join(parts)
                   + f". Cells with D > L left out as unsolvable (ceiling < {SOLVED}): {unsolvable}.")


def conditional_learned(depth: pd.DataFrame, minimal: pd.DataFrame, mechanism: pd.DataFrame) -> Verdict | None:
    """Some conditional cell is solved (IC)."""
    if minimal[minimal.part == "conditional"].empty:
        return None
    solved = mechanism[(mechanism.part == "conditional") & mechanism.solved]
    cells = depth[depth.part == "conditional"]
    return Verdict("Conditional retrieval is learned with the implicit curriculum",
                   "reproduced" if (cells.accuracy >= SOLVED).any() else "not reproduced",
                   f"Refuted at this scale if no conditional cell reaches mean accuracy ≥ {SOLVED}. "
                   + "; ".join(f"D={r.hops}, {r.layers} layers: {r.accuracy:.3f}" for r in cells.itertuples())
                   + f". Solved runs analysed: {len(solved)}.")
