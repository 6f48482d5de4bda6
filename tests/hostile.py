"""Hostile command lines for every `headway` command, and how one runs: its exit status, its stderr, whether it
wrote anything, whether it hung. Shared by the property-based fuzz in `test_hostile_input.py` and the full sweep:

    python tests/hostile.py [--timeout 60] [--workers 2]

runs every command with each of its options set, one at a time, to each hostile value below (in a forked child,
a fresh folder each), and prints the count of each outcome and every case that was not a clean result.

The work a command starts once its input is accepted (training, a study, asking a language model) is replaced
by raising `WorkStarted`: the cases check what is decided before anything is allocated, and a case that gets
that far counts as accepted (status 0).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import os
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from unittest import mock

import click

from headway.cli.main import cli, main

# Values that no option should accept as they are, and values any option may accept or refuse.
NONSENSE = ("-1", "1e12", "1e30", "-1e30", "inf", "-inf", "nan", "", "x", "3..1", "0..1e12", "1,1", "1e400",
            "0x10")
PLAUSIBLE = ("0", "1", "2", "3", "1.5", "none", "0,1", "1..3", "true", "--")
# Options that take any text (a name; an empty API key means none), and numbers with no natural maximum, which
# need only be finite: for them a large number is plausible, not nonsense.
FREE_TEXT = ("--model", "--api-key")
UNBOUNDED = ("--lr", "--weight-decay", "--eps", "--grad-clip", "--init-scale", "--time-limit")
# Paths an output or input option is given, relative to the case's folder (which holds `afile` and `existing/`).
PATHS = ("", "afile", "afile/sub", "new", "new/deep/x.out", "existing", ".")
PATH_NONSENSE = ("", "afile/sub")
# Values of options whose meaning is not a number: (plausible, nonsense).
SPECIAL = {
    "--device": (("cpu", "auto", "cuda:7"), ("cpu:99", "meta", "cuda:-1")),
    "--base-url": (("http://127.0.0.1:9/v1",), ("http://[::1", "ftp://host/v1", "http://host:port/v1")),
    "--ray-memory": (("4GiB",), ("-1GB", "9" * 400, "1e400")),
    "--formulations": (("F1", "all", "F1,F1"), ("F9", ",")),
    "--llc-weights": (("all", "heads"), ("all,x",)),
    "--mean-gap": (("uniform", "1.5"), ()),
    "--time-limit": (("0.01", "1e300"), ()),
    "--executor": (("local",), ("slurm",)),
    "--scale": (("cpu",), ("huge",)),
    "--run-id": (("feedfacecafe", ""), ()),
}
PATH_OPTIONS = ("--out", "--csv")
# Arguments that keep an accepted case cheap, set before the fuzzed ones (a later option overrides an earlier one).
BASE = {
    "train": ["--out", "runs", "--scale", "cpu", "--device", "cpu", "--no-progress", "--steps", "2"],
    "demo": ["--out", "runs", "--device", "cpu", "--layers", "1", "--hops", "1", "--seed", "0", "--no-compose"],
    "study": ["--out", "study", "--device", "cpu", "--no-progress", "--steps", "2"],
    "data": ["--count", "2"],
    "data prompts": ["--out", "prompts", "--questions", "1", "--max-hops", "1", "--formulations", "F1"],
    "llm-eval": ["--out", "llm", "--backend", "http", "--questions", "1", "--max-hops", "1", "--formulations", "F1",
                 "--no-progress"],
    "reach": ["--hops", "1..3", "--layers", "1..2", "--samples", "10"],
    "export tl": ["--out", "export"],
}
ARGUMENT = {"show": "runs", "export tl": "runs"}  # the positional path, fuzzed like a path option


class WorkStarted(BaseException):
    """Raised where a command would start its work: its input was accepted."""


class Hung(BaseException):
    """Raised when a case runs past its time."""


@dataclass(frozen=True)
class Outcome:
    """How one command line ended."""

    status: int  # the exit status; 0 as well when the work was about to start
    err: str  # what it printed on stderr
    wrote: bool  # whether its folder changed
    seconds: float

    @property
    def kind(self) -> str:
        """clean refusal, accepted, hang, traceback, or bad refusal (not one line, or something written)."""
        if self.status == -1:
            return "hang"
        if "Traceback" in self.err:
            return "traceback"
        lines = self.err.strip().splitlines()
        if self.status == 2:
            one = len(lines) == 1 and lines[0].startswith("headway: error: ")
            return "clean refusal" if one and not self.wrote else "bad refusal"
        return "accepted" if self.status == 0 else f"status {self.status}"


def commands() -> dict[str, click.Command]:
    """Every leaf command by its path ("train", "data retrieval", …)."""
    with contextlib.redirect_stdout(io.StringIO()):
        main(["--version"])  # registers the commands
    found: dict[str, click.Command] = {}

    def walk(command: click.Command, path: list[str]) -> None:
        if isinstance(command, click.Group):
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                walk(command.get_command(ctx, name), [*path, name])
        else:
            found[" ".join(path)] = command

    walk(cli, [])
    return found


def options(command: click.Command) -> list[click.Option]:
    """The visible options of a command (its hidden ones are old spellings, refused by design)."""
    return [p for p in command.params if isinstance(p, click.Option) and not p.hidden and p.name != "help"]


def values_for(option: click.Option) -> tuple[str, ...]:
    """The values a case may give `option`: hostile and plausible ones, its choices, or paths."""
    flag = option.opts[0]
    if flag in PATH_OPTIONS:
        return PATHS
    choices = tuple(option.type.choices) if isinstance(option.type, click.Choice) else ()
    plausible, bad = SPECIAL.get(flag, ((), ()))
    return plausible + bad + choices + ("bogus",) * bool(choices) + NONSENSE + PLAUSIBLE


def nonsense(flag: str, value: str) -> bool:
    """Whether `value` must be refused for `flag` (the plausible ones may go either way)."""
    if flag in PATH_OPTIONS or flag == "ARGUMENT":
        return value in PATH_NONSENSE
    if flag in FREE_TEXT:
        return flag == "--model" and value == ""
    if flag in UNBOUNDED and value in ("1e12", "1e30"):
        return False
    return value in NONSENSE or value == "bogus" or value in SPECIAL.get(flag, ((), ()))[1]


def argv_for(path: str, given: list[tuple[str, str | None]]) -> list[str]:
    """The command line of `path` with `given` (flag, value or None for a flag alone); "ARGUMENT" is the
    positional path of `show` and `export tl`."""
    argument = next((value for flag, value in given if flag == "ARGUMENT"), ARGUMENT.get(path))
    base = BASE.get(path, BASE.get(path.split()[0], []))
    args = [*path.split(), *([argument] if argument is not None else []), *base]
    for flag, value in given:
        if flag != "ARGUMENT":
            args += [flag] if value is None else [flag, value]
    return args


@contextlib.contextmanager
def case_folder() -> Iterator[Path]:
    """A fresh working folder holding a file `afile` and an empty folder `existing`, made current."""
    with tempfile.TemporaryDirectory(prefix="hostile-") as name:
        folder = Path(name)
        (folder / "afile").write_text("not a folder\n")
        (folder / "existing").mkdir()
        before = os.getcwd()
        os.chdir(folder)
        try:
            yield folder
        finally:
            os.chdir(before)


def snapshot(folder: Path) -> dict[str, bytes | None]:
    """Every file (its bytes) and folder (None) under `folder`."""
    return {str(p.relative_to(folder)): (p.read_bytes() if p.is_file() else None) for p in sorted(folder.rglob("*"))}


def _started(*args: object, **kwargs: object) -> None:
    raise WorkStarted


def _hung(signum: int, frame: object) -> None:
    raise Hung


def run_case(argv: list[str], timeout: float) -> Outcome:
    """Run `headway ARGV` in this process in a fresh folder, its work replaced by `WorkStarted`, for at most
    `timeout` seconds (a case still running then is a hang)."""
    with case_folder() as folder, contextlib.ExitStack() as stack:
        for target in ("headway.execution.base.LocalExecutor.run", "headway.studies.base.Study.run",
                       "headway.llm.run.run_llm_eval"):
            stack.enter_context(mock.patch(target, _started))
        before = snapshot(folder)
        err, out = io.StringIO(), io.StringIO()
        previous = signal.signal(signal.SIGALRM, _hung)
        signal.setitimer(signal.ITIMER_REAL, timeout)
        started = time.perf_counter()
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
                status = main(argv)
        except WorkStarted:
            status = 0
        except Hung:
            status = -1
        except BaseException:  # noqa: BLE001 - what `main` let through: printed as Python would, a traceback
            err.write(traceback.format_exc())
            status = 1
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)
        return Outcome(status, err.getvalue(), snapshot(folder) != before, time.perf_counter() - started)


def start_forked(argv: list[str], timeout: float) -> tuple[int, int]:
    """Fork a child that runs `run_case` and writes its outcome (stderr cut to 2000 characters, so that it fits
    the pipe) to a pipe; (its pid, the pipe's reading end)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read)
        try:
            outcome = run_case(argv, timeout)
            os.write(write, json.dumps({**outcome.__dict__, "err": outcome.err[-2000:]}).encode())
        finally:
            os._exit(0)
    os.close(write)
    return pid, read


def finish_forked(pid: int, read: int, killed: bool) -> Outcome:
    """The outcome a child from `start_forked` wrote, or a hang when it had to be killed."""
    with os.fdopen(read, "rb") as pipe:
        data = b"" if killed else pipe.read()
    if killed:
        return Outcome(-1, "", False, 0.0)
    return Outcome(**json.loads(data)) if data else Outcome(-2, "the case's process died", False, 0.0)


def sweep_cases() -> list[tuple[str, str, str | None, bool]]:
    """(command, flag, value, nonsense) for every option of every command and each value it may be given,
    one option set at a time on top of the command's base arguments."""
    cases = []
    for path, command in commands().items():
        if path in ARGUMENT:
            cases += [(path, "ARGUMENT", value, nonsense("ARGUMENT", value)) for value in PATHS]
        for option in options(command):
            if option.is_flag and not option.secondary_opts:
                cases.append((path, option.opts[0], None, False))
                continue
            if option.is_flag:  # --x/--no-x
                cases += [(path, flag, None, False) for flag in (*option.opts, *option.secondary_opts)]
                continue
            cases += [(path, option.opts[0], value, nonsense(option.opts[0], value)) for value in values_for(option)]
    return cases


def sweep(timeout: float, workers: int) -> int:
    """Run every sweep case, `workers` forked children at a time, each killed 10 s past `timeout` if its own
    alarm did not stop it (a hang inside native code), and report; 1 if any case was not clean."""
    commands()  # imports every command before the first fork
    pending = list(reversed(sweep_cases()))
    total, tally, problems = len(pending), collections.Counter(), []
    running: dict[int, tuple[int, float, tuple]] = {}
    started = time.perf_counter()
    while pending or running:
        while pending and len(running) < workers:
            case = pending.pop()
            pid, read = start_forked(argv_for(case[0], [(case[1], case[2])]), timeout)
            running[pid] = (read, time.monotonic() + timeout + 10, case)
        time.sleep(0.02)
        for pid, (read, deadline, case) in list(running.items()):
            done, _ = os.waitpid(pid, os.WNOHANG)
            killed = not done and time.monotonic() > deadline
            if killed:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            if done or killed:
                del running[pid]
                outcome = finish_forked(pid, read, killed)
                kind = "accepted nonsense" if outcome.kind == "accepted" and case[3] else outcome.kind
                tally[kind] += 1
                if kind not in ("clean refusal", "accepted"):
                    problems.append((kind, case, outcome.err.strip()[-300:]))
    for kind, (path, flag, value, _), err in problems:
        print(f"{kind}: headway {' '.join(argv_for(path, [(flag, value)]))}\n    {err}")
    print(f"{total} cases in {time.perf_counter() - started:.0f} s: "
          + ", ".join(f"{kind} {count}" for kind, count in sorted(tally.items())))
    return int(bool(problems))


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds before a case counts as a hang")
    parser.add_argument("--workers", type=int, default=2, help="cases run at once")
    arguments = parser.parse_args()
    sys.exit(sweep(arguments.timeout, arguments.workers))
