"""GPU piece 1 in one command: the log-depth cells of the retrieval `gpu` scale, sized to the minutes given,
trained, analysed, reported and packed; optionally the training benchmark first.

    python3 scripts/gpu_logdepth.py --out "$OUT" [--cells logdepth|bound] [--minutes 9] [--steps auto] [--bench]
    python3 scripts/gpu_logdepth.py --out /tmp/rehearse --tiny      # the same steps on the CPU, a few minutes

`--cells bound` is a second piece: the `gpu` scale's cells at Theorem 1's exact bound (bidirectional attention,
shuffled links, dense supervision: two layers on D = 4, three on D = 9 at V = 40), which the CPU did not solve;
at 8 seeds they fit 10k steps in 9 minutes. The default cells (`logdepth`): causal attention; chain and shuffled link order × dense and query supervision; 2–3 layers ×
D = 3–5 (12 ensembles: both orders share one); seeds 0–7 by default (`--seeds`). They train in ONE `headway study retrieval` process, ensemble
after ensemble, eager: on an H100 a step of such an ensemble is bound by kernel latency (8–16 ms), four
processes sharing the GPU were measured to gain nothing over one (the GPU serialises their kernels), and
compiling each of the 12 shapes would cost more than it saves at these step counts (benchmarks/RESULTS.md,
"GPU: one H100"). `--steps auto` takes the most steps whose projection (`gpu_projection`: measured step
latencies and FLOP rate, 12 s of analysis per ensemble) fits the minutes left. At 9 minutes that is
2000 steps with eight seeds, or 2500 with four: below the latency floor a larger ensemble costs little
per run, above it (3 layers, E = 16) the FLOPs count.

Whatever happens, the study folder is packed without checkpoints and resume states: the report when the study
finished, else the training curves and analyses done before the time limit. Files in --out: gpu.txt,
[bench_training.md,] retrieval-gpu-CELLS.tgz, CELLS.log and timeline.txt.
"""

from __future__ import annotations

import argparse
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


def run(command: list[str], log: Path, timeout: float, clock: Clock, what: str) -> int:
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
    run(script + ["--ways", "headway,plain,func,func-explicit", "--compile", "off"], log, 110, clock,
        "benchmark, every way eager")
    run(script + ["--ways", "headway,func,func-explicit", "--compile", "on", "--compile-baselines"], log, 150,
        clock, "benchmark, every way compiled")


# Each piece's cells as overrides of the `gpu` scale's plan, and the study options that give them.
CELLS = {
    "logdepth": {"bound_hops": ()},
    "bound": {"attentions": ("bidirectional",), "orders": ("shuffled",), "supervisions": ("dense",),
              "layers": (2,), "hops": (4,), "bound_hops": (9,)},  # the grid's one cell is the D = 4 bound cell
}
OPTIONS = {"attentions": "--attention", "orders": "--order", "supervisions": "--supervision", "layers": "--layers",
           "hops": "--hops", "bound_hops": "--bound-hops"}


def cell_options(seeds: tuple[int, ...], tiny: bool, cells: str = "logdepth") -> list[str]:
    """The piece's cells as `headway study retrieval` options: the `gpu` scale's depth cells of `cells` for
    `seeds`, without its conditional grid (the tiny rehearsal of `logdepth`: D = 3 only)."""
    options = ["--scale", "gpu", "--conditional-hops", "none", "--seed", ",".join(map(str, seeds))]
    for name, values in CELLS[cells].items():
        options += [OPTIONS[name], ",".join(map(str, values)) or "none"]
    return options + (["--hops", "3"] if tiny and cells == "logdepth" else [])


def sized_steps(seconds: float, seeds: tuple[int, ...], cells: str = "logdepth") -> tuple[int, float]:
    """The most steps of STEP_CHOICES whose projected time on one H100 fits `seconds`, and that projection."""
    from headway.studies.retrieval.plan import gpu_projection, study_plan

    plan = study_plan("gpu").with_overrides(conditional_hops=(), seeds=seeds, **CELLS[cells])
    for steps in STEP_CHOICES:
        projected = gpu_projection(plan.with_settings(steps=steps))["total_s"]
        if projected <= seconds:
            return steps, projected
    return STEP_CHOICES[-1], gpu_projection(plan.with_settings(steps=STEP_CHOICES[-1]))["total_s"]


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
    parser.add_argument("--cells", choices=tuple(CELLS), default="logdepth",
                        help="logdepth: the causal depth cells; bound: the cells at Theorem 1's exact bound")
    parser.add_argument("--minutes", type=float, default=9.0, help="wall-clock budget of the whole piece")
    parser.add_argument("--device", default="cuda", help="device of the study (cpu with --tiny)")
    parser.add_argument("--steps", default="auto", help="training steps of every cell, or auto (sized to fit)")
    parser.add_argument("--seeds", default="0..7", help="seeds of every cell (e.g. 0..7 or 0,1)")
    parser.add_argument("--bench", action="store_true", help="run the training benchmark first (about 2 min)")
    parser.add_argument("--work", type=Path, default=None,
                        help="the study folder (checkpoints stay here; default runs/retrieval-gpu-CELLS)")
    parser.add_argument("--tiny", action="store_true", help="rehearse on the CPU at a tiny size")
    args = parser.parse_args(argv)
    seeds = tuple(parse_values("seeds", args.seeds, int))
    work = args.work or ROOT / "runs" / f"retrieval-gpu-{args.cells}"
    if args.tiny:
        args.device, seeds = "cpu", seeds[:2]
    args.out.mkdir(parents=True, exist_ok=True)
    clock = Clock(args.minutes, args.out)
    describe_device(args.out, args.device)
    if args.bench:
        benchmark(args, clock)
    budget = clock.left() - PACK_RESERVE_S
    if args.tiny:
        steps = "30"
    elif args.steps == "auto":
        chosen, projected = sized_steps(budget, seeds, args.cells)
        steps = str(chosen)
        clock.note(f"steps {steps}: projected {projected:.0f} s of {budget:.0f} s")
    else:
        steps = args.steps
    command = [sys.executable, *HEADWAY, "study", "retrieval", *cell_options(seeds, args.tiny, args.cells),
               "--steps", steps, "--device", args.device, "--compile", "off", "--no-progress",
               "--time-limit", f"{max(0.1, budget / 60):.2f}", "--out", str(work)]
    run(command, args.out / f"{args.cells}.log", clock.left() - PACK_RESERVE_S / 2, clock, f"{args.cells} cells")
    if work.is_dir():
        pack(work, args.out / f"retrieval-gpu-{args.cells}.tgz")
        clock.note("packed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
