"""Step time of one ensemble of a retrieval study cell under each `--compile` mode, in one run.

A small ensemble's step on a GPU is bound by kernel launches (benchmarks/RESULTS.md, "GPU — one H100"): 8 runs of
a depth cell took 8–16 ms a step where their FLOPs need 2–5 ms. CUDA graphs (`--compile graphs`) replay the
compiled step's kernels without launching each; this measures whether that removes the floor, on the real trainer
step (`EnsembleTrainer.train_step`) of the cell's runs, each mode in turn after its warm-up (compilation, graph
recording) and the warm-up's own seconds beside it, since a study pays them once per ensemble shape.

    python benchmarks/bench_step_latency.py --device cuda --layers 3 --hops 5 --seeds 0..7 [--steps 30]
        [--modes off,graphs,on] [--order shuffled] [--supervision whole-chain] [--mask-unreachable]

Prints a markdown table (ms a step, warm-up seconds, speed against `off` measured in the same run, and against
`headway.runs.cost`'s projection for that mode) and after each mode a line `latency-json: {...}` of all measured so far, for scripts. A mode that fails (e.g. graphs off CUDA) is reported and skipped.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import torch._dynamo

from common import make_trainer, sync
from headway.cli.options import parse_values
from headway.execution.devices import device_name
from headway.runs.config import RunConfig, group_runs
from headway.runs.cost import gpu_step_seconds
from headway.studies.retrieval.plan import study_plan

WARMUP_STEPS = 5  # graphs record over the first compiled calls (Compiled.TRIAL_CALLS = 3), then replay


def cell_runs(args: argparse.Namespace) -> list[RunConfig]:
    """The runs of the `gpu` scale's depth cell that the options name: one ensemble (one shape)."""
    plan = study_plan("gpu").with_overrides(
        layers=(args.layers,), hops=(args.hops,), orders=(args.order,), supervisions=(args.supervision,),
        seeds=tuple(parse_values("seeds", args.seeds, int)), bound_hops=(), conditional_hops=(),
        mask_unreachable=args.mask_unreachable)
    groups = list(group_runs(plan.grids()["depth"]).values())
    return groups[0]


def measure(runs: list[RunConfig], device: torch.device, mode: str, steps: int) -> tuple[float, float]:
    """(seconds of the warm-up steps, seconds per timed step) of `runs` trained under compile `mode`."""
    trainer = make_trainer(runs, device, "auto", mode)
    data, model, optim, state = trainer.setup()
    start = time.perf_counter()
    for step in range(WARMUP_STEPS):
        trainer.train_step(model, data, optim, state, step)
    sync(device)
    warm = time.perf_counter() - start
    start = time.perf_counter()
    for step in range(WARMUP_STEPS, WARMUP_STEPS + steps):
        trainer.train_step(model, data, optim, state, step)
    sync(device)
    return warm, (time.perf_counter() - start) / steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", default="cuda", help="cpu or cuda")
    parser.add_argument("--layers", type=int, default=2, help="layers of the cell")
    parser.add_argument("--hops", type=int, default=3, help="hops D of the cell")
    parser.add_argument("--order", default="shuffled", help="link order: shuffled or chain")
    parser.add_argument("--supervision", default="dense", help="query, dense or whole-chain")
    parser.add_argument("--mask-unreachable", action="store_true", help="mask targets no depth can deliver")
    parser.add_argument("--seeds", default="0..7", help="seeds of the ensemble (its size E)")
    parser.add_argument("--steps", type=int, default=30, help="timed steps per mode")
    parser.add_argument("--modes", default="off,graphs,on", help="compile modes, in the order measured")
    args = parser.parse_args(argv)
    device = torch.device(args.device)
    runs = cell_runs(args)
    name = device_name(device)
    print(f"device {name}, torch {torch.__version__}; cell: {args.layers} layers, D = {args.hops}, {args.order}, "
          f"{args.supervision}{' masked' if args.mask_unreachable else ''}, E = {len(runs)}, "
          f"{runs[0].train.batch_size} a batch, width {runs[0].model.d_model}; {args.steps} timed steps after "
          f"{WARMUP_STEPS} warm-up steps\n", flush=True)
    projected = gpu_step_seconds(runs[0], len(runs))
    print(f"headway.runs.cost projects {1e3 * projected:.2f} ms a step (eager, one H100)\n")
    print("| compile | ms a step | warm-up s | speed vs off | vs its projection (`GPU_STEP_FRACTION`) |\n"
          "|---|---|---|---|---|", flush=True)
    measured: dict[str, dict[str, float]] = {}
    for mode in args.modes.split(","):
        try:
            warm, step = measure(runs, device, mode, args.steps)
        except Exception as err:  # noqa: BLE001 - report the mode and measure the others
            print(f"| {mode} | failed: {type(err).__name__}: {str(err).splitlines()[0][:120]} | | | |", flush=True)
            continue
        finally:
            torch._dynamo.reset()
        measured[mode] = {"step_s": step, "warmup_s": warm}
        ratio = f"{measured['off']['step_s'] / step:.2f}×" if "off" in measured else "—"
        print(f"| {mode} | {1e3 * step:.2f} | {warm:.1f} | {ratio} | "
              f"{step / gpu_step_seconds(runs[0], len(runs), mode):.2f}× |", flush=True)
        # after every mode, so that a probe cut short by its time limit still leaves what it measured
        print("latency-json: " + json.dumps({"device": name, "torch": torch.__version__, "runs": len(runs),
                                             "layers": args.layers, "hops": args.hops,
                                             "projected_step_s": projected, "modes": measured}), flush=True)
    return 0 if measured else 1


if __name__ == "__main__":
    raise SystemExit(main())
