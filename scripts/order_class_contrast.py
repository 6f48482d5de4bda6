"""Whether a factor changes how often runs answer a class of link orders, read from a retrieval study folder.

Each run's class accuracy is its mean accuracy over the named orders (`order_table.csv`, every order weighing the
same whatever its number of examples); a run *answers the class* when that mean reaches the level (the retrieval
Rules' solved line unless given). The test is Fisher's exact test, one-sided: the runs at `--high` answer it more
often than the runs at `--low`.

    python scripts/order_class_contrast.py results/fourth-layer-class-cpu --orders 3214,3241,3421,4321 \\
        --factor layers --high 4 --low 3            # writes class_contrast.json in that folder

The JSON holds the test (its counts, p, the level and the orders) and every run's class accuracy, for the folder's
README template to quote.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "src"))

OUTPUT = "class_contrast.json"


def class_accuracy(order_table: Any, orders: list[str], factor: str) -> Any:
    """Per run (run_id, seed, the factor's value): the mean accuracy over `orders`; a run lacking one of them, or
    a factor the table does not have, is an error naming it."""
    if factor not in order_table.columns:
        raise ValueError(f"factor {factor!r} is not a column of order_table.csv; use one of "
                         f"{', '.join(order_table.columns)}")
    rows = order_table[order_table.link_order.isin(orders)]
    unread = sorted(set(rows.run_id[rows.accuracy.isna()]))
    if unread:  # a mean over the orders left would weigh them apart from the rest: refused, never read as a finding
        raise ValueError(f"run(s) {', '.join(unread)} have no accuracy for an order of the class")
    for run_id, found in rows.groupby("run_id").link_order:
        missing = sorted(set(orders) - set(found))
        if missing:
            raise ValueError(f"run {run_id} has no row for order(s) {', '.join(missing)}")
    absent = sorted(set(order_table.run_id) - set(rows.run_id))
    if absent:
        raise ValueError(f"run(s) {', '.join(absent)} have none of the orders {', '.join(orders)}")
    per_run = rows.groupby(["run_id", "seed", factor], as_index=False).accuracy.mean()
    return per_run.rename(columns={"accuracy": "class_accuracy"}).sort_values([factor, "seed"])


def contrast(per_run: Any, factor: str, high: str, low: str, level: float) -> dict[str, Any]:
    """The one-sided Fisher test that runs at factor = `high` answer the class (accuracy ≥ `level`) more often
    than runs at `low`, with each arm's counts."""
    from headway.analysis.statistics import fisher_greater

    arms = {}
    for name, value in (("high", high), ("low", low)):
        arm = per_run[per_run[factor].astype(str) == str(value)]
        if arm.empty:
            raise ValueError(f"no run has {factor} = {value}; the folder has "
                             f"{', '.join(sorted(per_run[factor].astype(str).unique()))}")
        answer = arm.class_accuracy >= level - 1e-9  # a mean at the level counts, whatever its rounding
        arms[name] = {"value": str(value), "runs": len(arm), "answer": int(answer.sum())}
    p = fisher_greater(arms["high"]["answer"], arms["high"]["runs"], arms["low"]["answer"], arms["low"]["runs"])
    return {"factor": factor, "level": level, "high": arms["high"], "low": arms["low"],
            "p_one_sided": None if math.isnan(p) else p}


def main(argv: list[str] | None = None) -> int:
    import pandas as pd

    from headway.files import atomic
    from headway.studies.retrieval.rules import RetrievalRules

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", type=Path, help="a retrieval study folder with order_table.csv")
    parser.add_argument("--orders", required=True, help="link orders of the class, comma list (e.g. 3214,4321)")
    parser.add_argument("--factor", required=True, help="a column of order_table.csv (e.g. layers, supervision)")
    parser.add_argument("--high", required=True, help="the factor's value expected to answer the class more often")
    parser.add_argument("--low", required=True, help="the factor's value it is compared with")
    parser.add_argument("--level", type=float, default=RetrievalRules().solved_accuracy,
                        help="class accuracy at which a run answers the class (default: the solved line)")
    parser.add_argument("--out", default=OUTPUT, help=f"name of the file written in the folder (default {OUTPUT})")
    args = parser.parse_args(argv)
    if Path(args.out).name != args.out or args.out in ("", ".", ".."):
        parser.error(f"--out {args.out!r} is not a file name; it names the file written inside the folder")
    table_path = args.folder / "order_table.csv"
    if not table_path.is_file():
        parser.error(f"{table_path} does not exist (a retrieval study folder analysed at version 7 or later has it)")
    orders = [order.strip() for order in args.orders.split(",") if order.strip()]
    try:
        per_run = class_accuracy(pd.read_csv(table_path, dtype={"link_order": str}), orders, args.factor)
        test = contrast(per_run, args.factor, args.high, args.low, args.level)
        result = {**test, "orders": orders, "runs": per_run.to_dict("records")}
        with atomic(args.folder / args.out) as written:  # a device or FIFO there is refused, never written over
            written.write_text(json.dumps(result, indent=1) + "\n")
    except ValueError as error:  # headway's ConfigError (a refused path) among them
        parser.error(str(error))
    print(f"{args.factor} = {args.high}: {test['high']['answer']} of {test['high']['runs']} answer the class; "
          f"{args.factor} = {args.low}: {test['low']['answer']} of {test['low']['runs']}; "
          f"one-sided Fisher p = {test['p_one_sided']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
