"""Where headway's training step spends its time, op by op: torch.profiler over --steps real steps
(`EnsembleTrainer.train_step`) of one benchmark shape, after warm-up.

Prints one markdown row per op (forward and backward ops by their aten names; the top --top by self
time, the rest summed): calls per step, milliseconds per step, share of the step, and for the matrix
products their FLOP/s against the dense float32 matmul peak measured in the same run. This is the
kernel-by-kernel account benchmarks/RESULTS.md gives of what remains of a step. FLOPs per op come from
torch's FlopCounterMode over one unprofiled step (the profiler's own FLOP counting doubled the step's time).

With --by-shape it also lists the batched matrix products by operand shapes, each beside the rate the same
product reaches alone on fresh contiguous operands (`torch.bmm`, timed in the same run), and what the
step's products would take at those rates: the floor on a step made of these products at the machine's own
rate. Recording shapes slows the profiled step (up to 2-3× at the paper shape), so take the in-step times
from a run without --by-shape.

Run: python benchmarks/profile_step.py [--shape paper|cpu] [--ensemble-size 8] [--steps 5]
     [--attention-kernel auto|sdpa|matmul] [--top 20] [--by-shape]
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from common import SHAPES, HeadwayWay, make_trainer, matmul_peak, runs_for
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
    parser.add_argument("--by-shape", action="store_true",
                        help="also list the batched matrix products by shape, beside each shape's rate alone")
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
    with profile(activities=[ProfilerActivity.CPU], record_shapes=args.by_shape) as prof:
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
    if args.by_shape:
        print_products_by_shape(prof, args.steps, peak)


BATCHED_PRODUCTS = {"aten::bmm": 0, "aten::baddbmm": 1}  # op → index of its first factor among its inputs


def print_products_by_shape(prof, steps: int, peak: float) -> None:
    """The batched matrix products grouped by operand shapes: time and rate in the step, and the rate of
    `torch.bmm` on fresh contiguous operands of the same shapes."""
    rows = []
    for event in prof.key_averages(group_by_input_shape=True):
        if event.key not in BATCHED_PRODUCTS:
            continue
        first = BATCHED_PRODUCTS[event.key]
        a, b = event.input_shapes[first], event.input_shapes[first + 1]
        flops = 2 * a[0] * a[1] * a[2] * b[2] * event.count / steps
        seconds = event.self_cpu_time_total / steps / 1e6
        rows.append((seconds, event.key, tuple(a), tuple(b), event.count / steps, flops / seconds))
    rows.sort(reverse=True)
    print("\n| product | [batch, m, k] × [batch, k, n] | calls/step | ms/step | GFLOP/s in the step | alone | of peak alone |")
    print("|---|---|---|---|---|---|---|")
    for seconds, key, a, b, calls, rate in rows:
        alone = product_rate(a, b)
        print(f"| {key} | {list(a)} × {list(b)} | {calls:.0f} | {seconds * 1e3:.2f} | {rate / 1e9:.1f} | "
              f"{alone / 1e9:.1f} | {alone / peak:.0%} |")
    in_step = sum(row[0] for row in rows)
    at_alone = sum(row[0] * row[5] / product_rate(row[2], row[3]) for row in rows)
    print(f"\nBatched products: {in_step * 1e3:.1f} ms per step as run here (shapes recorded); {at_alone * 1e3:.1f} ms "
          "at the rates each shape reaches alone.")


def product_rate(a: tuple[int, ...], b: tuple[int, ...], repeats: int = 3) -> float:
    """FLOP/s of `torch.bmm` on fresh contiguous float32 operands of shapes `a` and `b` (best of `repeats`,
    after one warm-up call)."""
    gen = torch.Generator().manual_seed(0)
    x, y = torch.randn(a, generator=gen), torch.randn(b, generator=gen)
    torch.bmm(x, y)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.bmm(x, y)
        best = min(best, time.perf_counter() - start)
    return 2 * a[0] * a[1] * a[2] * b[2] / best


if __name__ == "__main__":
    main()
