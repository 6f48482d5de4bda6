"""Which mechanism a solved retrieval model uses, decided from evidence its answer alone cannot give.

A link holds hop 1 of its chain (its own right symbol) from its tokens. Under one hop per layer with
no link composition a link never holds hop 2 or beyond, whatever the layer; a query that gains more
than one hop in a layer can only do so by reading a link that already did. So composition is
looked for where it happens, at the links, and checked causally:

- *compositional*: (1) after some layer t < L a link probe decodes hop ≥ 2 (held-out accuracy ≥ `decode`):
  the `link` site over all links, or a flow-gated site (`link_rootward`, `link_leafward`) over the links
  the flow lets that hop reach in their own link order, so a composition only some orders allow, in
  either direction, is seen; and (2) mean-ablating the composing heads at link positions lowers the
  answer's accuracy by ≥ `margin` more than a control does (`composition.composition_check`; a negative
  control drop counts as 0). The control is as many other heads of the same layers ablated there; where
  the composing heads are every head of their layers, the position control: the same heads ablated at
  the queried chain's links against at another chain's. With neither, nothing is established.
- *linear*: D ≤ L and composition is not established: the links decode no hop ≥ 2 before the last
  layer, or they do but the answer survives without the heads that compose them (against a control). One
  hop per layer reaches D ≤ L, so nothing more is needed.
- *not classifiable*: the evidence cannot decide. (a) The final-layer query probe for hop D reads
  the answer more than `gap` below the model's own accuracy (or is missing): the probes are too weak
  for this model, so a missing decode says nothing. (b) D > L is solved without established
  composition: one hop per layer cannot reach it, so the model composes where the link probe or the
  ablation does not look (e.g. only leaf-ward, or through heads below the reading level). (c) Links
  compose and ablating the composing heads costs ≥ `margin`, but they are every head of their layers and
  the position control is missing (one chain, or an analysis older than it), so the ablation has no
  control: its drop cannot be told from what removing any heads there costs (a drop below `margin` needs no
  control: the answer does not need those heads).
- *unsolved*: final accuracy below the solved threshold, whatever the evidence.

The last layer's decode of hop D never decides: in a solved model it only restates the accuracy.

*Composing heads*: heads of the layers before the last whose attention from links to a chain
neighbour is ≥ `level` and twice a uniform head's share: `link_next` (root-ward, the link its right
symbol continues into; under a causal mask only when that link came earlier) or `link_prev`
(leaf-ward). Both directions compose: a root-ward read brings the next hop's symbol into a link, a
leaf-ward read the previous one, which lets the query find a link by a symbol further up its chain.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

MECHANISMS = ("linear", "compositional", "not classifiable", "unsolved")
MECHANISM_COLUMNS = ("mechanism", "reason", "farthest", "link_farthest", "rootward_farthest", "leafward_farthest",
                     "reads", "link_next", "link_prev", "composing_heads", "composing_drop", "control_drop",
                     "chain_drop", "offchain_drop", "control", "probe_train", "probe_held_out", "adequacy_gap")
CONTROLS = ("heads", "positions", "none")  # which control decided whether the answer needs the composing heads


@dataclass(frozen=True)
class MechanismRule:
    """The classifier's thresholds (module docstring). Their values, with the reason for each, are the
    stacked-heads study's rules, and `RetrievalRules.mechanism_rule()` builds this from them: no default here."""

    decode: float  # held-out probe accuracy at which a hop counts as decoded (reach_accuracy)
    level: float  # link attention to a chain neighbour that makes a head a composing head (read_level)
    gap: float  # largest accepted shortfall of the final query probe below the model's accuracy (probe_gap)
    margin: float  # accuracy the composing heads' ablation must cost beyond the control's (composition_margin)


ABLATION_COLUMNS = ("composing_drop", "control_drop", "chain_drop", "offchain_drop")  # a composition table's, in order


