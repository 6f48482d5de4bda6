"""The GPU lease queue's pieces 1-3 in one command: the latency probe, the log-depth cells and Theorem 1's bound
cells of the retrieval `gpu` scale, each sized to its share of the minutes given, trained, analysed, reported and
packed (docs/performance.md, "On a lent GPU").

    python3 scripts/gpu_logdepth.py --out "$OUT" --latency --cells bound --minutes 9.4           # one lease
    python3 scripts/gpu_logdepth.py --out "$OUT" --latency --cells lease,bound --minutes 9.4     # both, short
    python3 scripts/gpu_logdepth.py --out /tmp/rehearse --tiny --latency --cells lease,bound     # on the CPU, ~12 min

`--cells` lists pieces run in order, the time left shared equally among those still to run: `logdepth` (causal;
chain and shuffled order × dense and query supervision; 2-3 layers × D = 3-5; 12 ensembles, more than one lease
holds), `lease` (its slice that fits beside `bound` in one lease: three layers, D = 4 and 5, shuffled, query, dense
and whole-chain supervision, masked) and `bound` (bidirectional, shuffled, dense: two layers on D = 4, three on
D = 9 at V = 40). Seeds 0-7 by default (`--seeds`); `--hops` replaces the pieces' hop counts. Each piece is ONE
`headway study retrieval` process: four processes sharing a GPU were measured to run each 4x slower.

`--latency` first times an 8-run ensemble of the first piece eager, compiled and under CUDA graphs
(benchmarks/bench_step_latency.py, at most 100 s) and trains with the fastest mode whose warm-up the projection
already counts (`--compile` overrides it). `--steps auto` takes the most steps whose projection (`gpu_projection`:
measured step latencies and FLOP rate, each ensemble's set-up and analysis as timed in the first H200 lease, the
steps scaled by the probe's eager step over the projection's) fits 85% of the piece's share less the 40 s kept
for the study's verdicts and report.

Whatever happens, each study folder is packed without checkpoints and resume states: the report when the study
finished, else the training curves and analyses done before its time limit. Files in --out: gpu.txt,
[latency.md, bench_training.md,] retrieval-gpu-logdepth.tgz and logdepth.log, retrieval-gpu-bound.tgz and
bound.log, timeline.txt.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

HEADWAY = ["-c", "import sys; from headway.cli.main import main; sys.exit(main(sys.argv[1:]))"]
STEP_CHOICES = (10_000, 8000, 6000, 5000, 4000, 3000, 2500, 2000, 1500, 1000, 500)
PACK_RESERVE_S = 30  # kept back from the study for packing and the copy back
# The study's own time limit comes this much before its piece's share ends: training and analysis stop there, and
# the verdicts, report and tables the study writes once every ensemble is analysed have the rest (the first H200
# lease's bound piece was killed while writing them, its analysis done)
VERDICT_RESERVE_S = 40
SIZING_MARGIN = 0.85  # a piece sizes its steps to this share of its time: the analysis rate is inferred
SKIP = {"checkpoints", "resume", ".lock"}  # never packed


class Clock:
    """Seconds left of the piece, and a timeline of what ran when (also written to timeline.txt)."""

    def __init__(self, minutes: float, out: Path) -> None:
        self.start, self.end, self.out = time.time(), time.time() + 60 * minutes, out

    def left(self) -> float:
        return self.end - time.time()

    def note(self, text: str) -> None:
        line = f"{time.time() - self.start:7.1f} s  {text}"
        print(line, flush=True)
        with open(self.out / "timeline.txt", "a") as handle:
            handle.write(line + "\n")


def environment() -> dict[str, str]:
    """The environment of every child: headway from this checkout's src/, unbuffered output."""
    path = os.environ.get("PYTHONPATH", "")
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + (os.pathsep + path if path else ""),
            "PYTHONUNBUFFERED": "1"}


