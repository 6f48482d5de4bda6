"""The rule that turns head scores and ablation effects into roles and a circuit (docs/study-retrieval.md).

1. Attention role: the head's largest score from the query, among `query_hop{j}` (role
   `query→hop{j}`) and, conditional, `query_class` / `query_rule`, if it is at least `threshold`;
   else its largest link score, `link_next` (`link→next`) or `link_prev` (`link→prev`), if that is;
   otherwise `none`. Query roles come first because the answer is read out at the query: a head
   that attends from every position to "the link continuing my symbol" scores high on both
   `query_hop{j}` and `link_next`, and on the answer's path it acts at the query.
2. Causal evidence, by mean ablation: a head is in the circuit when ablating it alone drops
   accuracy by at least `min_drop` (evidence `alone`), or when it has an attention role, ablating
   every head of its (layer, role) group together drops accuracy by at least `min_drop`, AND the
   group loses at least `min_drop` by losing this head (group ablated vs the group without this
   head ablated; evidence `group`). The group check finds redundant heads that stand in for each
   other; the member check keeps out a head that only shares the group's attention and does nothing.
   A causal head with no attention role keeps role `none` and is reported as unexplained.

Both thresholds are the stacked-heads study's rules (`RetrievalRules.role_score` and `circuit_drop`, with
their reasons and sweeps): the functions here take them as arguments and hold no value of their own.

How well the circuit explains the model (sufficiency, a minimal subset, random head sets as the
null) is `headway.analysis.retrieval.faithfulness`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

if TYPE_CHECKING:  # the interventions load torch; the annotations need only their name
    from headway.analysis.retrieval.interventions import HeadIntervention

_FIXED_ROLES = {"link_next": "link→next", "link_prev": "link→prev", "query_class": "query→class",
                "query_rule": "query→rule"}


def role_columns(scores: pd.DataFrame) -> dict[str, str]:
    """Score column -> role name, for the score columns present in `scores`."""
    roles = {c: f"query→hop{c.removeprefix('query_hop')}" for c in scores.columns if c.startswith("query_hop")}
    roles.update({c: r for c, r in _FIXED_ROLES.items() if c in scores.columns})
    return roles


def attention_roles(scores: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """`scores` with `role` (step 1 of the rule, at `threshold`: `RetrievalRules.role_score`) and `role_score`
    (the winning score) added."""
    roles = role_columns(scores)
    query = {c: r for c, r in roles.items() if c.startswith("query_")}
    links = {c: r for c, r in roles.items() if c not in query}
    out = scores.copy()
    out["role"], out["role_score"] = "none", np.nan
    for group in (links, query):  # query roles last, so they win wherever they pass the threshold
        values = scores[list(group)].fillna(-1.0).to_numpy()
        best = values.argmax(axis=1)
        best_score = values[np.arange(len(values)), best]
        passed = best_score >= threshold
        out.loc[passed, "role"] = np.array(list(group.values()))[best[passed]]
        out.loc[passed, "role_score"] = best_score[passed]
    undecided = out.role == "none"
    everything = scores[list(roles)].to_numpy()
    out.loc[undecided, "role_score"] = np.nanmax(np.where(np.isnan(everything), -np.inf, everything),
                                                 axis=1)[undecided.to_numpy()]
    return out


def name_circuit(heads: pd.DataFrame, intervention: HeadIntervention, min_drop: float) -> pd.DataFrame:
    """`heads` (scores with roles, and `mean_drop` from head_effects) with `group_drop`, `member_drop`,
    `in_circuit` and `evidence` added (step 2 of the rule, at `min_drop`: `RetrievalRules.circuit_drop`)."""
    out = heads.sort_values(["instance", "layer", "head"]).reset_index(drop=True)
    out["group_drop"], out["member_drop"] = group_drops(out, intervention)
    out["in_circuit"], out["evidence"] = circuit_membership(out, min_drop)
    return out


def circuit_membership(heads: pd.DataFrame, min_drop: float) -> tuple[np.ndarray, np.ndarray]:
    """Step 2 of the rule on measured drops: (in_circuit, evidence) per row of `heads`. A head is in
    alone, or through its role group when the group matters and the head matters within it."""
    alone = (heads.mean_drop >= min_drop).to_numpy()
    group = ((heads.role != "none") & (heads.group_drop >= min_drop) & (heads.member_drop >= min_drop)).to_numpy()
    return alone | group, np.where(alone, "alone", np.where(group, "group", "-"))


def head_grid(rows: pd.DataFrame, layers: int, n_heads: int) -> np.ndarray:
    """[L, H] boolean mask of the (layer, head) pairs in `rows` (rows of one instance)."""
    grid = np.zeros((layers, n_heads), dtype=bool)
    grid[rows.layer.to_numpy(), rows["head"].to_numpy()] = True
    return grid


def group_drops(heads: pd.DataFrame, intervention: HeadIntervention) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `heads` (sorted, index 0..n-1): the mean-ablation drop of its (layer, role) group, and
    its member drop — accuracy with the group minus this head ablated, less accuracy with the whole group
    ablated (how much the group loses by losing this head; the group drop for a group of one). NaN
    for heads without a role. A head that does nothing has member drop 0 whatever its group does."""
    n_instances, layers, n_heads = intervention.model.n_instances, intervention.layers, intervention.heads
    clean = intervention.accuracy(intervention.clean_prediction)
    choices: list[list[np.ndarray]] = [[] for _ in range(n_instances)]
    owners: list[list[tuple[str, np.ndarray]]] = [[] for _ in range(n_instances)]  # what each choice measures
    for (instance, _, _), group in heads[heads.role != "none"].groupby(["instance", "layer", "role"]):
        whole = head_grid(group, layers, n_heads)
        choices[instance].append(whole)
        owners[instance].append(("group", group.index.to_numpy()))
        if len(group) > 1:
            for index, row in group.iterrows():
                without = whole.copy()
                without[row.layer, row["head"]] = False
                choices[instance].append(without)
                owners[instance].append(("member", np.array([index])))
    accuracies = intervention.ablated_accuracy(choices)
    group_drop, member_drop = np.full(len(heads), np.nan), np.full(len(heads), np.nan)
    for instance in range(n_instances):
        group_accuracy = np.nan
        for (kind, rows), accuracy in zip(owners[instance], accuracies[instance], strict=True):
            if kind == "group":
                group_accuracy = accuracy
                group_drop[rows] = clean[instance] - accuracy
                member_drop[rows] = clean[instance] - accuracy  # kept for a group of one
            else:
                member_drop[rows] = accuracy - group_accuracy
    return group_drop, member_drop
