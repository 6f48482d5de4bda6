"""Draw the link order × supervision contrast of one cell from the results of one or more study folders.

The README's figure is drawn from the committed CPU phase diagrams (chain order from one study, shuffled
order from the other):

    python scripts/phase_contrast.py results/depth-phase-chain-cpu results/depth-phase-cpu \
        --layers 2 --hops 3 --out docs/figures/phase_contrast.png
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pandas as pd

from headway.plots.phase import plot_order_supervision_contrast
from headway.studies.retrieval.rules import RetrievalRules


def study_runs(folders: list[Path]) -> pd.DataFrame:
    """The plain-task IC runs of the `results.csv` of every folder, one table."""
    runs = pd.concat([pd.read_csv(folder / "results.csv") for folder in folders], ignore_index=True)
    return runs[(runs.part == "plain") & (runs.curriculum == "ic")]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folders", type=Path, nargs="+", help="study folders holding a results.csv")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hops", type=int, default=3, help="the cell to contrast (shaded)")
    parser.add_argument("--attention", default="causal")
    parser.add_argument("--layout", default="packed")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    runs = study_runs(args.folders)
    if runs.chance.nunique() != 1:
        parser.error("the folders' tasks have different numbers of chains; contrast runs of one task size")
    # A run's chance level is max(1/V, 1/K), and V ≥ K·(D+1) makes it the root guess 1/K.
    path = plot_order_supervision_contrast(runs, args.out, args.layers, args.hops, RetrievalRules().solved_accuracy,
                                           float(runs.chance.iloc[0]), args.attention, args.layout)
    print(path)


if __name__ == "__main__":
    main()
