"""Command-line start-up: `headway --help` (and a few commands' help) against the eager start-up it replaced.

Run: python benchmarks/bench_cli.py [--repeats R]. Each command runs R times as a fresh process
(`python -c ...`, so every import is paid again); the median wall time is printed beside the baseline
measured in the same run: the same help after importing what the eager start-up imported (every command
module, torch and pandas, as `headway` did before its commands loaded lazily). Writes no files.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import subprocess
import sys
import time

# The eager start-up: every command module with its heavy imports, then the same command.
EAGER = ("import torch, pandas, numpy; "
         "from headway.cli import data, demo, export, llm_eval, reach, show, study, train; ")
COMMANDS = (["--help"], ["train", "--help"], ["data", "retrieval", "--help"], ["llm-eval", "--help"],
            ["study", "--help"])


def seconds(preamble: str, argv: list[str], repeats: int) -> float:
    """Median wall time of a fresh Python process running `headway ARGV` after `preamble`."""
    code = f"{preamble}import sys; from headway.cli.main import main; sys.exit(main({argv!r}))"
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    print(f"{platform.processor() or platform.machine()}, Python {platform.python_version()}, "
          f"median of {args.repeats} fresh processes\n")
    print("| command | lazy start-up (s) | eager start-up (s) | faster |\n|---|---|---|---|")
    for argv in COMMANDS:
        lazy, eager = seconds("", argv, args.repeats), seconds(EAGER, argv, args.repeats)
        print(f"| `headway {' '.join(argv)}` | {lazy:.3f} | {eager:.3f} | {eager / lazy:.1f}× |")


if __name__ == "__main__":
    main()
