"""Scale-out: the same sweep by `headway train` run locally (one ensemble after another in one process),
on a one-node Ray cluster and on a two-node Ray cluster (nodes started by `ray start` on 127.0.0.1), in one
run, alternating.

Run: python benchmarks/bench_cluster.py [--rounds N] [--steps N] [--ensembles N] [--device cpu|cuda]
Prints two markdown tables: (1) per-ensemble overhead, from a sweep whose ensembles train for 2 steps
(so the wall time is the fixed cost of a job: its process, data, checkpoints and, under Ray, the task);
(2) throughput of a sweep of real ensembles (CPU scale), as ensembles per minute and the ratio to the
local run. Each cell is the median over rounds of the whole command's wall time, with its range.
A cluster's start-up time is measured once and reported apart. Both clusters offer the same CPUs in all
(one node of all CPUs, or two nodes of half each), and every task reserves one CPU.
With `--device cuda` the ways are: local on the GPU, and a one-node cluster holding every GPU of the
machine with tasks reserving a whole GPU or a quarter of one (four ensembles side by side per GPU).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headway.execution.loopback import LoopbackCluster

HEADWAY = str(Path(sys.executable).with_name("headway"))


def sweep(steps: int, ensembles: int) -> list[str]:
    """`headway train` of `ensembles` ensembles (widths 16, 24, …; two seeds each) at CPU scale."""
    widths = ",".join(str(16 + 8 * i) for i in range(ensembles))
    return [HEADWAY, "train", "--scale", "cpu", "--hops", "1", "--layers", "1", "--d-model", widths, "--heads", "2",
            "--seed", "0,1", "--steps", str(steps), "--eval-every", str(max(steps // 4, 1)), "--no-progress"]


def timed(command: list[str], env: dict[str, str]) -> float:
    """Wall seconds of one command, run in a fresh output folder."""
    out = tempfile.mkdtemp(prefix="bench-cluster-")
    try:
        started = time.perf_counter()
        subprocess.run([*command, "--out", out], check=True, capture_output=True, env=env)
        return time.perf_counter() - started
    finally:
        shutil.rmtree(out, ignore_errors=True)


def measure(command: list[str], ways: dict[str, tuple[LoopbackCluster | None, list[str]]],
            rounds: int) -> dict[str, list[float]]:
    """Wall times of `command` per way (a cluster, or None for local, and the extra options), the
    ways alternating within each round."""
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(rounds):
        for name, (cluster, extra) in ways.items():
            if cluster is None:
                times[name].append(timed([*command, *extra], dict(os.environ)))
            else:
                ray = ["--executor", "ray", "--ray-address", cluster.address, *extra]
                times[name].append(timed([*command, *ray], {**os.environ, **cluster.env}))
    return times


def gpu_count(device: str) -> int:
    import torch

    return torch.cuda.device_count() if device == "cuda" else 0


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} s ({min(values):.1f}–{max(values):.1f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=400, help="Steps of each ensemble in the throughput sweep.")
    parser.add_argument("--ensembles", type=int, default=6)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    args = parser.parse_args()
    cpus = os.cpu_count() or 2
    device = ["--device", args.device]
    print(f"# {platform.machine()}, {cpus} CPUs, Python {platform.python_version()}, device {args.device}, "
          f"{args.ensembles} ensembles of 2 runs, {args.rounds} rounds\n")
    started = time.perf_counter()
    with LoopbackCluster(nodes=1, cpus=cpus, gpus=gpu_count(args.device)) as one:
        start_one = time.perf_counter() - started
        started = time.perf_counter()
        with LoopbackCluster(nodes=2, cpus=max(cpus // 2, 1)) as two:
            start_two = time.perf_counter() - started
            if args.device == "cuda":
                ways = {"local": (None, device), "ray, 1 GPU per task": (one, [*device, "--ray-gpus", "1"]),
                        "ray, ¼ GPU per task": (one, [*device, "--ray-gpus", "0.25"])}
            else:
                ways = {"local": (None, device), "ray, 1 node": (one, device), "ray, 2 nodes": (two, device)}
            overhead = measure(sweep(2, args.ensembles), ways, args.rounds)
            work = measure(sweep(args.steps, args.ensembles), ways, args.rounds)
    print(f"Cluster start-up (not in the times below): 1 node {start_one:.1f} s, 2 nodes {start_two:.1f} s.\n")
    local_overhead = statistics.median(overhead["local"])
    print("| way | 2-step sweep wall time | per ensemble | extra per ensemble vs local |")
    print("|---|---|---|---|")
    for name, values in overhead.items():
        per, extra = (statistics.median(values) - base for base in (0, local_overhead))
        print(f"| {name} | {cell(values)} | {per / args.ensembles:.2f} s | {extra / args.ensembles:+.2f} s |")
    local_work = statistics.median(work["local"])
    print(f"\n| way | {args.steps}-step sweep wall time | ensembles/min | ratio to local |")
    print("|---|---|---|---|")
    for name, values in work.items():
        median = statistics.median(values)
        print(f"| {name} | {cell(values)} | {60 * args.ensembles / median:.1f} | {local_work / median:.2f}× |")


if __name__ == "__main__":
    main()
