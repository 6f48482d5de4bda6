"""Damage every byte of one file of a trained ensemble, four ways each, and count what headway makes of each copy.

Each byte is XORed with 0x01 and with 0x80, and set to 0x00 and to 0xFF (a damage that leaves it as it was is
skipped); the ensemble is read back after each as `headway show` and a study read it: its metrics
(`load_metrics`) for metrics.parquet, its summary (`load_summary`) for summary.json, the weights of its last
checkpoint (`load_model`) for a checkpoint, all three for any other file. A damage is then refused (one
ConfigError line), read as the intact file, or accepted with other contents (a silent wrong result); any other
exception is counted too, with its first example. Issue 36 measured this on metrics.parquet:

    headway train --scale cpu --vocab 12 --chains 2 --hops 1 --layers 1 --heads 2 --d-model 16 --batch-size 32 \\
        --steps 60 --train-size 2048 --val-size 256 --eval-every 20 --checkpoint-every 30 --seed 0,1 \\
        --device cpu --no-progress --out /tmp/tiny
    python scripts/byte_damage.py /tmp/tiny/L1-S3-2e97a7e4 metrics.parquet
"""

from __future__ import annotations

import argparse
import collections
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from headway.errors import ConfigError
from headway.runs.store import load_metrics, load_model, load_summary

DAMAGES = {"xor 0x01": lambda b: b ^ 0x01, "xor 0x80": lambda b: b ^ 0x80, "0x00": lambda b: 0, "0xff": lambda b: 0xFF}


def read(run_dir: Path, name: str) -> tuple[Any, ...]:
    """What headway reads back from the ensemble through the file `name`: its metrics, its summary or its last
    weights (all three for another file)."""
    readers = {"metrics": lambda: load_metrics(run_dir), "summary": lambda: load_summary(run_dir),
               "weights": lambda: load_model(run_dir).state_dict()}
    kind = ("metrics" if name == "metrics.parquet" else "summary" if name == "summary.json"
            else "weights" if name.startswith("checkpoints/") else None)
    return tuple(read() for key, read in readers.items() if kind in (None, key))


def same(a: Any, b: Any) -> bool:
    """Equal contents: frames (columns and dtypes too), tensors, and containers of them."""
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.columns) == list(b.columns) and a.dtypes.equals(b.dtypes)
    if isinstance(a, torch.Tensor):
        return a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b or (a != a and b != b)


def sweep(run_dir: Path, name: str) -> tuple[collections.Counter, dict[str, str]]:
    """(outcome counts, the first example of each unwanted outcome) over every damage of `run_dir`/`name`."""
    counts: collections.Counter = collections.Counter()
    examples: dict[str, str] = {}
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch) / run_dir.name
        shutil.copytree(run_dir, work)
        target = work / name
        original = target.read_bytes()
        intact = read(work, name)
        for position, byte in enumerate(original):
            for how, damage in DAMAGES.items():
                if damage(byte) == byte:
                    continue
                target.write_bytes(original[:position] + bytes([damage(byte)]) + original[position + 1:])
                try:
                    got = read(work, name)
                except ConfigError:
                    counts["refused"] += 1
                    continue
                except Exception as err:  # noqa: BLE001 - counted: the sweep looks for exactly these
                    counts["other exception"] += 1
                    examples.setdefault("other exception", f"byte {position}, {how}: {err!r}"[:300])
                    continue
                outcome = "read as the intact file" if same(got, intact) else "ACCEPTED WITH OTHER CONTENTS"
                counts[outcome] += 1
                if outcome.startswith("ACCEPTED"):
                    examples.setdefault(outcome, f"byte {position}, {how}")
    return counts, examples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dir", type=Path, help="an ensemble directory (it is copied; the copy is damaged)")
    parser.add_argument("file", help="the file to damage, relative to it, e.g. metrics.parquet")
    args = parser.parse_args()
    counts, examples = sweep(args.run_dir, args.file)
    size = (args.run_dir / args.file).stat().st_size
    print(f"{args.file}: {size} bytes, {sum(counts.values())} damages: " + ", ".join(f"{n} {what}" for what, n in
                                                                                   counts.most_common()))
    for what, example in examples.items():
        print(f"  first {what}: {example}")


if __name__ == "__main__":
    main()
