"""Each run's last and best validation accuracy from a retrieval study folder's training metrics alone, for a study
that stopped before its analysis (a GPU piece cut by its time limit): no checkpoint or analysis is needed.

    python scripts/curves_table.py results/retrieval-gpu-logdepth            # writes curves.csv in that folder

One row per run: its cell (steps, layers, hops, order, supervision, seed), the last step its metrics reach, the
accuracy on the final hop there and the best over training, whether that final accuracy counts as solved (the
retrieval Rules' `solved_accuracy`) and whether the ensemble finished (`complete`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

COLUMNS = ["ensemble", "complete", "steps", "layers", "hops", "order", "supervision", "seed", "last_step",
           "final_accuracy", "best_accuracy", "solved"]


def curves_table(folder: Path):
    """The table (a pandas DataFrame) of every ensemble below `folder`/runs."""
    import pandas as pd

    from headway.runs import layout
    from headway.runs.metrics import read_metrics
    from headway.runs.store import load_runs
    from headway.studies.retrieval.rules import RetrievalRules

    threshold = RetrievalRules().solved_accuracy

    rows = []
    for run_dir in layout.ensemble_dirs(folder / "runs"):
        runs = load_runs(run_dir)
        metrics = read_metrics(run_dir / layout.METRICS, runs)
        for instance, run in enumerate(runs):
            curve = metrics[metrics.instance == instance].sort_values("step")
            final = curve[f"val_acc_hop{run.task.hops}"]
            rows.append({"ensemble": run_dir.name, "complete": (run_dir / layout.SUMMARY).is_file(),
                         "steps": run.train.steps, "layers": run.model.layers, "hops": run.task.hops,
                         "order": run.task.order, "supervision": run.task.supervision, "seed": run.seed,
                         "last_step": int(curve.step.iloc[-1]), "final_accuracy": round(float(final.iloc[-1]), 4),
                         "best_accuracy": round(float(final.max()), 4),
                         "solved": bool(final.iloc[-1] >= threshold)})
    return pd.DataFrame(rows, columns=COLUMNS).sort_values(["steps", "hops", "supervision", "seed"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a retrieval study folder (holding runs/)")
    args = parser.parse_args(argv)
    if not (args.folder / "runs").is_dir():
        parser.error(f"{args.folder} holds no runs/ folder; give a study folder")
    from headway.files import atomic

    table = curves_table(args.folder)
    with atomic(args.folder / "curves.csv") as partial:  # a device or FIFO there is refused, never written over
        table.to_csv(partial, index=False)
    print(table.groupby(["steps", "hops", "supervision"]).final_accuracy.describe().to_string())
    return 0


if __name__ == "__main__":
    sys.exit(main())
