"""Search the sorting task's data features and recipes for copy-suppression pairs.

    python scripts/search_copy_suppression.py --out results/sorting-copy-search-cpu \
        --conditions repeats-dense,distinct --seeds 0..7

Trains every condition × seed under OUT/runs (re-running reuses finished runs and resumes an interrupted
ensemble), classifies every final model with the study's mode rule and writes OUT/models.csv,
mode_fractions.csv (Wilson 95% intervals), tests.csv, conditions.csv and report.md. The conditions and the
test are in `headway.studies.sorting.search`; docs/study-sorting.md, "Searching for copy-suppression".
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from headway.studies.sorting.search import (CONDITIONS, DEFAULT_CONDITIONS, classify_runs, rejudge, search_runs,
                                            write_report)


def seed_list(text: str) -> tuple[int, ...]:
    """'0..7' or '0,1,5'."""
    if ".." in text:
        low, high = text.split("..")
        return tuple(range(int(low), int(high) + 1))
    return tuple(int(s) for s in text.split(","))


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="search folder (runs/ and the tables)")
    parser.add_argument("--conditions", default=",".join(DEFAULT_CONDITIONS),
                        help=f"comma list of: {', '.join(CONDITIONS)}")
    parser.add_argument("--seeds", type=seed_list, default=tuple(range(8)), help="e.g. 0..7 (default)")
    parser.add_argument("--steps", type=int, default=None, help="override the steps of every condition")
    parser.add_argument("--examples", type=int, default=2000, help="lists the readout scale is measured on")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--train-only", action="store_true", help="train, write no tables")
    parser.add_argument("--classify-step", type=int, default=None,
                        help="classify the checkpoints at this step and train nothing (a search stopped early)")
    parser.add_argument("--rejudge", action="store_true",
                        help="write the tables and report again from OUT/models.csv (no checkpoints needed)")
    args = parser.parse_args(argv)
    command = "python scripts/search_copy_suppression.py " + " ".join(shlex.quote(a) for a in (argv or sys.argv[1:]))
    if args.rejudge:
        report = rejudge(args.out, command)
        print(report.read_text())
        return report
    names = [n.strip() for n in args.conditions.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONDITIONS]
    if unknown:
        parser.error(f"unknown condition(s) {unknown}; choose from {', '.join(CONDITIONS)}")
    conditions = {n: {**CONDITIONS[n], **({"steps": args.steps} if args.steps else {})} for n in names}
    named = search_runs(conditions, args.seeds)
    started = time.perf_counter()
    from headway.train.sweep import train_runs

    if args.classify_step is None:
        train_runs([run for _, run in named], args.out / "runs", device=args.device, progress=False)
        print(f"trained in {time.perf_counter() - started:.0f} s", flush=True)
    if args.train_only:
        return args.out
    table = classify_runs(args.out / "runs", named, args.examples, args.device, args.classify_step)
    report = write_report(args.out, table, command, time.perf_counter() - started)
    print(report.read_text())
    return report


if __name__ == "__main__":
    main()