@dataclass(frozen=True)
class Ablation:
    """What mean-ablating heads at link positions cost the answer (`composition.composition_check`)."""

    composing_drop: float = math.nan  # with the composing heads ablated (NaN: no composing head)
    control_drop: float = math.nan  # mean over as many other heads of their layers (NaN: no other head there)
    chain_drop: float = math.nan  # the composing heads ablated at the queried chain's links only
    offchain_drop: float = math.nan  # the same heads ablated at another chain's links (NaN: not measured)


@dataclass(frozen=True)
class Mechanism:
    """The class of one model, why, and the evidence behind it."""

    mechanism: str  # one of MECHANISMS
    reason: str  # the evidence that decided, in words
    farthest: tuple[int, ...]  # farthest hop decoded at the query after layers 1..L (0: none)
    link_farthest: tuple[int, ...]  # farthest hop decoded at the links after layers 1..L (0: none)
    rootward_farthest: tuple[int, ...]  # the same on the flow-gated root-ward site (empty: no such rows)
    leafward_farthest: tuple[int, ...]  # the same on the flow-gated leaf-ward site (empty: no such rows)
    reads: str  # where links look before the last layer: root-ward, leaf-ward, both or none
    link_next: float  # strongest head's attention from links to the root-ward neighbour (layers < L)
    link_prev: float  # strongest head's attention from links to the leaf-ward neighbour (layers < L)
    composing_drop: float  # accuracy lost with the composing heads ablated at links
    control_drop: float  # mean accuracy lost with as many other heads of their layers ablated at links
    chain_drop: float  # accuracy lost with the composing heads ablated at the queried chain's links
    offchain_drop: float  # the same at another chain's links
    control: str  # which control decided (CONTROLS)
    probe_train: float  # train accuracy of the final-layer query probe for hop D
    probe_held_out: float  # its held-out accuracy
    adequacy_gap: float  # the model's accuracy minus probe_held_out (NaN: no such probe)


def farthest_hops(probes: pd.DataFrame, layers: int, threshold: float, site: str = "query") -> tuple[int, ...]:
    """Farthest hop decoded at `site` (held-out accuracy ≥ `threshold`) after each layer 1..`layers`, from
    one model's rows of a `depth_probes` table (columns layer, site, hops, accuracy)."""
    decoded = probes[(probes.site == site) & (probes.accuracy >= threshold)]
    best = decoded.groupby("layer").hops.max()
    return tuple(int(best.get(layer, 0)) for layer in range(1, layers + 1))


def reading_levels(level: float, uniform: tuple[float, float] = (0.0, 0.0)) -> tuple[float, float]:
    """The link_next and link_prev a head needs to count as reading that neighbour: `level`, and twice
    the uniform-attention reference (NaN: no visible pair, no extra demand)."""
    return max(level, 2.0 * np.nan_to_num(uniform[0], nan=0.0)), max(level, 2.0 * np.nan_to_num(uniform[1], nan=0.0))


def composing_heads(heads: pd.DataFrame, layers: int, level: float,
                    uniform: tuple[float, float] = (0.0, 0.0)) -> pd.DataFrame:
    """The rows of `heads` (a `head_scores` table) in layers before the last that read a chain neighbour
    from links (module docstring)."""
    need_next, need_prev = reading_levels(level, uniform)
    early = heads[heads.layer < layers - 1]
    return early[(early.link_next.fillna(0.0) >= need_next) | (early.link_prev.fillna(0.0) >= need_prev)]


def link_reads(heads: pd.DataFrame, layers: int, level: float,
               uniform: tuple[float, float] = (0.0, 0.0)) -> tuple[str, float, float]:
    """Where links look in the layers before the last, from one model's rows of a `head_scores` table
    and the uniform-attention reference (link_next, link_prev): (reads, strongest link_next, strongest
    link_prev)."""
    early = heads[heads.layer < layers - 1]
    nxt = float(np.nan_to_num(early.link_next.max(), nan=0.0)) if len(early) else 0.0
    prev = float(np.nan_to_num(early.link_prev.max(), nan=0.0)) if len(early) else 0.0
    needed = reading_levels(level, uniform)
    names = [name for name, mass, need in (("root-ward", nxt, needed[0]), ("leaf-ward", prev, needed[1]))
             if mass >= need]
    reads = "both" if len(names) == 2 else names[0] if names else "none"
    return reads, nxt, prev