def run_logged(command: list[str], log: Path, timeout: float, clock: Clock, what: str) -> int:
    """Run `command` from the checkout's root with its output appended to `log`; killed after `timeout` s."""
    if timeout < 5:
        clock.note(f"skipped {what}: {timeout:.0f} s left for it")
        return -1
    clock.note(f"start {what} (at most {timeout:.0f} s)")
    with open(log, "a") as handle:
        try:
            code = subprocess.run(command, cwd=ROOT, env=environment(), stdout=handle, stderr=subprocess.STDOUT,
                                  timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            code = -9
    clock.note(f"end {what}: exit {code}")
    return code


def describe_device(out: Path, device: str) -> None:
    """gpu.txt: nvidia-smi's name, memory, driver and clocks, and torch's view of the device."""
    lines = []
    if shutil.which("nvidia-smi"):
        lines.append(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                                     "--format=csv"], capture_output=True, text=True).stdout)
    probe = ("import torch, platform; print('torch', torch.__version__, 'python', platform.python_version(), "
             "'cuda', torch.version.cuda, torch.cuda.get_device_name() if torch.cuda.is_available() else 'no cuda')")
    lines.append(subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True).stdout)
    (out / "gpu.txt").write_text("".join(lines) + f"device asked for: {device}\n")


def benchmark(args: argparse.Namespace, clock: Clock) -> None:
    """bench_training.py at the paper shape, E = 64, every way eager, then every way compiled."""
    log = args.out / "bench_training.md"
    if args.tiny:
        base = ["--device", "cpu", "--shapes", "cpu", "--ensemble-sizes", "2", "--rounds", "1", "--steps", "1"]
    else:
        base = ["--device", "cuda", "--shapes", "paper", "--ensemble-sizes", "64", "--rounds", "3", "--steps", "10"]
    script = [sys.executable, "benchmarks/bench_training.py", *base]
    run_logged(script + ["--ways", "headway,plain,func,func-explicit", "--compile", "off"], log, 110, clock,
        "benchmark, every way eager")
    run_logged(script + ["--ways", "headway,func,func-explicit", "--compile", "on", "--compile-baselines"], log, 150,
        clock, "benchmark, every way compiled")


# Each piece's cells as overrides of the `gpu` scale's plan, and the study options that give them. `lease` is the
# slice of the log-depth cells that fits beside the bound cells in one shared 15-minute lease (docs/performance.md,
# "On a lent GPU"): three causal layers on D = 4 and 5 with shuffled links, where the CPU found the stalled
# leaf-to-root orders and whole-chain supervision composing (results/masked-three-layer-cpu), under all three
# supervisions, unreachable targets masked.
CELLS = {
    "logdepth": {"bound_hops": ()},
    "lease": {"layers": (3,), "hops": (4, 5), "orders": ("shuffled",), "supervisions": ("query", "dense", "whole-chain"),
              "mask_unreachable": True, "bound_hops": ()},
    "bound": {"attentions": ("bidirectional",), "orders": ("shuffled",), "supervisions": ("dense",),
              "layers": (2,), "hops": (4,), "bound_hops": (9,)},  # the grid's one cell is the D = 4 bound cell
}
OPTIONS = {"attentions": "--attention", "orders": "--order", "supervisions": "--supervision", "layers": "--layers",
           "hops": "--hops", "bound_hops": "--bound-hops", "mask_unreachable": "--mask-unreachable"}
FOLDERS = {"logdepth": "logdepth", "lease": "logdepth", "bound": "bound"}  # results/retrieval-gpu-<folder>
LATENCY_LIMIT_S = 100  # the latency probe's share: three modes' warm-ups (two compilations) and 30 steps each
EAGER = {"off": (1.0, 0.0)}  # compile mode -> (step time over the projection's, warm-up seconds an ensemble)


def cell_options(seeds: tuple[int, ...], tiny: bool, cells: str = "logdepth") -> list[str]:
    """The piece's cells as `headway study retrieval` options: the `gpu` scale's depth cells of `cells` for
    `seeds`, without its conditional grid (a tiny rehearsal trains D = 3, but for the bound cells)."""
    options = ["--scale", "gpu", "--conditional-hops", "none", "--seed", ",".join(map(str, seeds))]
    for name, values in CELLS[cells].items():
        text = str(values).lower() if isinstance(values, bool) else ",".join(map(str, values)) or "none"
        options += [OPTIONS[name], text]
    return options + (["--hops", "3"] if tiny and cells != "bound" else [])


