"""Final-hop accuracy per link order of the queried chain, beside what the information flow allows in each.

A model's mean accuracy mixes link orders that its depth lets through with orders it cannot answer, and one
failing class of orders weighs by its share of all orders (4 of 24 orders at D = 4, 5 of 120 at D = 5). This
splits the accuracy by order so a cell can be judged in the orders the flow allows (docs/study-retrieval.md,
"Accuracy per link order").

- An example's **link_order** names the queried chain's links in the sequence they appear: link k is the statement
  x_k = x_{k-1} (link 1 holds the root), so "132" is link 1, then link 3, then link 2; chain order is "12…D".
- Its **class** says for each pair of chain neighbours (link k, link k+1) whether the root-ward link comes first
  ("<") or later (">"), k = 1..D-1: which way a link must read its neighbour to gather the chain. Orders of one
  class need the same composition directions; the class does not fix the layers an order needs.
- **hop{n}_accuracy** (IC only, n = 1..D) is the accuracy of the read-out's hop-n block, x_{D-n}: where in the
  chain an order's answers break.
- **rootward_reachable** (packed layout) says whether the flow still reaches x_0 within the model's layers when
  no link may read its leaf-ward neighbour (`flow.gathered_sets`' `leafward`): the orders root-ward composition
  can answer. **leafward_layers** names the layers at which forbidding leaf-ward reads, the other layers left
  free, makes the order unreachable ("1": it needs a leaf-ward read at layer 1; "" none does alone).
- **layers_needed** is the fewest layers after which the flow (`headway.tasks.retrieval.flow`) holds x_0 at
  the read-out position in that order; **reachable** says whether the model's depth is enough.

Rows are per order up to ORDER_ROWS_HOPS hops (120 orders at most, each drawn ~140 times from ORDER_EXAMPLES
examples); beyond, per class, where `reachable` is the share of the class's examples whose order is reachable
and `layers_needed` the most any of them needs. Only the plain variant with queries of the full depth D has a
queried chain of D links; other tasks give an empty table.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pandas as pd
import torch

from headway.analysis.inputs import instance_tokens
from headway.errors import ConfigError
from headway.analysis.retrieval.reach import check_cell
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.flow import order_chunks, reaches
from headway.tasks.retrieval.generator import RetrievalBatch
from headway.tasks.retrieval.positions import StatementMap

ORDER_EXAMPLES = 16384  # examples the table is drawn from: ~140 per order at D = 5
ORDER_ROWS_HOPS = 5  # one row per order up to this many hops (D! ≤ 120), per class beyond
ORDER_LIST_HOPS = 6  # `order_needs` lists every order up to this many hops (720)
BATCH = 2048  # examples per forward pass
COLUMNS = ("instance", "link_order", "order_class", "examples", "correct", "accuracy", "reachable", "layers_needed",
           "rootward_reachable", "leafward_layers")


def link_orders(smap: StatementMap) -> np.ndarray:
    """[N, D] the queried chain's link numbers minus one (link k → k-1) in the sequence they appear: the
    orders `headway.tasks.retrieval.flow` plays out."""
    position_of_link = smap.hop_link[:, ::-1]  # hop j (from the query) uses link D+1-j; reversed: link 1 first
    return np.argsort(position_of_link, axis=1, kind="stable")


def order_names(orders: np.ndarray) -> np.ndarray:
    """Each row's order as its link numbers joined ("132"; "-" between numbers once D ≥ 10)."""
    joiner = "" if orders.shape[1] < 10 else "-"
    return np.array([joiner.join(str(k + 1) for k in row) for row in orders])


def order_classes(orders: np.ndarray) -> np.ndarray:
    """Each row's class: for k = 1..D-1, "<" when link k comes before link k+1, ">" when after."""
    position = np.argsort(orders, axis=1)  # position[n, k-1]: where link k sits among the chain's links
    before = position[:, :-1] < position[:, 1:]
    return np.array(["".join("<" if b else ">" for b in row) for row in before])


