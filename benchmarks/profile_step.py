"""Where headway's training step spends its time, op by op: torch.profiler over --steps real steps
(`EnsembleTrainer.train_step`) of one benchmark shape, after warm-up.

Prints one markdown row per op (forward and backward ops by their aten names; the top --top by self
time, the rest summed): calls per step, milliseconds per step, share of the step, and for the matrix
products their FLOP/s against the dense float32 matmul peak measured in the same run. This is the
kernel-by-kernel account benchmarks/RESULTS.md gives of what remains of a step. FLOPs per op come from
torch's FlopCounterMode over one unprofiled step (the profiler's own FLOP counting doubled the step's time).

Run: python benchmarks/profile_step.py [--shape paper|cpu] [--ensemble-size 8] [--steps 5]
     [--attention-kernel auto|sdpa|matmul] [--top 20]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from bench_training import SHAPES, HeadwayWay, make_trainer, matmul_peak, runs_for
from headway.compute import ATTENTION_CHOICES


def main() -> None:
    """Profile the requested shape and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), default="paper")
    parser.add_argument("--ensemble-size", type=int, default=8)
    parser.add_argument("--steps", type=int, default=5, help="profiled steps (after 3 warm-up steps)")
    parser.add_argument("--attention-kernel", choices=ATTENTION_CHOICES, default="auto")
    parser.add_argument("--top", type=int, default=20, help="ops listed one by one; the rest are summed")
    args = parser.parse_args()
    if args.ensemble_size < 1 or args.steps < 1 or args.top < 1:
        parser.error("--ensemble-size, --steps and --top must be at least 1")
    device = torch.device("cpu")
    peak = matmul_peak(device)
    way = HeadwayWay(make_trainer(runs_for(SHAPES[args.shape], args.ensemble_size), device, "fp32", "off",
                                  args.attention_kernel))
    for _ in range(2):
        way.advance()
    with FlopCounterMode(display=False) as counter:  # the profiler's own FLOP counting doubles the step's time
        way.advance()
    flops_by_op = {f"aten::{op.__name__.split('.')[0]}": n for op, n in counter.get_flop_counts()["Global"].items()}
    start = time.perf_counter()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(args.steps):
            way.advance()
    wall = (time.perf_counter() - start) / args.steps
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events) / args.steps / 1e6  # seconds of self time per step
    print(f"shape {args.shape}, E = {args.ensemble_size}, attention kernel {way.model.attention_kernel}, "
          f"{torch.get_num_threads()} threads; {wall * 1e3:.1f} ms per step (profiled; {total * 1e3:.1f} ms of op "
          f"self time); fp32 matmul peak {peak / 1e9:.1f} GFLOP/s")
    print("| op | calls/step | ms/step | share | GFLOP/s | of peak |")
    print("|---|---|---|---|---|---|")
    for event in events[:args.top]:
        seconds = event.self_cpu_time_total / args.steps / 1e6
        rate = flops_by_op.get(event.key, 0) / seconds if seconds else 0.0
        flop_cells = f"{rate / 1e9:.1f} | {rate / peak:.0%}" if rate else " | "
        print(f"| {event.key} | {event.count / args.steps:.0f} | {seconds * 1e3:.2f} | {seconds / total:.1%} | "
              f"{flop_cells} |")
    rest = sum(e.self_cpu_time_total for e in events[args.top:]) / args.steps / 1e6
    print(f"| {len(events) - args.top} other ops | | {rest * 1e3:.2f} | {rest / total:.1%} | | |")
    products = [e for e in events if e.key in flops_by_op]
    seconds = sum(e.self_cpu_time_total for e in products) / args.steps / 1e6
    flops = sum(flops_by_op.values())
    print(f"\nMatrix products (every op with counted FLOPs): {seconds * 1e3:.1f} ms of {total * 1e3:.1f} "
          f"({seconds / total:.0%}), {flops / seconds / 1e9:.1f} GFLOP/s = {flops / seconds / peak:.0%} of the peak; "
          f"everything else {(total - seconds) * 1e3:.1f} ms ({(total - seconds) / total:.0%}).")


if __name__ == "__main__":
    main()
