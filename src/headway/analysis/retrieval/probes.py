"""Linear probes on the residual stream: which hop distances are decodable after each layer (Theorem 1).

After t layers a position can have gathered information from at most 3^t statements' worth of chain,
so at the query (which must reach both ends of a hop) the reachable hop distance is floor(3^t / 2).
Two sites are probed, each read at a statement's reading position:

- `query`: the query statement; label for hop k is the symbol k hops down the queried chain
  (`batch.chain[:, k]`, k = 1..D).
- `link`: every chain link (true links only in the conditional variant); label for hop k is the
  symbol k hops down from its left entity (k = 1 is its own right entity, k = 2 the right entity of
  its next link, ...). Samples whose chain ends before k hops are left out.

Two more link sites read each direction where the information flow lets it arrive (plain tasks only):

- `link_rootward`: the `link` labels (hop k: the symbol k hops root-ward of its left entity);
- `link_leafward`: hop k is the symbol k − 1 links leaf-ward of its right entity (k = 1 its own left
  entity, k = 2 the left entity of the link before it in the chain);

each probe after layer t trained and read only on the links whose symbol set after t layers holds the
label under the gather rule (`headway.tasks.retrieval.flow`), played on each link's own chain in its own
link order. A causal model can compose a link only with a neighbour stated earlier, so over all links a
composing model decodes hop 2 on about half of them and the `link` site misses it; the flow-gated sites
see it in the orders where it can happen, in either direction.

A probe is ridge regression onto one-hot labels (argmax decodes); layer 0 is the embedding. Each
row reports its accuracy on the training samples and on held-out ones: a probe fitted on too few
samples for its d_model features over-fits (train far above held-out) and under-reads what the
model holds. `probe_examples` sizes the examples so that the query probe, the scarcer site (one
sample per example), trains on `SAMPLES_PER_FEATURE` samples per feature and `SAMPLES_PER_CLASS` per
symbol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import torch

from headway.analysis.inputs import instance_tokens
from headway.analysis.retrieval.orders import ORDER_ROWS_HOPS, order_classes
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval.flow import gathered_sets, initial_sets, order_chunks
from headway.tasks.retrieval.positions import NONE, StatementMap, follow, link_numbers, reading_positions
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch

SITES = ("query", "link")
GATED_SITES = ("link_rootward", "link_leafward")  # link probes read where the flow lets each direction arrive
# Training samples a probe needs. Ten per feature, the usual floor for a linear read-out, under-read whole-chain
# models: on one at accuracy 0.945 (V 24, width 64, D 5) the query probe for hop 5 held out 0.835 at 10 per
# feature, 0.867 at 20, 0.894 at 40, 0.911 at 80 (train 0.95 → 0.92), and the adequacy check refused it. Eighty
# per feature is where it stopped rising. Twenty per symbol keeps every one-hot column fitted on more than a handful.
SAMPLES_PER_FEATURE = 80
SAMPLES_PER_CLASS = 20
# columns of the gated probes read per order class (`probe_tables`); `probe_hops` is the hop the probe decodes (the
# first table's `hops`), named apart from a cell's D
ORDER_COLUMNS = ("instance", "layer", "site", "probe_hops", "order_class", "link", "samples", "accuracy")


@dataclass(frozen=True)
class ProbeTargets:
    """Probe samples per site: example and statement index of each sample, labels [samples, hops] (NONE: none)."""

    query_example: np.ndarray  # [N]
    query_statement: np.ndarray  # [N]
    query_labels: np.ndarray  # [N, D]: label of hop k in column k-1
    link_example: np.ndarray  # [M]
    link_statement: np.ndarray  # [M]
    link_labels: np.ndarray  # [M, max_hops]

    def site(self, name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(example, statement, labels) of one site, `query` or `link`."""
        if name not in SITES:
            raise ValueError(f"site = {name!r}; choose one of {', '.join(SITES)}")
        return getattr(self, f"{name}_example"), getattr(self, f"{name}_statement"), getattr(self, f"{name}_labels")