def probe_adequacy(probes: pd.DataFrame, layers: int, hops: int, accuracy: float) -> tuple[float, float, float]:
    """(train, held-out, gap) of the query probe for hop `hops` after the last layer, the gap being the
    model's `accuracy` less the held-out accuracy; NaN where the probe is missing."""
    row = probes[(probes.site == "query") & (probes.layer == layers) & (probes.hops == hops)]
    if row.empty:
        return math.nan, math.nan, math.nan
    held_out = float(row.accuracy.iloc[0])
    return float(row.train_accuracy.iloc[0]), held_out, accuracy - held_out


def composition_needed(ablation: Ablation, margin: float) -> tuple[bool, str]:
    """Whether the answer needs the composing heads, and which control decided (CONTROLS): their ablation at links
    costs ≥ `margin` more than as many other heads of their layers (`heads`), or, with no such heads, their
    ablation at the queried chain's links ≥ `margin` more than at another chain's (`positions`); a negative
    control drop counts as 0, and a missing control never passes (`none`)."""
    if not np.isnan(ablation.control_drop):
        return bool(ablation.composing_drop >= margin + max(ablation.control_drop, 0.0)), "heads"
    if not (np.isnan(ablation.chain_drop) or np.isnan(ablation.offchain_drop)):
        return bool(ablation.chain_drop >= margin + max(ablation.offchain_drop, 0.0)), "positions"
    return False, "none"


def composed_after(*farthest: tuple[int, ...]) -> list[tuple[int, int]]:
    """(layer t, farthest hop) for each layer before the last at which any of the per-layer `farthest` readings
    (link, root-ward, leaf-ward; an empty one is absent) decodes hop ≥ 2."""
    readings = [f for f in farthest if f]
    layers = len(readings[0]) if readings else 0
    best = [max(f[t] for f in readings) for t in range(layers)]
    return [(t, far) for t, far in enumerate(best[:-1], start=1) if far >= 2]


def classify(probes: pd.DataFrame, heads: pd.DataFrame, layers: int, hops: int, solved: bool, accuracy: float,
             rule: MechanismRule, ablation: Ablation = Ablation(),
             uniform: tuple[float, float] = (0.0, 0.0)) -> Mechanism:
    """The mechanism of one model (module docstring) by `rule`, from its probe rows, head-score rows, final
    accuracy and the ablation of its composing heads; an unsolved model is `unsolved` whatever its evidence, which
    is kept."""
    farthest = farthest_hops(probes, layers, rule.decode)
    link_farthest = farthest_hops(probes, layers, rule.decode, site="link")
    gated = {site: farthest_hops(probes, layers, rule.decode, site=site) if (probes.site == site).any() else ()
             for site in ("link_rootward", "link_leafward")}
    reads, nxt, prev = link_reads(heads, layers, rule.level, uniform)
    train, held_out, gap = probe_adequacy(probes, layers, hops, accuracy)
    composed = composed_after(link_farthest, *gated.values())
    needed, control = composition_needed(ablation, rule.margin)
    # links compose and their heads matter, but no control tells that from what removing any heads there costs
    uncontrolled = bool(composed) and control == "none" and ablation.composing_drop >= rule.margin
    if control == "positions":
        drops = f"ablating the composing heads at the queried chain's links costs {ablation.chain_drop:.2f}, at " \
                f"another chain's {ablation.offchain_drop:.2f} (they are every head of their layers: no control heads)"
    else:
        drops = f"ablating the composing heads at links costs {ablation.composing_drop:.2f}, the control " \
                f"{ablation.control_drop:.2f}"
    first = f"links decode hop {composed[0][1]} after layer {composed[0][0]}" if composed else ""
    if not composed:
        missing = "links decode no hop ≥ 2 before the last layer, in any order the flow allows"
    elif np.isnan(ablation.composing_drop):
        missing = f"{first}, but no head reads a chain neighbour from links"
    elif uncontrolled:
        missing = f"{first} and ablating the composing heads at links costs {ablation.composing_drop:.2f}, but " \
                  "they are every head of their layers (no control heads) and there is no position control, so " \
                  "nothing tells that drop from what removing any heads there costs"
    else:
        missing = f"{first}, but {drops}: the answer does not need them"
    if not solved:
        mechanism, reason = "unsolved", f"accuracy {accuracy:.3f} is below the solved threshold"
    elif not gap <= rule.gap:
        mechanism = "not classifiable"
        reason = (f"no final-layer query probe for hop {hops}" if np.isnan(gap) else
                  f"the final-layer query probe for hop {hops} reads {held_out:.2f} (train {train:.2f}) against "
                  f"the model's accuracy {accuracy:.2f}: a gap of {gap:.2f} > {rule.gap:g}, too weak to read this model")
    elif composed and needed:
        mechanism, reason = "compositional", f"{first}, and {drops}"
    elif hops > layers or uncontrolled:
        mechanism = "not classifiable"
        reason = (f"D = {hops} > L = {layers} is solved, which one hop per layer cannot do, yet {missing}"
                  if hops > layers else missing)
    else:
        mechanism, reason = "linear", f"D = {hops} ≤ L = {layers} and {missing}"
    return Mechanism(mechanism, reason, farthest, link_farthest, gated["link_rootward"], gated["link_leafward"],
                     reads, nxt, prev, float(ablation.composing_drop), float(ablation.control_drop),
                     float(ablation.chain_drop), float(ablation.offchain_drop), control, train, held_out, gap)