def layers_needed(orders: np.ndarray, attention: str, layout: str) -> np.ndarray:
    """[N] the fewest layers after which the read-out holds x_0 in each order (one hop per layer always does
    by D, or D + 1 in the flat layout)."""
    unique, inverse = np.unique(orders, axis=0, return_inverse=True)
    needed = np.zeros(len(unique), dtype=np.int64)
    for layers in range(1, 2 * orders.shape[1] + 3):
        open_rows = np.flatnonzero(needed == 0)
        if not len(open_rows):
            break
        hit = np.concatenate([reaches(chunk, layers, attention, layout)
                              for chunk in order_chunks(unique[open_rows], layout)])
        needed[open_rows[hit]] = layers
    return needed[inverse.reshape(-1)]


def direction_needs(orders: np.ndarray, layers: int, attention: str, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Per row of `orders`: whether `layers` layers reach x_0 with root-ward reads only (float, NaN outside the
    packed layout), and the layers whose leaf-ward reads it cannot do without (module docstring)."""
    if layout != "packed":
        return np.full(len(orders), np.nan), np.full(len(orders), "", dtype=object)
    unique, inverse = np.unique(orders, axis=0, return_inverse=True)

    def reach(leafward: list[bool]) -> np.ndarray:
        return np.concatenate([reaches(chunk, layers, attention, layout, leafward)
                               for chunk in order_chunks(unique, layout)])

    rootward = reach([False] * layers).astype(float)
    free = reach([True] * layers)
    needed = [free & ~reach([t != layer for t in range(layers)]) for layer in range(layers)]
    names = np.array([",".join(str(layer + 1) for layer in range(layers) if needed[layer][i])
                      for i in range(len(unique))], dtype=object)
    inverse = inverse.reshape(-1)
    return rootward[inverse], names[inverse]


def check_listable(hops: int, layers: int, attention: str, layout: str) -> None:
    """Refuse, naming the bad value, what `order_needs` cannot list: a bad cell (`reach.check_cell`) or more hops
    than ORDER_LIST_HOPS."""
    hops = check_cell(hops, layers, attention, "shuffled", layout)[0]
    if hops > ORDER_LIST_HOPS:
        raise ConfigError(f"hops = {hops} lists {math.factorial(hops)} orders; list every order for "
                          f"1..{ORDER_LIST_HOPS} hops ({math.factorial(ORDER_LIST_HOPS)} orders at most)")


def order_needs(hops: int, layers: int, attention: str = "causal", layout: str = "packed") -> pd.DataFrame:
    """Every link order of one `hops`-hop chain (`link_order`, `order_class`) with what the flow needs in it:
    `layers_needed`, whether `layers` reach it (`reachable`), whether root-ward reads alone do
    (`rootward_reachable`, packed layout) and the layers whose leaf-ward reads it cannot do without."""
    check_listable(hops, layers, attention, layout)
    every = np.array(list(itertools.permutations(range(hops))), dtype=np.int64).reshape(-1, hops)
    needed = layers_needed(every, attention, layout)
    rootward, leafward = direction_needs(every, layers, attention, layout)
    return pd.DataFrame({"link_order": order_names(every), "order_class": order_classes(every),
                         "layers_needed": needed, "reachable": needed <= layers, "rootward_reachable": rootward,
                         "leafward_layers": leafward})


@torch.no_grad()
def block_hits(model: EnsembleTransformer, tokens: np.ndarray, targets: np.ndarray, vocab: int) -> np.ndarray:
    """[E, N, B] whether each instance's read-out block b names `targets[:, b]` (B blocks of `vocab` logits, the
    last the answer), BATCH examples a pass."""
    device = next(model.parameters()).device
    blocks = targets.shape[1]
    hits = []
    for start in range(0, len(tokens), BATCH):
        out = model(instance_tokens(tokens[start:start + BATCH], model.n_instances, device))
        logits = out[..., -blocks * vocab:].unflatten(-1, (blocks, vocab))
        hits.append(logits.argmax(dim=-1).cpu().numpy() == targets[None, start:start + BATCH])
    return np.concatenate(hits, axis=1)


def order_accuracy(model: EnsembleTransformer, task: RetrievalConfig, batch: RetrievalBatch,
                   smap: StatementMap) -> pd.DataFrame:
    """COLUMNS per instance and order (or class beyond ORDER_ROWS_HOPS hops) of `batch`'s full-depth queries,
    `reachable` at the model's depth (module docstring)."""
    if task.conditional:
        return pd.DataFrame(columns=list(COLUMNS))
    full = np.flatnonzero(batch.query_hops == task.hops)
    if not len(full):
        return pd.DataFrame(columns=list(COLUMNS))
    orders = link_orders(smap)[full]
    needed = layers_needed(orders, model.cfg.attention, task.layout)
    ic = task.curriculum == "ic"
    targets = batch.chain[full, 1:task.hops + 1] if ic else batch.answer[full, None]
    hits = block_hits(model, batch.tokens[full], targets, task.vocab)
    by_order = task.hops <= ORDER_ROWS_HOPS
    rootward, leafward = direction_needs(orders, model.cfg.layers, model.cfg.attention, task.layout)
    frame = pd.DataFrame({"link_order": order_names(orders) if by_order else "", "order_class": order_classes(orders),
                          "reachable": needed <= model.cfg.layers, "layers_needed": needed,
                          "rootward_reachable": rootward, "leafward_layers": leafward if by_order else ""})
    hops = [f"hop{n}_accuracy" for n in range(1, task.hops + 1)] if ic else []
    keys = ["link_order", "order_class"]
    rows = []
    for instance in range(model.n_instances):
        mine = frame.assign(correct=hits[instance, :, -1], **{h: hits[instance, :, i] for i, h in enumerate(hops)})
        grouped = (mine.groupby(keys, sort=True)
                   .agg(examples=("correct", "size"), correct=("correct", "sum"), reachable=("reachable", "mean"),
                        layers_needed=("layers_needed", "max"), rootward_reachable=("rootward_reachable", "mean"),
                        leafward_layers=("leafward_layers", "first"), **{h: (h, "mean") for h in hops})
                   .reset_index())
        rows.append(grouped.assign(instance=instance, accuracy=grouped.correct / grouped.examples))
    table = pd.concat(rows, ignore_index=True)
    table["correct"] = table.correct.astype(int)
    table["examples"] = table.examples.astype(int)
    return table[[*COLUMNS, *hops]]


