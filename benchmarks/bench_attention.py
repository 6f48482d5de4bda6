"""Which attention kernel trains faster, shape by shape: torch's fused `scaled_dot_product_attention`
('sdpa') against two batched matrix products and a softmax ('matmul'), inside headway's real training
step (`EnsembleTrainer.train_step`, E models at once), everything else equal.

The kernels alternate round by round; each round is two warm-up steps and --steps timed steps of each.
Prints one markdown row per shape: steps/s of each kernel (median and min–max over rounds), the
median of the per-round ratios (sdpa time / matmul time: above 1 means matmul is faster) and the
kernel `--attention-kernel auto` picks for training steps of that shape on this device. These rows are what
`headway.compute.auto_attention_kernel` is set from (docs/performance.md, "Attention kernel").

Run: python benchmarks/bench_attention.py [--device cpu|cuda] [--shapes NAME,...] [--ensemble-size 8]
     [--rounds 3] [--steps 5] [--threads N]
"""

from __future__ import annotations

import argparse
import platform
import statistics

import torch

from common import HeadwayWay, make_trainer, runs_for, sync, timed
from headway.compute import ATTENTION_KERNELS, ComputeSettings
from headway.tasks.registry import scale_settings

RETRIEVAL = {"task": "retrieval", "loss": "mse", "chains": 4}
SHAPES = {
    # the training benchmark's two shapes (common.py) ...
    "retrieval-cpu": {**RETRIEVAL, "hops": 2, "vocab": 16, "layers": 2, "heads": 4, "d_model": 64, "batch_size": 128},
    "retrieval-paper": {**RETRIEVAL, "hops": 4, "vocab": 32, "layers": 2, "heads": 8, "d_model": 128,
                        "batch_size": 512},
    "retrieval-13": {**RETRIEVAL, "hops": 3, "vocab": 16, "layers": 2, "heads": 4, "d_model": 64, "batch_size": 128},
    # ... the sorting study's model at its CPU scale (1 layer, 2 heads of width 48, 20 positions, last 10 read)
    "sorting-cpu": {**scale_settings("cpu", "sorting"), "batch_size": 128},
    # ... and longer sequences, to find where the fused kernel overtakes
    "retrieval-33": {**RETRIEVAL, "hops": 8, "vocab": 40, "layers": 2, "heads": 8, "d_model": 128,
                     "batch_size": 256},
    "retrieval-65": {**RETRIEVAL, "hops": 8, "chains": 8, "vocab": 80, "layers": 2, "heads": 8, "d_model": 128,
                     "batch_size": 128},
    "retrieval-129": {**RETRIEVAL, "hops": 16, "chains": 8, "vocab": 144, "layers": 2, "heads": 8, "d_model": 128,
                      "batch_size": 64},
}


def bench_shape(name: str, args: argparse.Namespace, device: torch.device) -> str:
    """The markdown row of one shape."""
    runs = runs_for(SHAPES[name], args.ensemble_size)
    ways = {kernel: HeadwayWay(make_trainer(runs, device, "auto", "off", attention=kernel))
            for kernel in ATTENTION_KERNELS}
    times: dict[str, list[float]] = {kernel: [] for kernel in ATTENTION_KERNELS}
    for r in range(args.rounds):
        order = ATTENTION_KERNELS if r % 2 == 0 else ATTENTION_KERNELS[::-1]
        for kernel in order:
            times[kernel].append(timed(ways[kernel], args.steps, device))
    rates = {k: [args.steps / t for t in v] for k, v in times.items()}
    ratio = statistics.median(a / b for a, b in zip(times["sdpa"], times["matmul"]))
    task = runs[0].task
    model = runs[0].model
    auto = ComputeSettings().resolved_attention_kernel(device, task.n_ctx)
    cells = " | ".join(f"{statistics.median(v):.2f} ({min(v):.2f}–{max(v):.2f})" for v in rates.values())
    return (f"| {name} | {task.n_ctx} | {model.heads} × {model.head_dim} | {runs[0].train.batch_size} | "
            f"{args.ensemble_size} | {cells} | {ratio:.2f}× | {auto} |")


def main() -> None:
    """Measure every requested shape and print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--shapes", default=",".join(SHAPES), help=f"comma list from {', '.join(SHAPES)}")
    parser.add_argument("--ensemble-size", type=int, default=8, help="models trained together (E)")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; median and min–max reported")
    parser.add_argument("--steps", type=int, default=5, help="timed steps per kernel per round (after 2 warm-up)")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = [s for s in shapes if s not in SHAPES]
    if unknown:
        parser.error(f"unknown shape(s) {', '.join(unknown)}; choose from {', '.join(SHAPES)}")
    if args.ensemble_size < 1 or args.rounds < 1 or args.steps < 1:
        parser.error("--ensemble-size, --rounds and --steps must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or platform.machine()
    print(f"device: {device} ({where}); torch {torch.__version__}; {torch.get_num_threads()} threads; "
          f"precision auto, eager; median (min–max) of {args.rounds} alternating rounds of {args.steps} steps")
    print("| shape | positions | heads × width | batch | E | sdpa steps/s | matmul steps/s | sdpa time / matmul time "
          "| auto picks |")
    print("|---|---|---|---|---|---|---|---|---|", flush=True)
    for name in shapes:
        print(bench_shape(name, args, device), flush=True)
        sync(device)


if __name__ == "__main__":
    main()
