"""Final-hop accuracy of trained retrieval models split by the order of the queried chain's links.

A model whose links compose root-ward only (each link reads the link its right symbol continues
into, when that link came earlier) can answer D = 3 with two causal layers only when the root link
x₁ = x₀ comes before the hop-2 link x₂ = x₁; in the other half of the orders it must guess. This
prints each run's accuracy on both halves, which tells that mechanism apart from a budget failure
(equal accuracy on both halves).

    python scripts/accuracy_by_link_order.py runs/depth-phase-cpu/runs --layers 2 --hops 3 [--csv by_link_order.csv]

The study's analysis now splits every model by the full link order (`order_table.csv`,
`headway.analysis.retrieval.orders`); this two-way split stays for the committed folders whose READMEs quote it.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from headway.analysis.inputs import instance_tokens
from headway.runs import layout
from headway.runs.store import load_model, load_runs
from headway.tasks.retrieval import generate
from headway.tasks.retrieval.positions import map_statements


def split_accuracy(run_dir: Path, examples: int, seed: int) -> list[dict]:
    """Per instance of one ensemble: accuracy where the root link precedes the hop-(D−1) link and where it follows.
    The instances share tokens (an ensemble's tasks differ at most in their training targets), so one draw serves all."""
    runs = load_runs(run_dir)
    task = runs[0].task
    batch = generate(task, examples, np.random.default_rng(seed))
    smap = map_statements(task, batch)
    root_first = smap.hop_link[:, -1] < smap.hop_link[:, -2]  # the last hop's link comes before the one leading to it
    model = load_model(run_dir)
    with torch.no_grad():
        out = model(instance_tokens(batch.tokens, model.n_instances))
    hits = out[..., -task.vocab:].argmax(-1).numpy() == batch.answer[None]
    return [{"run": run.run_id, "seed": run.seed, "supervision": run.task.supervision, "order": run.task.order,
             "accuracy": float(hits[e].mean()), "root_link_first": float(hits[e, root_first].mean()),
             "root_link_later": float(hits[e, ~root_first].mean()), "share_root_first": float(root_first.mean())}
            for e, run in enumerate(runs)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, help="a folder of ensembles (e.g. a study's runs/)")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hops", type=int, default=3)
    parser.add_argument("--examples", type=int, default=4096)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--csv", type=Path, help="also write the rows here (a results folder's by_link_order.csv)")
    args = parser.parse_args()
    print("supervision order seed accuracy | root link first | root link later (share first)")
    rows = []
    for run_dir in layout.ensemble_dirs(args.runs):
        first = load_runs(run_dir)[0]
        if first.model.layers != args.layers or first.task.hops != args.hops:
            continue
        for row in split_accuracy(run_dir, args.examples, args.seed):
            rows.append(row)
            print(f"{row['supervision']:>11} {row['order']:>8} {row['seed']:>4} {row['accuracy']:.3f} | "
                  f"{row['root_link_first']:.3f} | {row['root_link_later']:.3f} ({row['share_root_first']:.2f})")
    if args.csv:
        pd.DataFrame(rows).sort_values(["supervision", "seed"]).to_csv(args.csv, index=False)


if __name__ == "__main__":
    main()
