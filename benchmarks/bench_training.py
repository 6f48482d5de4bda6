"""Training throughput: an ensemble of E models in one pass against the same E models trained one
after another, at the paper's shape and a CPU-scale shape, in one run.

Run: python benchmarks/bench_training.py [--device cpu|cuda] [--steps N] [--shapes paper,cpu]
Prints, per shape: steps/s of both ways, their ratio, the training FLOP/s of the ensemble (counted
by torch's FlopCounterMode on one real step) and that as a fraction of this device's float32 matmul
peak, measured in the same run. Both ways run the real trainer step (batch sampling, forward,
backward, divergence checks, optimiser).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time

import torch
from torch.utils.flop_counter import FlopCounterMode

from headway.runs.config import RunConfig
from headway.train.trainer import EnsembleTrainer

SHAPES = {
    # The paper's model (8 heads, width 128, batch 512) on D=4, K=4 retrieval, 2 layers.
    "paper": dict(hops=4, chains=4, vocab=32, layers=2, heads=8, d_model=128, batch_size=512),
    # CPU scale: width 64, batch 128.
    "cpu": dict(hops=2, chains=4, vocab=16, layers=2, heads=4, d_model=64, batch_size=128),
}
ENSEMBLE = 8


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def matmul_peak(device: torch.device, size: int = 2048, repeats: int = 10) -> float:
    """Float32 FLOP/s of a large square matmul: the practical peak of this device."""
    a = torch.randn(size, size, device=device)
    b = torch.randn(size, size, device=device)
    for _ in range(3):
        a @ b
    sync(device)
    start = time.perf_counter()
    for _ in range(repeats):
        a @ b
    sync(device)
    return 2 * size**3 * repeats / (time.perf_counter() - start)


def trainer_for(settings: dict, seeds: list[int], device: torch.device, tmp: str):
    runs = [RunConfig.from_flat({**settings, "seed": s, "train_size": 2**14, "val_size": 256}) for s in seeds]
    trainer = EnsembleTrainer(runs, tmp, device, progress=False)
    return trainer, trainer.setup()


def time_steps(trainer, parts, steps: int, device: torch.device, first_step: int = 0) -> float:
    """Seconds for `steps` real training steps after two warm-up steps."""
    data, model, optim, state = parts
    for step in range(first_step, first_step + 2):
        trainer.train_step(model, data, optim, state, step)
    sync(device)
    start = time.perf_counter()
    for step in range(first_step + 2, first_step + 2 + steps):
        trainer.train_step(model, data, optim, state, step)
    sync(device)
    return time.perf_counter() - start


def step_flops(trainer, parts) -> int:
    data, model, optim, state = parts
    with FlopCounterMode(display=False) as counter:
        trainer.train_step(model, data, optim, state, 0)
    return counter.get_total_flops()


def bench_shape(name: str, device: torch.device, steps: int, rounds: int, peak: float) -> dict:
    """Median over `rounds` alternating rounds of the ensemble and the sequential loop (the machine
    is shared and noisy, so both ways see the same conditions)."""
    settings = SHAPES[name]
    seeds = list(range(ENSEMBLE))
    ensemble = trainer_for(settings, seeds, device, "/tmp/headway-bench")
    singles = [trainer_for(settings, [s], device, "/tmp/headway-bench") for s in seeds]
    flops = step_flops(*ensemble)
    ensemble_times, sequential_times = [], []
    for r in range(rounds):
        first = 1 + r * (steps + 2)
        ensemble_times.append(time_steps(*ensemble, steps, device, first))
        sequential_times.append(sum(time_steps(*single, steps, device, first) for single in singles))
    ensemble_s, sequential_s = statistics.median(ensemble_times), statistics.median(sequential_times)
    return {"shape": name, "ensemble_steps_per_s": steps / ensemble_s,
            "sequential_steps_per_s": steps / sequential_s, "speedup": sequential_s / ensemble_s,
            "flops_per_s": flops * steps / ensemble_s, "fraction_of_peak": flops * steps / ensemble_s / peak}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; the median is reported")
    parser.add_argument("--shapes", default="paper,cpu")
    args = parser.parse_args()
    device = torch.device(args.device)
    peak = matmul_peak(device)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else (
        f"{platform.processor() or platform.machine()}, {torch.get_num_threads()} threads")
    print(f"device: {device} ({where}); torch {torch.__version__}; float32 matmul peak {peak / 1e9:.1f} GFLOP/s; "
          f"median of {args.rounds} rounds of {args.steps} steps")
    print(f"| shape | ensemble of {ENSEMBLE} (steps/s) | {ENSEMBLE} one after another (steps/s) | ratio | "
          "ensemble GFLOP/s | fraction of matmul peak |")
    print("|---|---|---|---|---|---|")
    for name in args.shapes.split(","):
        r = bench_shape(name, device, args.steps, args.rounds, peak)
        print(f"| {name} | {r['ensemble_steps_per_s']:.2f} | {r['sequential_steps_per_s']:.2f} | "
              f"{r['speedup']:.2f}× | {r['flops_per_s'] / 1e9:.1f} | {r['fraction_of_peak']:.0%} |", flush=True)


if __name__ == "__main__":
    main()
