"""What a fresh confirmation of the sorting study's rise-and-fall claim could decide, projected from a traced folder.

Prints the bias each stability statistic gives on the folder's runs (rule `llc_bias_statistic`: largest or pooled)
and the claim's power for N fresh runs like the folder's at each stated bias, at the strictest Holm level (α over the
folder's tested claims), with the largest bias at which each N reaches 0.8:

    python scripts/project_sorting_llc.py results/sorting-rise-fall-confirm-cpu --runs 12,20,24 \\
        --bias 0.015,0.02,0.025

The arithmetic is `headway.studies.sorting.projection` (the verdict's own power functions); docs/study-sorting.md
uses it to design a confirmation before its data.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))


def numbers(text: str, kind: type) -> list:
    """A comma list of `kind` values, refused with its text when one is not a number."""
    try:
        return [kind(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a comma list of numbers") from None


def main(argv: list[str] | None = None) -> int:
    from headway.studies.sorting.projection import (folder_rules, measured_biases, power_table, projected_power,
                                                    traced_runs)

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a sorting study folder with llc_curve.csv (and llc_stability.csv)")
    parser.add_argument("--runs", type=lambda t: numbers(t, int), default=[4, 8, 12, 24],
                        help="fresh runs to project for, a comma list [4,8,12,24]")
    parser.add_argument("--bias", type=lambda t: numbers(t, float), default=[0.01, 0.015, 0.02, 0.025, 0.03],
                        help="relative biases to project at, a comma list [0.01,…,0.03]")
    args = parser.parse_args(argv)
    if not (args.folder / "summary.json").exists():
        parser.error(f"{args.folder} holds no summary.json: not a study folder")
    rules = folder_rules(args.folder)
    tested = sum(1 for verdict in json.loads((args.folder / "summary.json").read_text())["verdicts"]
                 if verdict.get("p_value") is not None)
    alpha = rules.alpha / max(tested, 1)
    runs = traced_runs(args.folder, rules)
    biases = measured_biases(args.folder, runs, rules)
    print(f"{args.folder}: {len(runs)} traced runs; power at α/{max(tested, 1)} = {alpha:.3g} (Holm's strictest level)")
    for statistic, bias in biases.items():
        print(f"  bias by statistic {statistic}: {bias:.2%}; the folder's own runs at it: "
              f"power {projected_power(runs, rules, bias, len(runs), alpha):.3g}")
    print(power_table(runs, rules, args.bias, args.runs, alpha).to_string(float_format=lambda v: f"{v:.3f}"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
