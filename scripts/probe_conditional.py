"""Which lookup of the conditional retrieval task forms: linear probes and answer types of trained runs.

For every run of the given recipes (trained by scripts/sweep_conditional.py under --out), on fresh
validation examples (D = 1):

- answers: share of predictions that are the true answer x_0, the decoy z_1 (the other entity linked
  from the query), or anything else. A model that has the link lookup but not the conditional choice
  puts ~0.5 on each of the first two.
- query probes (ridge, `headway.analysis.retrieval.probes.fit_probe`) on the residual at the query
  position after each layer (layer 0 = embedding): the query entity's class, the rule bit (relation
  of class 0), the relation to follow (rules[class(query)]), the answer and the decoy.
- link probes at every link statement: the class of its left entity and whether it is a true link
  (its relation is the one its left entity's class selects).

Run: python scripts/probe_conditional.py --out runs/cond-sweep --recipes base,bidir --seeds 0,1,2 \
         --csv results/conditional-cpu-sweep/probes.csv
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))

from sweep_conditional import build_runs  # noqa: E402

from headway.runs.store import find_run, load_model  # noqa: E402
from headway.tasks.retrieval.positions import reading_positions, statement_rows  # noqa: E402
from headway.analysis.retrieval.probes import fit_probe, residual_streams  # noqa: E402
from headway.tasks.retrieval.generator import generate  # noqa: E402


def labels(cfg, batch, rows):  # noqa: ANN001 - a RetrievalConfig, RetrievalBatch and statement rows
    """Query-site labels [N] per name and link-site (example, statement, labels) of every link."""
    n = len(batch.query)
    cls = np.asarray(batch.classes)  # [N, n_symbols, 2] (entity, class)
    lookup = np.full((n, cfg.vocab), -1)
    np.put_along_axis(lookup, cls[..., 0], cls[..., 1], axis=1)
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
    left = rows[example, statement, 1]
    left_class = lookup[example, left]
    valid = (rows[example, statement, 0] - relation0) == rules[example, left_class]
    link_labels = {"left_class": (left_class, cfg.classes), "is_true_link": (valid.astype(int), 2)}
    return query_labels, (example, statement, link_labels)


def probe_run(out: Path, recipe: str, run, n: int = 3000, seed: int = 12345) -> list[dict]:
    """Probe rows of one trained run (its last checkpoint) on n fresh examples drawn with `seed`."""
    cfg = run.task
    run_dir, instance = find_run(out, run.run_id)
    model = load_model(run_dir, instance)
    batch = generate(cfg, n, np.random.default_rng(seed), mixture_hops=False)
    tokens = np.asarray(batch.tokens)
    rows = statement_rows(cfg, tokens)
    streams = residual_streams(model, cfg, tokens)[0]  # [L+1, N, S, d]
    reading = reading_positions(cfg)
    query_labels, (l_ex, l_st, link_labels) = labels(cfg, batch, rows)
    test = np.random.default_rng(0).random(n) < 0.3
    out_rows = []
    for layer in range(streams.shape[0]):
        x = streams[layer, :, reading[-1]]
        for name, (y, k) in query_labels.items():
            _, acc = fit_probe(x[~test], y[~test], x[test], y[test], k)
            out_rows.append({"recipe": recipe, "seed": run.seed, "site": "query", "layer": layer, "label": name,
                             "accuracy": acc, "majority": np.bincount(y[test], minlength=k).max() / test.sum()})
        xl = streams[layer, l_ex, reading[l_st]]
        lt = test[l_ex]
        for name, (y, k) in link_labels.items():
            _, acc = fit_probe(xl[~lt], y[~lt], xl[lt], y[lt], k)
            out_rows.append({"recipe": recipe, "seed": run.seed, "site": "link", "layer": layer, "label": name,
                             "accuracy": acc, "majority": np.bincount(y[lt], minlength=k).max() / lt.sum()})
    # answer types of the model's own prediction
    import torch

    from headway.analysis.inputs import instance_tokens
    with torch.no_grad():
        pred = model(instance_tokens(tokens, 1))[0].reshape(n, -1, cfg.vocab)[:, -1].argmax(-1).numpy()
    answer, decoy = np.asarray(batch.answer), query_labels["decoy"][0]
    for name, share in (("pred=answer", (pred == answer).mean()), ("pred=decoy", (pred == decoy).mean()),
                        ("pred=other", ((pred != answer) & (pred != decoy)).mean())):
        out_rows.append({"recipe": recipe, "seed": run.seed, "site": "output", "layer": streams.shape[0] - 1,
                         "label": name, "accuracy": float(share), "majority": np.nan})
    return out_rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--recipes", required=True)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--csv", type=Path, required=True)
    parser.add_argument("--examples", type=int, default=3000)
    args = parser.parse_args(argv)
    rows = []
    for recipe, run in build_runs(args.recipes.split(","), [int(s) for s in args.seeds.split(",")]):
        if not run.task.conditional:
            continue
        rows += probe_run(args.out, recipe, run, args.examples)
    table = pd.DataFrame(rows)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(args.csv, index=False)
    summary = table.groupby(["recipe", "site", "label", "layer"]).agg(
        accuracy=("accuracy", "mean"), majority=("majority", "mean")).reset_index()
    with pd.option_context("display.max_rows", 500, "display.width", 160):
        print(summary.to_string(index=False, float_format="%.3f"))


if __name__ == "__main__":
    main()
