"""Interaction order of the conditional retrieval choice (D = 1): how well each subset of the bits that
decide it predicts which of the two links leaving the query is the true one.

For a query x_1 with class c, rule bit rule0 (the relation class 0 selects) and rA the relation of the
first-listed link leaving x_1, the Bayes accuracy of predicting "that link is true" from each subset
of (c, rule0, rA) is printed (lookup-table rate on drawn examples). With R = C = 2 every proper subset
gives 0.5: the choice is the parity of three bits, so no one- or two-piece partial circuit lowers the
loss. With C = 1 it is a two-bit interaction (rule0, rA).

Run: python scripts/conditional_interactions.py [--examples 20000]
"""

from __future__ import annotations

import argparse
import itertools

import numpy as np

from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import generate


def subset_accuracies(relations: int, classes: int, n: int, seed: int = 1) -> dict[str, float]:
    cfg = RetrievalConfig(vocab=16, chains=2, hops=1, conditional=True, relations=relations, classes=classes)
    b = generate(cfg, n, seed)
    rows = np.arange(n)
    lookup = np.full((n, cfg.vocab), -1)
    np.put_along_axis(lookup, b.classes[..., 0], b.classes[..., 1], axis=1)
    first = (b.statements[:, :, 1] == b.query[:, None]).argmax(1)
    a_true = b.statements[rows, first, 2] == b.answer
    bits = {"c": lookup[rows, b.query], "rule0": b.rules[:, 0], "rA": b.statements[rows, first, 0]}
    out = {}
    for k in range(len(bits) + 1):
        for subset in itertools.combinations(bits, k):
            key = np.zeros(n, dtype=np.int64)
            for name in subset:
                key = key * 8 + bits[name]
            right = sum(max(a_true[key == v].sum(), (~a_true[key == v]).sum()) for v in np.unique(key))
            out["+".join(subset) or "(none)"] = right / n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=20000)
    args = parser.parse_args()
    for relations, classes in ((2, 2), (2, 1), (4, 1), (4, 2)):
        accs = subset_accuracies(relations, classes, args.examples)
        print(f"R={relations} C={classes}: " + "  ".join(f"{k} {v:.3f}" for k, v in accs.items()))


if __name__ == "__main__":
    main()
