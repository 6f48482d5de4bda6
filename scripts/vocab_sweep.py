"""The composing recipe across vocabularies: one `headway study retrieval` per vocabulary × width × loss (2 causal
layers, D = 3, K = 4, links in chain order, dense supervision by default), then one table of what each reached.

    python scripts/vocab_sweep.py --out runs/vocab-sweep-cpu --vocab 24,48,96 --d-model 64,128 \
        --loss mse,cross_entropy --seeds 0..3 --table results/vocab-sweep-cpu/sweep.csv

Each study is resumable (re-running skips what is trained and analysed). Where the recipe fails at a larger V, the
width and loss columns say which change brings it back (docs/study-retrieval.md, "Across vocabularies").
"""

from __future__ import annotations

import argparse
import itertools
import subprocess
import sys
from pathlib import Path

import pandas as pd

RECIPE = ["--scale", "cpu", "--layers", "2", "--hops", "3", "--curriculum", "ic", "--conditional-hops", "none",
          "--no-progress"]
COLUMNS = ["vocab", "d_model", "loss", "order", "attention", "supervision", "seed", "val_accuracy", "solved",
           "mechanism", "run_id"]


def folder(out: Path, vocab: int, width: int, loss: str) -> Path:
    """The study folder of one vocabulary × width × loss."""
    return out / f"V{vocab}-w{width}-{loss}"


def run_study(where: Path, vocab: int, width: int, loss: str, args: argparse.Namespace) -> None:
    """One resumable study of the recipe at this vocabulary, width and loss."""
    command = ["headway", "study", "retrieval", *RECIPE, "--vocab", str(vocab), "--d-model", str(width),
               "--loss", loss, "--seed", args.seeds, "--steps", str(args.steps), "--order", args.order,
               "--attention", args.attention, "--supervision", args.supervision, "--out", str(where)]
    print(" ".join(command), flush=True)
    subprocess.run(command, check=True)


def gathered(out: Path) -> pd.DataFrame:
    """One row per run of every finished study under `out` (this sweep's and earlier ones'): its settings, final
    accuracy, whether solved, its mechanism."""
    frames = []
    for results in sorted(out.glob("V*-w*-*/results.csv")):
        vocab, width, loss = results.parent.name.split("-", 2)
        frames.append(pd.read_csv(results).assign(vocab=int(vocab[1:]), d_model=int(width[1:]), loss=loss)[COLUMNS])
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=COLUMNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="folder of the studies (one subfolder each)")
    parser.add_argument("--vocab", default="24,48,96", help="vocabularies V (comma list)")
    parser.add_argument("--d-model", default="64", help="residual widths (comma list)")
    parser.add_argument("--loss", default="mse", help="training losses: mse, cross_entropy (comma list)")
    parser.add_argument("--seeds", default="0..3", help="seeds of every study (headway's list syntax)")
    parser.add_argument("--steps", type=int, default=1500, help="training steps of every run")
    parser.add_argument("--order", default="chain", help="link order of the recipe")
    parser.add_argument("--attention", default="causal", help="attention of the recipe")
    parser.add_argument("--supervision", default="dense", help="supervision of the recipe")
    parser.add_argument("--table", type=Path, help="write the table of every finished study under --out here (CSV)")
    args = parser.parse_args(argv)
    cells = list(itertools.product([int(v) for v in args.vocab.split(",")],
                                   [int(w) for w in args.d_model.split(",")], args.loss.split(",")))
    for vocab, width, loss in cells:
        run_study(folder(args.out, vocab, width, loss), vocab, width, loss, args)
    table = gathered(args.out)
    if args.table:
        args.table.parent.mkdir(parents=True, exist_ok=True)
        table.to_csv(args.table, index=False)
    summary = table.groupby(["vocab", "d_model", "loss"]).agg(
        runs=("seed", "size"), solved=("solved", "sum"), accuracy_min=("val_accuracy", "min"),
        accuracy_max=("val_accuracy", "max"))
    print(summary.to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
