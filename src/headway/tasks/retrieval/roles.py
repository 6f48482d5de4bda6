"""The rule that turns head scores and ablation effects into roles and a circuit (docs/heads.md).

1. Attention role: the head's largest score from the query, among `query_hop{j}` (role
   `query→hop{j}`) and, conditional, `query_class` / `query_rule`, if it is at least `threshold`;
   else its largest link score, `link_next` (`link→next`) or `link_prev` (`link→prev`), if that is;
   otherwise `none`. Query roles come first because the answer is read out at the query: a head
   that attends from every position to "the link continuing my symbol" scores high on both
   `query_hop{j}` and `link_next`, and on the answer's path it acts at the query.
2. Causal evidence, by mean ablation: a head is in the circuit when ablating it alone drops
   accuracy by at least `min_drop` (evidence `alone`), or when it has an attention role and
   ablating every head of its (layer, role) group together does (evidence `group`: redundant
   heads that stand in for each other). A causal head with no attention role keeps role `none`
   and is reported as unexplained.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from headway.tasks.retrieval.interventions import HeadIntervention

THRESHOLD = 0.4
MIN_DROP = 0.05
_FIXED_ROLES = {"link_next": "link→next", "link_prev": "link→prev", "query_class": "query→class",
                "query_rule": "query→rule"}


def role_columns(scores: pd.DataFrame) -> dict[str, str]:
    """Score column -> role name, for the score columns present in `scores`."""
    roles = {c: f"query→hop{c.removeprefix('query_hop')}" for c in scores.columns if c.startswith("query_hop")}
    roles.update({c: r for c, r in _FIXED_ROLES.items() if c in scores.columns})
    return roles


def attention_roles(scores: pd.DataFrame, threshold: float = THRESHOLD) -> pd.DataFrame:
    """`scores` with `role` (step 1 of the rule) and `role_score` (the winning score) added."""
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


def name_circuit(heads: pd.DataFrame, intervention: HeadIntervention, min_drop: float = MIN_DROP) -> pd.DataFrame:
    """`heads` (scores with roles, and `mean_drop` from head_effects) with `group_drop`,
    `in_circuit` and `evidence` added (step 2 of the rule)."""
    out = heads.sort_values(["instance", "layer", "head"]).reset_index(drop=True)
    out["group_drop"] = _group_drops(out, intervention)
    alone = out.mean_drop >= min_drop
    group = (out.role != "none") & (out.group_drop >= min_drop)
    out["in_circuit"] = alone | group
    out["evidence"] = np.where(alone, "alone", np.where(group, "group", "-"))
    return out


def circuit_check(heads: pd.DataFrame, intervention: HeadIntervention) -> pd.DataFrame:
    """Per instance: clean accuracy, accuracy with the whole named circuit mean-ablated, and with
    every head outside it mean-ablated (does the circuit carry the answer, and suffice?)."""
    inside = _mask(heads, heads.in_circuit.to_numpy(), intervention)
    clean = intervention.accuracy(intervention.clean_prediction)
    return pd.DataFrame({
        "instance": np.arange(len(clean)),
        "clean_accuracy": clean,
        "circuit_ablated_accuracy": intervention.accuracy(intervention.run(inside, "mean")),
        "rest_ablated_accuracy": intervention.accuracy(intervention.run(~inside, "mean")),
        "circuit_heads": heads.groupby("instance").in_circuit.sum().reindex(range(len(clean)), fill_value=0).to_numpy(),
    })


def _mask(heads: pd.DataFrame, selected: np.ndarray, intervention: HeadIntervention) -> torch.Tensor:
    mask = torch.zeros(intervention.model.n_instances, intervention.layers, intervention.heads, dtype=torch.bool)
    rows = heads[selected]
    mask[rows.instance.to_numpy(copy=True), rows.layer.to_numpy(copy=True), rows["head"].to_numpy(copy=True)] = True
    return mask


def _group_drops(heads: pd.DataFrame, intervention: HeadIntervention) -> np.ndarray:
    """Mean-ablation drop of each head's (layer, role) group; NaN for heads without a role.
    Instance e ablates its k-th group in forward k, so all instances share each forward pass."""
    by_instance: dict[int, list] = {}
    for (instance, _, _), index in heads[heads.role != "none"].groupby(["instance", "layer", "role"]).groups.items():
        by_instance.setdefault(instance, []).append(index)
    clean = intervention.accuracy(intervention.clean_prediction)
    drops = np.full(len(heads), np.nan)
    for k in range(max((len(v) for v in by_instance.values()), default=0)):
        selected = np.zeros(len(heads), dtype=bool)
        for members in by_instance.values():
            if k < len(members):
                selected[members[k]] = True
        accuracy = intervention.accuracy(intervention.run(_mask(heads, selected, intervention), "mean"))
        drops[selected] = (clean - accuracy)[heads.instance.to_numpy()[selected]]
    return drops
