"""Which lookup of the conditional retrieval task forms in a trained model: linear probes of what decides the
choice, at the query and at every link, layer by layer, and which of the two links leaving the query its answers
follow.

On fresh examples (D = 1): the query site is probed for the query entity's class, the rule bit (the relation
class 0 selects), the relation to follow, the answer and the decoy (the other entity linked from the query); each
link statement for its left entity's class and whether it is a true link (its relation is the one its left
entity's class selects). The answers are split into the true answer, the decoy and anything else: a model that
has the link lookup but not the conditional choice puts about half on each of the first two.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from headway.analysis.inputs import instance_tokens
from headway.analysis.retrieval.probes import fit_probe, residual_streams
from headway.model.transformer import EnsembleTransformer
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch, generate
from headway.tasks.retrieval.positions import reading_positions, statement_rows

HELD_OUT = 0.3  # share of the examples each probe is scored on


def conditional_labels(cfg: RetrievalConfig, batch: RetrievalBatch, rows: np.ndarray
                       ) -> tuple[dict[str, tuple[np.ndarray, int]], tuple[np.ndarray, np.ndarray, dict]]:
    """Query-site labels (name -> (label per example, classes)) and the link sites (example, statement, labels of
    every link statement) of a conditional batch whose statements are `rows` (`statement_rows`)."""
    n = len(batch.query)
    classes = np.asarray(batch.classes)  # [N, n_symbols, 2] (entity, class)
    lookup = np.full((n, cfg.vocab), -1)
    np.put_along_axis(lookup, classes[..., 0], classes[..., 1], axis=1)
    rules = np.asarray(batch.rules)
    query = np.asarray(batch.query)
    query_class = lookup[np.arange(n), query]
    follow = rules[np.arange(n), query_class]
    statements = np.asarray(batch.statements)  # [N, links, 3] relation, left, right
    from_query = statements[:, :, 1] == query[:, None]
    decoy = np.where(from_query & (statements[:, :, 2] != np.asarray(batch.answer)[:, None]),
                     statements[:, :, 2], -1).max(axis=1)
    query_labels = {"query_class": (query_class, cfg.classes), "rule_of_class0": (rules[:, 0], cfg.relations),
                    "relation_to_follow": (follow, cfg.relations), "answer": (np.asarray(batch.answer), cfg.vocab),
                    "decoy": (decoy, cfg.vocab)}
    relation0 = cfg.vocab
    is_link = (rows[:, :-1, 0] >= relation0) & (rows[:, :-1, 0] < relation0 + cfg.relations)
    example, statement = np.nonzero(is_link)
    left_class = lookup[example, rows[example, statement, 1]]
    true_link = (rows[example, statement, 0] - relation0) == rules[example, left_class]
    link_labels = {"left_class": (left_class, cfg.classes), "is_true_link": (true_link.astype(int), 2)}
    return query_labels, (example, statement, link_labels)


def conditional_probes(model: EnsembleTransformer, cfg: RetrievalConfig, examples: int, seed: int) -> pd.DataFrame:
    """One row per instance × site × layer × label: the held-out probe accuracy and the majority class's share
    (layer 0: the embeddings), then the answer shares at the output, on `examples` fresh examples drawn with
    `seed`; the same examples and split for every instance. Its residual streams are held at once: pass an
    ensemble of a few instances."""
    if not cfg.conditional or cfg.hops != 1:
        raise ValueError(f"conditional probes read D = 1 conditional examples, not conditional={cfg.conditional}, "
                         f"hops={cfg.hops}")
    batch = generate(cfg, examples, np.random.default_rng(seed), mixture_hops=False)
    tokens = np.asarray(batch.tokens)
    rows = statement_rows(cfg, tokens)
    streams = residual_streams(model, cfg, tokens)  # [E, L+1, N, S, d]
    reading = reading_positions(cfg)
    query_labels, (link_example, link_statement, link_labels) = conditional_labels(cfg, batch, rows)
    test = np.random.default_rng(0).random(examples) < HELD_OUT
    link_test = test[link_example]
    with torch.no_grad():
        logits = model(instance_tokens(tokens, model.n_instances, next(model.parameters()).device))
    predicted = logits.reshape(model.n_instances, examples, -1, cfg.vocab)[:, :, -1].argmax(-1).cpu().numpy()
    answer, decoy = np.asarray(batch.answer), query_labels["decoy"][0]
    out = []
    for e in range(model.n_instances):
        for layer in range(streams.shape[1]):
            sites = (("query", streams[e, layer, :, reading[-1]], query_labels, test),
                     ("link", streams[e, layer, link_example, reading[link_statement]], link_labels, link_test))
            for site, x, labels, held in sites:
                for name, (y, k) in labels.items():
                    _, accuracy = fit_probe(x[~held], y[~held], x[held], y[held], k)
                    out.append({"instance": e, "site": site, "layer": layer, "label": name, "accuracy": accuracy,
                                "majority": np.bincount(y[held], minlength=k).max() / held.sum()})
        shares = {"pred=answer": predicted[e] == answer, "pred=decoy": predicted[e] == decoy}
        shares["pred=other"] = ~(shares["pred=answer"] | shares["pred=decoy"])
        out += [{"instance": e, "site": "output", "layer": streams.shape[1] - 1, "label": name,
                 "accuracy": float(share.mean()), "majority": np.nan} for name, share in shares.items()]
    return pd.DataFrame(out)