def sized_steps(seconds: float, seeds: tuple[int, ...], cells: str = "logdepth", step_scale: float = 1.0,
                hops: tuple[int, ...] = ()) -> tuple[int, float]:
    """The most steps of STEP_CHOICES whose projected time on one H100 (`gpu_projection`, its steps times
    `step_scale`) fits `seconds`, and that projection; with `hops` instead of the cells' own when given."""
    from headway.studies.retrieval.plan import gpu_projection, study_plan

    plan = study_plan("gpu").with_overrides(conditional_hops=(), seeds=seeds, **{**CELLS[cells], **(
        {"hops": hops} if hops else {})})
    for steps in STEP_CHOICES:
        projected = gpu_projection(plan.with_settings(steps=steps), step_scale)["total_s"]
        if projected <= seconds:
            return steps, projected
    return STEP_CHOICES[-1], gpu_projection(plan.with_settings(steps=STEP_CHOICES[-1]), step_scale)["total_s"]


def chosen_mode(modes: dict[str, tuple[float, float]]) -> tuple[str, float]:
    """The compile mode to train with and the step scale to size steps by, from the latency probe's `modes` (mode ->
    step time over the projection's, warm-up s): the fastest step whose warm-up fits the per-ensemble overhead the
    projection already counts; sized at the eager step's scale (the device against the projection), since in the
    first lease compiled study steps ran at the eager projection (evaluations and checkpoints between steps), not
    at the probe's bare compiled step."""
    from headway.studies.retrieval.plan import ENSEMBLE_OVERHEAD_S

    affordable = {mode: scale for mode, (scale, warmup) in modes.items() if warmup <= ENSEMBLE_OVERHEAD_S} or {"off": 1.0}
    return min(affordable, key=affordable.__getitem__), max(1.0, modes.get("off", EAGER["off"])[0])


def latency(args: argparse.Namespace, seeds: tuple[int, ...], cells: str, clock: Clock) -> dict[str, tuple[float, float]]:
    """Piece 1: `benchmarks/bench_step_latency.py` on the first ensemble of `cells` (eight seeds), eager, under CUDA
    graphs and compiled, into latency.md; each measured mode as (step time over the projection's, warm-up s)."""
    from headway.studies.retrieval.plan import study_plan

    plan = study_plan("gpu").with_overrides(conditional_hops=(), seeds=seeds[:8], **CELLS[cells])
    run = plan.grids()["depth"][0]
    cell = ["--layers", str(run.model.layers), "--hops", str(run.task.hops), "--order", run.task.order,
            "--supervision", run.task.supervision, "--seeds", ",".join(map(str, seeds[:8]))]
    cell += ["--mask-unreachable"] if run.task.mask_unreachable else []
    sizes = ["--device", "cpu", "--modes", "off,on", "--steps", "2"] if args.tiny else \
        ["--device", args.device, "--modes", "off,graphs,on", "--steps", "30"]
    log = args.out / "latency.md"
    run_logged([sys.executable, "benchmarks/bench_step_latency.py", *cell, *sizes], log, LATENCY_LIMIT_S, clock,
         "latency probe")
    modes = latency_modes(log.read_text() if log.exists() else "")
    clock.note("latency: " + (", ".join(f"{mode} {scale:.2f}x the projection, warm-up {warm:.0f} s"
                                        for mode, (scale, warm) in modes.items()) if modes else "no measurement"))
    return modes or dict(EAGER)


def latency_modes(log: str) -> dict[str, tuple[float, float]]:
    """Each mode the latency probe's last `latency-json:` line measured, as (its step time over the projection's,
    its warm-up seconds); empty when the probe measured nothing."""
    found = [line for line in log.splitlines() if line.startswith("latency-json: ")]
    if not found:
        return {}
    measured = json.loads(found[-1].removeprefix("latency-json: "))
    return {mode: (times["step_s"] / measured["projected_step_s"], times["warmup_s"])
            for mode, times in measured["modes"].items()}


def pack(folder: Path, archive: Path) -> None:
    """`folder` as a .tgz (no checkpoints, resume states or locks), replacing `archive` whole."""
    partial = archive.with_name(archive.name + ".partial")
    with tarfile.open(partial, "w:gz") as tar:
        tar.add(folder, arcname=archive.name.removesuffix(".tgz"),
                filter=lambda info: None if Path(info.name).name in SKIP else info)
    partial.replace(archive)