@torch.no_grad()
def residual_streams(model: EnsembleTransformer, cfg: RetrievalConfig, tokens: np.ndarray,
                     chunk: int = 512) -> np.ndarray:
    """The residual stream before the first block and after every block, [E, L+1, N, S, d_model] float32."""
    n_layers = model.cfg.layers
    names = [model.hook_name("hook_resid_pre", 0)] + [model.hook_name("hook_resid_post", layer)
                                                       for layer in range(n_layers)]
    device = next(model.parameters()).device
    parts = []
    for start in range(0, len(tokens), chunk):
        batch = instance_tokens(tokens[start : start + chunk], model.n_instances, device)
        _, cache = model.run_with_cache(batch, names)
        parts.append(torch.stack([cache[name] for name in names], dim=1).float().cpu().numpy())
    return np.concatenate(parts, axis=2)


def probe_examples(d_model: int, vocab: int, test_fraction: float = 0.3) -> int:
    """Examples whose train split gives the query probe (one sample per example) at least
    `SAMPLES_PER_FEATURE` samples per feature (d_model and a bias) and `SAMPLES_PER_CLASS` per symbol."""
    train = max(SAMPLES_PER_FEATURE * (d_model + 1), SAMPLES_PER_CLASS * vocab)
    return math.ceil(train / (1.0 - test_fraction))


def probe_targets(cfg: RetrievalConfig, batch: RetrievalBatch, smap: StatementMap, max_hops: int) -> ProbeTargets:
    """Labels of both sites: hops 1..D at the query from `batch.chain`, hops 1..max_hops at every chain link."""
    chain = np.asarray(batch.chain)
    n = len(chain)
    link_example, link_statement = np.nonzero(smap.is_link)
    link_labels = walk_labels(smap.right, smap.next_link, link_example, link_statement, max_hops)
    return ProbeTargets(
        query_example=np.arange(n),
        query_statement=np.full(n, smap.query),
        query_labels=chain[:, 1 : cfg.hops + 1].astype(np.int64),
        link_example=link_example,
        link_statement=link_statement,
        link_labels=link_labels,
    )


def walk_labels(entities: np.ndarray, pointers: np.ndarray, example: np.ndarray, statement: np.ndarray,
                max_hops: int) -> np.ndarray:
    """[M, max_hops] probe labels: hop k is `entities` [N, P] of the link k − 1 moves along `pointers` [N, P] from
    each (example, statement) link (NONE past the chain's end). The right entities along `next_link` are the
    `link` site's labels; the left ones along `prev_link` the `link_leafward` site's."""
    labels = np.full((len(example), max_hops), NONE, dtype=np.int64)
    current = statement[:, None]
    pointers = pointers[example]
    for k in range(max_hops):
        valid = current[:, 0] >= 0
        labels[valid, k] = entities[example[valid], current[valid, 0]]
        current = follow(current, pointers, 1)
    return labels


def _link_chains(cfg: RetrievalConfig, smap: StatementMap) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every link of the batch, chain by chain: the link numbers minus one of each chain in statement order
    (its link order, [chains, hops]), each link's row in that flattening ([N, P], NONE off the chains) and each
    link's number ([N, P])."""
    number, root = link_numbers(smap, cfg.hops)
    n_statements = smap.n_statements
    ex, st = np.nonzero(smap.is_link)
    chain = ex * n_statements + root[ex, st]
    order = np.lexsort((st, chain))
    ex, st, chain = ex[order], st[order], chain[order]
    if len(chain) % cfg.hops or not (chain.reshape(-1, cfg.hops) == chain[:: cfg.hops, None]).all():
        raise ValueError(f"flow-gated probes need chains of {cfg.hops} links each")
    row = np.full((len(smap.is_link), n_statements), NONE, dtype=np.int64)
    row[ex, st] = np.arange(len(ex))
    return (number[ex, st] - 1).reshape(-1, cfg.hops), row, number


