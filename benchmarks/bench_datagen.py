"""Retrieval data generation speed: vectorised generate() against a per-example Python loop, on one core.

Run: python benchmarks/bench_datagen.py [--n N] [--repeats R]. Prints examples/s, the speed-up over
the loop baseline measured in the same run, and a markdown table row. Writes no files. The process
is pinned to one CPU (Linux); generation uses no BLAS or torch, so no thread pool is involved.
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import time

import numpy as np

from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import generate

CFG = RetrievalConfig(vocab=32, chains=4, hops=4, layout="packed", order="shuffled", curriculum="ic")


def loop_generate(cfg: RetrievalConfig, n: int, rng: random.Random) -> tuple[np.ndarray, np.ndarray]:
    """Baseline: the same plain packed IC examples built one at a time in Python; returns tokens, targets."""
    k, d, base = cfg.chains, cfg.hops, cfg.base_vocab
    tokens, targets = [], []
    for _ in range(n):
        symbols = rng.sample(range(cfg.vocab), k * (d + 1))
        chains = [symbols[c * (d + 1) : (c + 1) * (d + 1)] for c in range(k)]
        links = [(chain[j], chain[j - 1]) for chain in chains for j in range(1, d + 1)]
        rng.shuffle(links)
        tokens.append([[left, base + right] for left, right in links] + [[chains[0][d], base + cfg.vocab]])
        targets.append(chains[0][d - 1 :: -1])
    return np.array(tokens, dtype=np.int32), np.array(targets, dtype=np.int64)


def examples_per_second(make, n: int, repeats: int) -> float:
    """Median throughput of make(n) over `repeats` timed runs after one warm-up run."""
    make(n)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        make(n)
        times.append(time.perf_counter() - start)
    return n / statistics.median(times)


def main() -> None:
    """Measure both generators on one core and print the comparison."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2**18, help="examples per timed run of generate()")
    parser.add_argument("--baseline-n", type=int, default=2**14, help="examples per timed run of the loop")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    rng = np.random.default_rng(0)
    fast = examples_per_second(lambda n: generate(CFG, n, rng), args.n, args.repeats)
    loop_rng = random.Random(0)
    slow = examples_per_second(lambda n: loop_generate(CFG, n, loop_rng), args.baseline_n, args.repeats)

    shape = f"D={CFG.hops} K={CFG.chains} V={CFG.vocab} {CFG.layout} {CFG.curriculum}"
    print(f"generate():      {fast:12,.0f} examples/s  ({shape}, n={args.n}, median of {args.repeats})")
    print(f"python loop:     {slow:12,.0f} examples/s  (n={args.baseline_n})")
    print(f"speed-up:        {fast / slow:12.1f}x")
    print()
    print("| benchmark | config | examples/s | loop baseline examples/s | speed-up | machine |")
    print("|---|---|---|---|---|---|")
    print(
        f"| retrieval datagen, 1 core | {shape} | {fast:,.0f} | {slow:,.0f} | {fast / slow:.1f}x "
        f"| {platform.machine()}, numpy {np.__version__} |"
    )


if __name__ == "__main__":
    main()