def main(argv: list[str] | None = None) -> int:
    from headway.cli.options import parse_values

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the results land (the device's $OUT)")
    parser.add_argument("--cells", default="logdepth",
                        help=f"pieces run in order, a comma list of {', '.join(CELLS)} (logdepth: the causal depth "
                             "cells; lease: their slice for a shared lease; bound: Theorem 1's exact bound cells)")
    parser.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of the whole command")
    parser.add_argument("--device", default="cuda", help="device of the study (cpu with --tiny)")
    parser.add_argument("--steps", default="auto", help="training steps of every cell, or auto (sized to fit)")
    parser.add_argument("--seeds", default="0..7", help="seeds of every cell (e.g. 0..7 or 0,1)")
    parser.add_argument("--bench", action="store_true", help="run the training benchmark first (about 2 min)")
    parser.add_argument("--latency", action="store_true",
                        help="piece 1 first: an 8-run ensemble's step eager, under CUDA graphs and compiled "
                             "(at most 100 s); the pieces then train with the fastest mode whose warm-up the "
                             "projection already counts")
    parser.add_argument("--hops", default=None, help="the pieces' hop counts instead of their own (e.g. 4)")
    parser.add_argument("--compile", default="auto", choices=("auto", "off", "on", "graphs"),
                        help="compile mode of the studies (auto: the latency probe's choice, eager without it)")
    parser.add_argument("--work", type=Path, default=None,
                        help="folder of the study folders (checkpoints stay here; default runs/)")
    parser.add_argument("--tiny", action="store_true", help="rehearse on the CPU at a tiny size")
    args = parser.parse_args(argv)
    pieces = args.cells.split(",")
    for cells in pieces:
        if cells not in CELLS:
            parser.error(f"--cells {cells!r} is unknown; choose from {', '.join(CELLS)}")
    folders = [FOLDERS[cells] for cells in pieces]
    if len(set(folders)) < len(folders):  # two pieces would train into, and pack, one study folder
        parser.error(f"--cells {args.cells} names pieces that share a results folder ({', '.join(folders)}); "
                     "run one of them")
    seeds = tuple(parse_values("seeds", args.seeds, int))
    if args.tiny:
        args.device, seeds = "cpu", seeds[:2]
    args.out.mkdir(parents=True, exist_ok=True)
    clock = Clock(args.minutes, args.out)
    describe_device(args.out, args.device)
    if args.bench:
        benchmark(args, clock)
    modes = latency(args, seeds, pieces[0], clock) if args.latency else dict(EAGER)
    mode, step_scale = chosen_mode(modes)
    mode = mode if args.compile == "auto" else args.compile
    for index, cells in enumerate(pieces):
        left = len(pieces) - index  # this piece and those after it share the time left equally
        budget = (clock.left() - PACK_RESERVE_S * left) / left
        folder = FOLDERS[cells]
        if args.tiny:
            steps = "30"
        elif args.steps == "auto":
            hop_counts = tuple(parse_values("hops", args.hops, int)) if args.hops else ()
            chosen, projected = sized_steps(SIZING_MARGIN * (budget - VERDICT_RESERVE_S), seeds, cells, step_scale,
                                            hop_counts)
            steps = str(chosen)
            clock.note(f"{cells}: steps {steps}, compile {mode}: projected {projected:.0f} s of {budget:.0f} s")
        else:
            steps = args.steps
        work = (args.work or ROOT / "runs") / f"retrieval-gpu-{folder}"
        hops = ["--hops", args.hops] if args.hops and not args.tiny else []
        command = [sys.executable, *HEADWAY, "study", "retrieval", *cell_options(seeds, args.tiny, cells), *hops,
                   "--steps", steps, "--device", args.device, "--compile", mode, "--no-progress",
                   "--time-limit", f"{max(0.1, (budget - VERDICT_RESERVE_S) / 60):.2f}", "--out", str(work)]
        run_logged(command, args.out / f"{folder}.log", budget + PACK_RESERVE_S / 2, clock, f"{cells} cells")
        if work.is_dir():
            pack(work, args.out / f"retrieval-gpu-{folder}.tgz")
            clock.note(f"packed retrieval-gpu-{folder}.tgz")
    return 0


if __name__ == "__main__":
    sys.exit(main())