def link_classes(cfg: RetrievalConfig, smap: StatementMap, example: np.ndarray,
                 statement: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per (example, statement) link: the order class of its own chain (`orders.order_classes`: for each pair of
    neighbours, whether the root-ward one comes first) and its link number k (1 = the root link)."""
    orders, row, number = _link_chains(cfg, smap)
    classes = np.repeat(order_classes(orders), cfg.hops)
    return classes[row[example, statement]], number[example, statement].astype(np.int64)


def flow_gates(cfg: RetrievalConfig, smap: StatementMap, example: np.ndarray, statement: np.ndarray, layers: int,
               attention: str) -> tuple[np.ndarray, np.ndarray]:
    """(root-ward, leaf-ward) [M, layers + 1, hops] bool: whether the gather rule lets each (example, statement)
    link hold its hop-k label after 0..`layers` layers, played on the link's own chain in its link order."""
    orders, row, number = _link_chains(cfg, smap)
    reading = np.arange(cfg.hops) if cfg.layout == "packed" else 2 * np.arange(cfg.hops) + 1
    held = np.zeros((len(orders), layers + 1, cfg.hops), dtype=np.uint64)  # [chains, layer, link in statement order]
    start = 0
    for chunk in order_chunks(orders, cfg.layout):
        sets = initial_sets(chunk, cfg.layout)
        for layer in range(layers + 1):
            if layer:
                sets = gathered_sets(sets, attention, cfg.layout, layers=1)
            held[start : start + len(chunk), layer] = sets[:, reading]
        start += len(chunk)
    sets = held.transpose(0, 2, 1).reshape(-1, layers + 1)[row[example, statement]]  # [M, layers + 1]
    k = number[example, statement][:, None].astype(np.int64)  # link k holds x_k and x_{k-1}
    hop = np.arange(1, cfg.hops + 1)[None, :]

    def holds(bit: np.ndarray) -> np.ndarray:
        valid = (bit >= 0) & (bit <= cfg.hops)
        shifted = np.where(valid, bit, 0).astype(np.uint64)
        have = (sets[:, :, None] >> shifted[:, None, :]) & np.uint64(1)
        return (have == np.uint64(1)) & valid[:, None, :]

    return holds(k - hop), holds(k + hop - 1)


def fit_probe(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
              n_classes: int, ridge: float = 1e-2) -> tuple[float, float]:
    """(train, held-out) accuracy of a ridge-regression probe onto one-hot labels (`probe_hits`)."""
    train, hits = probe_hits(x_train, y_train, x_test, y_test, n_classes, ridge)
    return train, float(hits.mean()) if len(hits) else float("nan")


def probe_hits(x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray,
               n_classes: int, ridge: float = 1e-2) -> tuple[float, np.ndarray]:
    """Train accuracy and, per held-out sample, whether it is decoded, of a ridge-regression probe onto one-hot
    labels (features standardised on the train set, unpenalised bias, penalty `ridge` per sample); closed form
    in float64, so deterministic. Without samples on either side: NaN and no hits."""
    if len(y_test) == 0 or len(y_train) == 0:
        return float("nan"), np.zeros(0, dtype=bool)
    x = torch.as_tensor(np.asarray(x_train), dtype=torch.float64)
    mean, std = x.mean(0), x.std(0, correction=0)
    std = torch.where(std > 1e-12, std, torch.ones_like(std))

    def design(features: np.ndarray) -> torch.Tensor:
        z = (torch.as_tensor(np.asarray(features), dtype=torch.float64) - mean) / std
        return torch.cat([z, torch.ones(len(z), 1, dtype=torch.float64)], dim=1)

    a = design(x_train)
    targets = torch.nn.functional.one_hot(torch.as_tensor(np.asarray(y_train), dtype=torch.long), n_classes)
    penalty = torch.full((a.shape[1],), ridge * len(a), dtype=torch.float64)
    penalty[-1] = 0.0
    weights = torch.linalg.solve(a.T @ a + torch.diag(penalty), a.T @ targets.to(torch.float64))
    fitted = (a @ weights).argmax(1).numpy()
    predicted = (design(x_test) @ weights).argmax(1).numpy()
    return float((fitted == np.asarray(y_train)).mean()), predicted == np.asarray(y_test)


@torch.no_grad()
def stream_at(model: EnsembleTransformer, tokens: np.ndarray, example: np.ndarray, position: np.ndarray,
              chunk: int = 512) -> np.ndarray:
    """The residual stream before the first block and after every block at one position per sample
    (`example`, `position`), [E, L+1, samples, d_model] float32: only what a probe reads is kept, so the
    memory grows with the samples, not with examples × positions."""
    names = [model.hook_name("hook_resid_pre", 0)] + [model.hook_name("hook_resid_post", layer)
                                                       for layer in range(model.cfg.layers)]
    device = next(model.parameters()).device
    out = np.empty((model.n_instances, len(names), len(example), model.cfg.d_model), dtype=np.float32)
    for start in range(0, len(tokens), chunk):
        rows = np.nonzero((example >= start) & (example < start + chunk))[0]
        if not len(rows):
            continue
        _, cache = model.run_with_cache(instance_tokens(tokens[start : start + chunk], model.n_instances, device),
                                        names)
        at = (torch.as_tensor(example[rows] - start, device=device), torch.as_tensor(position[rows], device=device))
        out[:, :, rows] = torch.stack([cache[name][:, at[0], at[1]] for name in names], dim=1).float().cpu().numpy()
    return out


def depth_probes(model: EnsembleTransformer, cfg: RetrievalConfig, batch: RetrievalBatch, smap: StatementMap,
                 test_fraction: float = 0.3, seed: int = 0, max_link_samples: int = 8192) -> pd.DataFrame:
    """Probe accuracy per (instance, layer, site, hops): the first table of `probe_tables`."""
    return probe_tables(model, cfg, batch, smap, test_fraction, seed, max_link_samples)[0]


def probe_tables(model: EnsembleTransformer, cfg: RetrievalConfig, batch: RetrievalBatch, smap: StatementMap,
                 test_fraction: float = 0.3, seed: int = 0,
                 max_link_samples: int = 8192) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Probe accuracy per (instance, layer, site, hops): held out (`accuracy`, on `samples` test samples)
    and on its own training samples (`train_accuracy`, `train_samples`), with the `chance` accuracy; examples
    are split train/test once (seeded), so no example feeds both. Plain tasks add the flow-gated link sites
    (`GATED_SITES`, module docstring) on the same link samples. Whether a hop counts as decoded is the reader's
    threshold (`probe_reach`), not stored here.

    The second table reads the gated sites' probes per order class of each link's chain and link number
    (`order_class`, `link`: columns `ORDER_COLUMNS`), held out: whether the links of the orders a model fails
    hold what the flow lets them hold. It has rows up to `ORDER_ROWS_HOPS` hops (16 classes of 5 links at
    D = 5), and none for conditional tasks."""
    rng = np.random.default_rng(seed)
    n = len(batch)
    is_test = np.zeros(n, dtype=bool)
    is_test[rng.permutation(n)[: round(test_fraction * n)]] = True
    targets = probe_targets(cfg, batch, smap, cfg.hops)
    link_keep = np.arange(len(targets.link_example))
    if len(link_keep) > max_link_samples:
        link_keep = np.sort(rng.choice(len(link_keep), max_link_samples, replace=False))
    reading = reading_positions(cfg)
    sites = {site: targets.site(site) for site in SITES}
    sites["link"] = tuple(column[link_keep] for column in sites["link"])
    features = stream_at(model, np.asarray(batch.tokens), np.concatenate([sites[s][0] for s in SITES]),
                         np.concatenate([reading[sites[s][1]] for s in SITES]))  # [E, L+1, samples, d_model]
    bounds = np.cumsum([0] + [len(sites[s][0]) for s in SITES])
    layers = model.cfg.layers
    parts = {site: (*sites[site], features[:, :, bounds[i] : bounds[i + 1]], None) for i, site in enumerate(SITES)}
    classes = None
    if not cfg.conditional:  # the flow models plain chains only
        example, statement, _ = sites["link"]
        gates = flow_gates(cfg, smap, example, statement, layers, model.cfg.attention)
        link_features = parts["link"][3]
        parts["link_rootward"] = (example, statement, sites["link"][2], link_features, gates[0])
        parts["link_leafward"] = (example, statement, walk_labels(smap.left, smap.prev_link, example, statement,
                                                                  cfg.hops), link_features, gates[1])
        if cfg.hops <= ORDER_ROWS_HOPS:
            classes = pd.DataFrame(dict(zip(("order_class", "link"),
                                            link_classes(cfg, smap, example, statement), strict=True)))
    rows, by_class = [], []
    for site, (example, _, labels, mine, gate) in parts.items():
        test = is_test[example]
        for k in range(labels.shape[1]):
            for instance in range(mine.shape[0]):
                for layer in range(mine.shape[1]):
                    have = labels[:, k] >= 0 if gate is None else (labels[:, k] >= 0) & gate[:, layer, k]
                    train_rows, test_rows = have & ~test, have & test
                    x = mine[instance, layer]
                    train, hits = probe_hits(x[train_rows], labels[train_rows, k], x[test_rows],
                                             labels[test_rows, k], cfg.vocab)
                    key = {"instance": instance, "layer": layer, "site": site}
                    rows.append({**key, "hops": k + 1, "accuracy": float(hits.mean()) if len(hits) else float("nan"),
                                 "samples": int(test_rows.sum()), "train_accuracy": train,
                                 "train_samples": int(train_rows.sum())})
                    if classes is not None and gate is not None and len(hits):
                        by_class.append(_class_rows(classes[test_rows].assign(hit=hits),
                                                    {**key, "probe_hops": k + 1}))
    table = pd.DataFrame(rows)
    table["chance"] = 1.0 / cfg.vocab
    orders = pd.concat(by_class, ignore_index=True) if by_class else pd.DataFrame(columns=list(ORDER_COLUMNS))
    return table, orders


def _class_rows(reads: pd.DataFrame, key: dict) -> pd.DataFrame:
    """Held-out hits of one probe (`reads`: order_class, link, hit per sample) as a row per class and link."""
    grouped = reads.groupby(["order_class", "link"], sort=True).hit.agg(["size", "mean"]).reset_index()
    return grouped.rename(columns={"size": "samples", "mean": "accuracy"}).assign(**key)[list(ORDER_COLUMNS)]


def probe_reach(table: pd.DataFrame, threshold: float) -> pd.DataFrame:
    """Per instance, site and layer, how far the probes reach against Theorem 1's bounds.

    - `reach`: the largest k with every hop 1..k decoded at accuracy >= `threshold` (0 if hop 1 fails;
      a failed hop stops the count even if a later one passes); `max_hops`: the largest k probed.
    - `bound_theorem` = floor(3^layer / 2): the most hops the query can reach after `layer` layers
      (it starts with the query symbol alone and must gather both ends of every hop).
    - `tripling` = 3^layer: the longest chain segment, in links, one position can hold after `layer`
      layers; the bound for the link site, which starts with one whole link.
    """
    rows = []
    for (instance, site, layer), group in table.groupby(["instance", "site", "layer"], sort=True):
        accuracy = group.set_index("hops").accuracy.reindex(range(1, int(group.hops.max()) + 1))
        reach = int(np.cumprod((accuracy >= threshold).to_numpy()).sum())
        rows.append({"instance": instance, "site": site, "layer": layer, "reach": reach,
                     "max_hops": len(accuracy), "bound_theorem": 3 ** int(layer) // 2,
                     "tripling": 3 ** int(layer)})
    return pd.DataFrame(rows)