RUN_COLUMNS = ("run_id", "order_rows", "reachable_orders", "fewest_examples", "reachable_accuracy",
               "unreachable_accuracy", "reachable_orders_solved", "worst_order", "worst_order_accuracy")


def run_order_summary(orders: pd.DataFrame, solved: float) -> pd.DataFrame:
    """Per run (RUN_COLUMNS) from `orders` tagged with run_id: its rows, the rows the flow lets through at its
    depth and the fewest examples of a row; the accuracy averaged over reachable rows and over unreachable rows
    (each order weighs the same, so no class counts by its share of all orders); the share of reachable rows
    with accuracy ≥ `solved`; and its worst reachable row. A class row counts only when the flow lets all of
    its examples through, or none; NaN where a run has no such row."""
    if orders.empty:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    rows = []
    for run_id, mine in orders.groupby("run_id", sort=True):
        label = np.where(mine.link_order != "", mine.link_order, mine.order_class)
        reachable, unreachable = mine.reachable >= 1.0, mine.reachable <= 0.0
        inside = mine[reachable]
        worst = inside.accuracy.idxmin() if len(inside) else None
        rows.append({"run_id": run_id, "order_rows": len(mine), "reachable_orders": int(reachable.sum()),
                     "fewest_examples": int(mine.examples.min()),
                     "reachable_accuracy": float(inside.accuracy.mean()) if len(inside) else np.nan,
                     "unreachable_accuracy": float(mine[unreachable].accuracy.mean()) if unreachable.any() else np.nan,
                     "reachable_orders_solved": float((inside.accuracy >= solved).mean()) if len(inside) else np.nan,
                     "worst_order": "" if worst is None else str(label[mine.index.get_loc(worst)]),
                     "worst_order_accuracy": np.nan if worst is None else float(mine.accuracy[worst])})
    return pd.DataFrame(rows, columns=list(RUN_COLUMNS))
