"""The stacked-heads study's rules: every threshold, level and stated effect its analysis, tables and
verdicts read, each with its reason and sweep (docs/study-retrieval.md, "Verdicts"), and the per-run
check of a named circuit that reads them."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headway.studies.rules import Rules, rule
from headway.analysis.retrieval.mechanism import MechanismRule

FORMULATION = ("supervision", "attention", "order", "layout")  # what one panel of the depth phase diagram holds fixed


@dataclass(frozen=True)
class RetrievalRules(Rules):
    """The stacked-heads study's rules (see `headway.studies.rules`); their defaults are set before the tables are
    judged (docs/verdicts.md, "What was fixed before which data")."""

    # --- read while analysing a model (part of the analysis cache's stamp) ---
    role_score: float = rule(0.4, "attention score a head needs for a role: 4× or more the share uniform "
                                  "attention gives one statement of a CPU-scale example (0.06–0.11)",
                             sweep=(0.3, 0.4, 0.5, 0.6), stage="analysis", low=0.0, high=1.0)
    circuit_drop: float = rule(0.05, "accuracy a head, or its role group, must cost when mean-ablated to enter "
                                     "the circuit", sweep=(0.02, 0.05, 0.1, 0.2), stage="analysis",
                               low=0.0, high=1.0)
    sufficient_faithfulness: float = rule(0.8, "faithfulness a circuit kept alone needs to count as sufficient (and "
                                               "that its minimal subset keeps), as in circuit-discovery work",
                                          sweep=(0.6, 0.8, 0.9), stage="analysis", low=0.0, high=1.0)
    read_level: float = rule(0.3, "attention from links to a chain neighbour, averaged over visible pairs, at which a "
                                  "head before the last layer reads it and composes (the heads the composition check "
                                  "ablates): far above a uniform head's share on a 4-chain CPU-scale example (1/13 at "
                                  "most), below a sharp head's ~1", stage="analysis", low=0.0, high=1.0,
                             was=0.3)  # mechanism.READ_LEVEL before it was a rule
    random_sets: int = rule(49, "random head sets of the circuit's size per model, the null of sufficiency (the "
                                "smallest p is 1/50, at 2 × 49 forwards per ensemble)", stage="analysis", low=1)

    # --- read when summarising and judging ---
    solved_accuracy: float = rule(0.9, "mean final-hop accuracy of a cell, or final accuracy of a run, that "
                                       "counts as solved", sweep=(0.5, 0.7, 0.8, 0.9, 0.95), low=0.0, high=1.0)
    necessary_margin: float = rule(0.1, "a circuit is necessary when ablating it leaves at most chance + this",
                                   sweep=(0.05, 0.1, 0.2), low=0.0, high=1.0)
    other_head_drop: float = rule(0.05, "a head outside the circuit that costs this much alone (zero or mean "
                                        "ablation) refutes the circuit", sweep=(0.02, 0.05, 0.1), low=0.0, high=1.0)
    random_set_level: float = rule(0.05, "per-run level of the random-set test: the circuit kept alone must beat "
                                         "random sets of its size at p ≤ this", sweep=(0.02, 0.05, 0.1),
                                   low=0.0, high=1.0)
    circuit_null_reach: float = rule(0.5, "a run enters the circuit test only if a circuit better than every other "
                                          "head set of its size would pass the random-set test with this probability "
                                          "(a circuit of every head: 0)", low=0.0, high=1.0)
    sender_drop: float = rule(0.1, "path patching tests a pair of circuit layers only where resampling the senders "
                                   "costs this much accuracy (the senders matter)", sweep=(0.05, 0.1, 0.2),
                              low=0.0, high=1.0)
    path_share: float = rule(0.5, "a receiving layer reads its senders when the path into its circuit heads carries "
                                  "this share of the senders' whole effect", sweep=(0.25, 0.5, 0.75), low=0.0, high=1.0)
    emergence_fraction: float = rule(0.5, "a unit emerges at the first checkpoint from which its score stays this "
                                          "far from its first to its final value", low=0.0, high=1.0)
    emergence_rise: float = rule(0.2, "a unit whose score rises by less than this over training never emerged",
                                 low=0.0, high=1.0)
    reach_accuracy: float = rule(0.9, "held-out probe accuracy at which a hop counts as decoded (probe reach and "
                                      "the mechanism classes)", sweep=(0.8, 0.9, 0.95), low=0.0, high=1.0)
    probe_gap: float = rule(0.1, "a solved model is not classifiable when its final-layer query probe for hop D reads "
                                 "the answer more than this below the model's own accuracy: a probe that loses more "
                                 "than a tenth of what the read-out gets from the same residual stream is too weak "
                                 "to rest a 'no' on", sweep=(0.05, 0.1, 0.2), low=0.0, high=1.0)
    composition_margin: float = rule(0.2, "accuracy that mean-ablating the link-composing heads at links must cost "
                                          "beyond ablating as many other heads of their layers before a model counts "
                                          "as compositional: a fifth of the answers, about 13 standard errors of an "
                                          "accuracy on 1024 examples, far below the ~0.8 a model that needs them loses",
                                     sweep=(0.1, 0.2, 0.3), low=0.0, high=1.0)
    chance_solve_rate: float = rule(0.05, "share of runs a model without the claimed mechanism (one hop per layer, "
                                          "no conditional look-up) would count as solved; its accuracy ceiling is "
                                          "far below solved, so this is generous", low=0.0, high=1.0)
    probe_false_reach: float = rule(0.05, "share of one-hop-per-layer models whose probes would decode a hop beyond "
                                          "t after t layers without holding it (held-out accuracy ≥ reach_accuracy "
                                          "over V symbols by chance); generous", low=0.0, high=1.0)

    # --- the effects each test must be able to detect (power is computed at them) ---
    effect_solves: float = rule(0.9, "solve rate of the runs a claim says learn (the bound depth; IC)",
                                low=0.0, high=1.0)
    effect_fails: float = rule(0.1, "solve rate of the runs a claim says do not learn (one layer fewer than the "
                                    "bound; answer-only targets)", low=0.0, high=1.0)
    effect_circuit_pass: float = rule(0.8, "share of testable runs whose circuit passes every part of the check where "
                                           "the named heads carry the answer", low=0.0, high=1.0)
    effect_reading_runs: float = rule(0.9, "share of controlled runs whose later circuit layer reads the earlier one "
                                           "(more than its other heads do) where stacked heads compose",
                                      low=0.0, high=1.0)
    effect_order_share: float = rule(0.8, "share of seeds following one fixed order (the rest at random) where heads, "
                                          "or hops, emerge in a fixed order", low=0.0, high=1.0)
    effect_reach_runs: float = rule(0.5, "share of solved runs that can show it whose query reach exceeds one hop per "
                                         "layer where Theorem 1's tripling is used", low=0.0, high=1.0)
    effect_compose_runs: float = rule(0.5, "share of runs in solvable D > L cells that solve them by composing links "
                                           "where L layers solve D > L hops", low=0.0, high=1.0)
    effect_factor_high: float = rule(0.9, "share of runs in a D > L cell that compose under the level of a factor "
                                          "(order, supervision, attention) that elicits composition: the composing "
                                          "recipes on record composed in every seed", low=0.0, high=1.0)
    effect_factor_low: float = rule(0.1, "share that compose under the other level of that factor", low=0.0,
                                    high=1.0)
    effect_conditional_runs: float = rule(0.5, "share of conditional IC runs that solve the task where conditional "
                                               "retrieval is learned", low=0.0, high=1.0)

    def mechanism_rule(self) -> MechanismRule:
        """The mechanism classifier's thresholds under these rules (`headway.analysis.retrieval.mechanism`)."""
        return MechanismRule(decode=self.reach_accuracy, level=self.read_level, gap=self.probe_gap,
                             margin=self.composition_margin)


def carries_answer(table: pd.DataFrame, rules: RetrievalRules) -> pd.Series:
    """The circuit check per run: ablating the circuit leaves ≤ chance + `necessary_margin`, no single head
    outside it costs ≥ `other_head_drop`, it alone keeps faithfulness ≥ `sufficient_faithfulness`, and random
    head sets of its size kept alone are as sufficient with p ≤ `random_set_level` only (a missing p fails).
    Necessity is not held against random sets: where one head is a bottleneck, every set holding it is as
    necessary (a k-set of N heads holds it with probability k/N), so that comparison cannot single a circuit out."""
    return ((table.circuit_ablated_accuracy <= table.chance + rules.necessary_margin)
            & (table.max_other_head_drop < rules.other_head_drop)
            & (table.faithfulness >= rules.sufficient_faithfulness)
            & (table.p_sufficient <= rules.random_set_level))
