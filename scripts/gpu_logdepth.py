"""GPU piece 1 in one command: training throughput on the GPU, then the log-depth cells of the retrieval
`gpu` scale, trained, analysed, reported and packed inside a fixed number of minutes.

    python3 scripts/gpu_logdepth.py --out "$OUT" [--minutes 8.5] [--device cuda] [--tiny]

Order, each step given what time is left (the first ones are what the piece must bring back):
 1. the device (nvidia-smi, torch) into gpu.txt;
 2. bench_training.py at the paper shape, E = 64, every way eager, like for like (headway bf16 eager
    against the plain loop, torch.func with SDPA and with explicit attention), then every way compiled;
 3. the depth cells (causal; chain and shuffled order × dense and query supervision; 2–3 layers × D = 3–5)
    in passes of seeds: 0–3, then 4–7 when the first pass's wall time says it fits. A pass trains as
    parallel `headway study retrieval` processes over disjoint (layers, supervision) subsets that share
    one run store and one analysis cache (symbolic links), so the GPU is fed by several processes; then
    one study call over the whole pass gathers the cached analyses and writes the report, and its folder
    (no checkpoints, no resume states) is packed as retrieval-gpu-logdepth.tgz. A pass that runs out of
    time leaves the previous pass's archive in place;
 4. headway with CUDA graphs (`--compile graphs`) when time is left.
Everything lands in --out, five files: gpu.txt, bench_training.md, retrieval-gpu-logdepth.tgz, logdepth.log
(every study process's output) and timeline.txt.
`--tiny` rehearses the same steps on the CPU in about ten minutes (a few steps, one seed per pass);
`--smoke` runs that tiny size on the GPU in about a minute (eager benchmark and one pass only), to find
what breaks on the device's own torch before the full piece spends its minutes.
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
HEADWAY = ["-c", "import sys; from headway.cli.main import main; sys.exit(main(sys.argv[1:]))"]
GROUPS = [(2, "dense"), (2, "query"), (3, "dense"), (3, "query")]  # (layers, supervision) per process
REPORT_RESERVE_S = 75  # kept back from training for the whole-pass report and the packing


class Clock:
    """Seconds left of the piece, and a timeline of what ran when (written to timeline.txt)."""

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


def benchmarks(args: argparse.Namespace, clock: Clock, budget_s: float) -> None:
    """The eager like-for-like benchmark, then the compiled one, within `budget_s`."""
    log = args.out / "bench_training.md"
    if args.tiny or args.smoke:
        base = ["--device", args.device, "--shapes", "cpu", "--ensemble-sizes", "2", "--rounds", "1", "--steps", "1"]
    else:
        base = ["--device", "cuda", "--shapes", "paper", "--ensemble-sizes", "64", "--rounds", "3", "--steps", "10"]
    script = [sys.executable, "benchmarks/bench_training.py", *base]
    until = time.time() + budget_s
    run(script + ["--ways", "headway,plain,func,func-explicit", "--compile", "off"], log,
        min(110, until - time.time()), clock, "benchmark, every way eager")
    if not args.smoke:
        run(script + ["--ways", "headway,func,func-explicit", "--compile", "on", "--compile-baselines"], log,
            until - time.time(), clock, "benchmark, every way compiled")


def study_args(args: argparse.Namespace, seeds: list[int], layers: str, supervision: str, folder: Path,
               minutes: float) -> list[str]:
    """A `headway study retrieval` command over one subset of the depth cells."""
    steps, hops = ("30", "3") if args.tiny or args.smoke else (str(args.steps), "3,4,5")
    return [sys.executable, *HEADWAY, "study", "retrieval", "--scale", "gpu", "--device", args.device,
            "--compile", "off", "--conditional-hops", "none", "--layers", layers, "--supervision", supervision,
            "--hops", hops, "--seed", ",".join(map(str, seeds)), "--steps", steps, "--no-progress",
            "--time-limit", f"{minutes:.2f}", "--out", str(folder)]


def study_folder(base: Path, name: str) -> Path:
    """A study folder under `base` whose runs/ and analysis/ are the shared store (symbolic links)."""
    folder = base / name
    folder.mkdir(parents=True, exist_ok=True)
    for shared in ("runs", "analysis"):
        (base / shared).mkdir(exist_ok=True)
        link = folder / shared
        if not link.exists():
            link.symlink_to(Path("..") / shared)
    return folder


def depth_pass(args: argparse.Namespace, clock: Clock, seeds: list[int], number: int) -> bool:
    """Train and analyse the depth cells for `seeds` (parallel subsets), report the whole pass and pack it."""
    base, log = args.work, args.out / "logdepth.log"
    minutes = (clock.left() - REPORT_RESERVE_S) / 60
    if minutes < 0.5:
        clock.note(f"pass {number} not started: {clock.left():.0f} s left")
        return False
    clock.note(f"pass {number}: seeds {seeds}, {len(GROUPS)} processes, time limit {minutes:.2f} min")
    children = []
    for layers, supervision in GROUPS:
        folder = study_folder(base, f"part-L{layers}-{supervision}")
        handle = open(base / f"part-L{layers}-{supervision}.log", "a")
        command = study_args(args, seeds, str(layers), supervision, folder, minutes)
        children.append((subprocess.Popen(command, cwd=ROOT, env=environment(), stdout=handle,
                                          stderr=subprocess.STDOUT), handle, f"L{layers} {supervision}"))
    codes = []
    for child, handle, name in children:
        try:
            codes.append(child.wait(timeout=max(1.0, clock.left() - 30)))
        except subprocess.TimeoutExpired:
            child.kill()
            codes.append(-9)
        handle.close()
        clock.note(f"pass {number} part {name}: exit {codes[-1]}")
    with open(log, "a") as merged:  # one file back instead of one per process
        for layers, supervision in GROUPS:
            part = base / f"part-L{layers}-{supervision}.log"
            merged.write(f"==== pass {number}, L{layers} {supervision} ====\n{part.read_text()}\n")
            part.unlink()
    if any(codes):
        finished = [f"part-L{layers}-{supervision}" for (layers, supervision), code in zip(GROUPS, codes) if code == 0]
        if finished and number == 1:  # no whole pass to bring back: bring the finished subsets' own reports
            pack_parts(base, finished, args.out / "retrieval-gpu-logdepth-parts.tgz")
            clock.note(f"pass {number} incomplete; packed the finished parts {finished}")
        return False
    whole = study_folder(base, f"pass{number}")
    command = study_args(args, seeds, "2,3", "dense,query", whole, max(0.2, (clock.left() - 20) / 60))
    if run(command, log, clock.left() - 15, clock, f"pass {number} report over every cell") != 0:
        return False
    pack(whole, args.out / "retrieval-gpu-logdepth.tgz")
    clock.note(f"pass {number} packed")
    return True


def pack(folder: Path, archive: Path) -> None:
    """`folder` as a .tgz (links followed; no checkpoints, resume states or locks), replacing `archive` whole."""
    skip = {"checkpoints", "resume", ".lock"}
    partial = archive.with_suffix(".partial")
    with tarfile.open(partial, "w:gz", dereference=True) as tar:
        tar.add(folder, arcname="retrieval-gpu-logdepth",
                filter=lambda info: None if Path(info.name).name in skip else info)
    partial.replace(archive)


def pack_parts(base: Path, parts: list[str], archive: Path) -> None:
    """The reports of the finished subset folders and the shared run store's tables, as one .tgz."""
    skip = {"checkpoints", "resume", ".lock"}
    with tarfile.open(archive, "w:gz") as tar:
        for name in ["runs", "analysis", *parts]:
            tar.add(base / name, arcname=f"retrieval-gpu-logdepth-parts/{name}",
                    filter=lambda info: None if Path(info.name).name in skip or info.issym() else info)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True, help="where the results land (the device's $OUT)")
    parser.add_argument("--minutes", type=float, default=8.5, help="wall-clock budget of the whole piece")
    parser.add_argument("--device", default="cuda", help="device of the studies (cpu with --tiny)")
    parser.add_argument("--steps", type=int, default=3000, help="training steps of every depth cell")
    parser.add_argument("--bench-minutes", type=float, default=2.5, help="budget of the benchmarks")
    parser.add_argument("--work", type=Path, default=ROOT / "runs" / "retrieval-gpu-logdepth",
                        help="the studies' folder (checkpoints stay here)")
    parser.add_argument("--tiny", action="store_true", help="rehearse on the CPU at a tiny size")
    parser.add_argument("--smoke", action="store_true", help="the tiny size on the GPU, one pass, no compiling")
    args = parser.parse_args(argv)
    if args.tiny:
        args.device = "cpu"
    args.out.mkdir(parents=True, exist_ok=True)
    args.work.mkdir(parents=True, exist_ok=True)
    clock = Clock(args.minutes, args.out)
    describe_device(args.out, args.device)
    benchmarks(args, clock, 60 * args.bench_minutes)
    passes = [[0], [1]] if args.tiny else [[0]] if args.smoke else [[0, 1, 2, 3], [4, 5, 6, 7]]
    seeds: list[int] = []
    last_s = 0.0
    for number, new in enumerate(passes, start=1):
        if number > 1 and clock.left() < 1.1 * last_s + REPORT_RESERVE_S:
            clock.note(f"pass {number} not started: {clock.left():.0f} s left, the last pass took {last_s:.0f} s")
            break
        started = time.time()
        seeds = seeds + new
        if not depth_pass(args, clock, seeds, number):
            break
        last_s = time.time() - started
    if args.smoke:
        return 0
    if args.tiny:
        graphs = ["--device", "cpu", "--shapes", "cpu", "--ensemble-sizes", "2", "--compile", "on"]
    else:
        graphs = ["--device", "cuda", "--shapes", "paper", "--ensemble-sizes", "64", "--compile", "graphs"]
    run([sys.executable, "benchmarks/bench_training.py", *graphs, "--ways", "headway", "--rounds", "3",
         "--steps", "10"], args.out / "bench_training.md", clock.left() - 10, clock, "benchmark, headway CUDA graphs")
    return 0


if __name__ == "__main__":
    sys.exit(main())