def mechanism_table(probes: pd.DataFrame, heads: pd.DataFrame, models: pd.DataFrame, rule: MechanismRule,
                    composition: pd.DataFrame | None = None, key: str = "run_id") -> pd.DataFrame:
    """One row per model of `models` (columns `key`, layers, hops, solved, accuracy) with its Mechanism's
    fields by `rule` (MECHANISM_COLUMNS); `probes` and `heads` hold the rows of every model and `composition` (a
    `composition_check` table: composing_heads, the ABLATION_COLUMNS, uniform_next, uniform_prev)
    one row per model, told apart by `key`. A model without a composition row has no ablation evidence."""
    checks = composition.set_index(key) if composition is not None and key in composition else pd.DataFrame()
    probe_groups, head_groups = dict(tuple(probes.groupby(key))), dict(tuple(heads.groupby(key)))
    rows = []
    for model in models.itertuples():
        name = getattr(model, key)
        check = checks.loc[name] if name in checks.index else pd.Series(dtype=object)
        found = classify(probe_groups.get(name, probes.iloc[:0]), head_groups.get(name, heads.iloc[:0]),
                         int(model.layers), int(model.hops), bool(model.solved), float(model.accuracy), rule,
                         Ablation(*(float(check.get(column, math.nan)) for column in ABLATION_COLUMNS)),
                         (float(check.get("uniform_next", 0.0)), float(check.get("uniform_prev", 0.0))))
        rows.append({key: name, "mechanism": found.mechanism, "reason": found.reason,
                     "farthest": _per_layer(found.farthest), "link_farthest": _per_layer(found.link_farthest),
                     "rootward_farthest": _per_layer(found.rootward_farthest),
                     "leafward_farthest": _per_layer(found.leafward_farthest),
                     "reads": found.reads, "link_next": found.link_next, "link_prev": found.link_prev,
                     "composing_heads": str(check.get("composing_heads", "")), "composing_drop": found.composing_drop,
                     "control_drop": found.control_drop, "chain_drop": found.chain_drop,
                     "offchain_drop": found.offchain_drop, "control": found.control, "probe_train": found.probe_train,
                     "probe_held_out": found.probe_held_out, "adequacy_gap": found.adequacy_gap})
    return pd.DataFrame(rows, columns=[key, *MECHANISM_COLUMNS])


def _per_layer(hops: tuple[int, ...]) -> str:
    """"1,3": a farthest hop per layer, as the tables write it."""
    return ",".join(str(h) for h in hops)
