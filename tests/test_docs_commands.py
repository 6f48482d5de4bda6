"""Every command in README.md and docs/*.md works as written, run at a tiny size: training commands for two steps
on tiny models, studies as a dry run, language models replaced by a scripted one; the documented refusals give
the documented line. A command that cannot run here (an install, a cluster, a server) says why, or which test
runs it; a new command in the docs is run by the rules below without an edit here."""

from __future__ import annotations

import contextlib
import io
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from test_llm_report import ScriptedBackend

from headway.cli.main import main

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Tiny models and pools, laid over a documented `headway train` (the last value of an option wins).
TINY = ["--steps", "2", "--eval-every", "1", "--checkpoint-every", "2", "--log-checkpoints", "0", "--d-model", "16",
        "--heads", "2"]
TINY_POOLS = ["--train-size", "256", "--val-size", "32", "--batch-size", "16"]  # not modular's: it takes no sizes
# Commands not run here, and why (an install, a build, a machine of its own).
NOT_HERE = {
    "make test": "runs the whole suite",
    "make demo": "installs the environment, then runs `headway demo --out runs/demo`, which runs here",
    "pip install": "installs from a package index",
    "python -m llama_cpp.server": "starts llama.cpp's server on a GGUF file; tests/test_llm_models.py does",
    "headway llc calibrate runs/sorting": "needs a trained sorting study (runs/sorting); "
                                          "tests/test_llc_calibrate_cli.py runs the command on tiny runs",
}
# Commands another test runs as written.
ELSEWHERE = {
    "lm-eval run": ("test_llm_groups.py", "lm-eval run --model hf --model_args pretrained=MODEL"),
}
# Paths and shell variables of another machine, and a folder no command before it makes.
HERE = {"/shared/$USER/study": "shared/study", "/shared/runs/depth": "shared/depth", "/shared/study": "shared/study",
        "$head": "127.0.0.1", "/tmp/smoke": "smoke", "runs/grid": "runs/depth",
        "--rewrite-report --out DIR": "--rewrite-report --out runs/llm"}


class Parsed(Exception):  # noqa: N818 - a signal, not an error
    """Raised where a command would start its executor: everything up to it (parsing, checks) has run."""


@dataclass(frozen=True)
class Command:
    """A documented command line, where it is, and the refusal the docs show right after it (if any)."""

    page: str
    text: str
    refusal: str | None


def documented() -> list[Command]:
    """Every command line in a shell block of the pages, in page order; usage synopses (`[--opt]`) left out."""
    found = []
    for page in PAGES:
        for language, block in re.findall(r"```(\w*)\n(.*?)```", page.read_text(), re.S):
            if language not in ("", "bash", "sh", "console"):
                continue
            lines = [line.strip().removeprefix("$ ") for line in block.replace("\\\n", " ").splitlines()]
            for index, line in enumerate(lines):
                line = re.sub(r"\s+#.*$", "", line).strip()
                if not re.match(r"(headway|python|lm-eval|make|pip) ", line) or re.search(r"\[-", line):
                    continue
                after = lines[index + 1] if index + 1 < len(lines) else ""
                found.append(Command(page.name, line, after if after.startswith("headway: error:") else None))
    return found


def pattern(refusal: str) -> re.Pattern:
    """The documented refusal with its machine-specific parts (run ids, numbers, absolute paths) left open."""
    open_parts = {r"\b[0-9a-f]{12}\b": "[0-9a-f]{12}", r"\d+(?:\.\d+)?": "[0-9.]+", r"/home/me/": "/.*/"}
    pieces = re.split("(" + "|".join(open_parts) + ")", refusal)
    text = "".join(re.escape(piece) if index % 2 == 0 else next(open_parts[p] for p in open_parts
                                                                  if re.fullmatch(p, piece))
                   for index, piece in enumerate(pieces))
    return re.compile(text + "$")


def tiny(argv: list[str]) -> list[str]:
    """The command at a tiny size: training for two steps on tiny models, a study's dry run, two questions per cell,
    one cheap SGLD setting."""
    if argv[:1] == ["train"]:
        return argv + TINY + ([] if "modular" in argv else TINY_POOLS)
    if argv[:2] == ["llc", "calibrate"]:
        return argv + ["--lr", "1e-6", "--batch-size", "16", "--chains", "1", "--draws", "2", "--burnin", "2",
                       "--no-progress"]
    if argv[:1] == ["demo"]:
        return argv + ["--steps", "2"]
    if argv[:1] == ["study"] and "--dry-run" not in argv:
        return argv + ["--dry-run"]
    if argv[:1] == ["llm-eval"] and "--rewrite-report" not in argv or argv[:2] == ["data", "prompts"]:
        return argv + ["--questions", "2", "--max-hops", "2"]
    return argv


def parsed(argv: list[str]) -> int:
    """`headway ARGV` run up to where it would start its executor (a cluster's address is not joined): 0 when it
    gets there, else its exit status."""
    def stop(values: dict) -> None:
        raise Parsed

    with pytest.MonkeyPatch.context() as patch:
        for module in ("train", "study"):
            patch.setattr(f"headway.cli.{module}.pop_executor", stop)
        try:
            return main(argv) or 1
        except Parsed:
            return 0


@pytest.fixture
def scripted(monkeypatch):
    """Every language model the docs name is answered by a scripted one; memory as on the docs' 16 GB machine."""
    monkeypatch.setattr("headway.llm.run.open_backend", lambda settings: ScriptedBackend())
    monkeypatch.setattr("headway.execution.memory.memory_budget", lambda device, fraction=0.8: int(15.9 * 2**30))


@pytest.mark.usefixtures("scripted", "one_thread")
def test_every_documented_command_works_as_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("a file, for the documented refusal of afile/sub")
    commands, failures, ran = documented(), [], 0
    assert len(commands) > 60
    for command in commands:
        text = command.text.split(" | ")[0]  # a pipe into another tool: headway's part
        for there, here in HERE.items():
            text = text.replace(there, here)
        if any(text.startswith(prefix) for prefix in NOT_HERE):
            continue
        owner = next((ELSEWHERE[prefix] for prefix in ELSEWHERE if text.startswith(prefix)), None)
        if owner is not None:
            assert owner[1] in (ROOT / "tests" / owner[0]).read_text(), (command, owner)
            continue
        argv = shlex.split(text)[1:]
        if "--device" in argv and argv[argv.index("--device") + 1] == "cuda" and torch.cuda.is_available():
            continue  # the refusal shown is of a machine without a GPU; studies with cuda run dry either way
        err = io.StringIO()
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            if "--executor" in argv and "ray" in argv:  # a cluster's address: parsed, not joined
                status = parsed(argv)
            else:
                status = main(argv if command.refusal else tiny(argv))
        ran += 1
        refusal = [line for line in err.getvalue().splitlines() if line.startswith("headway: error:")]
        if command.refusal is not None:
            ok = status == 2 and len(refusal) == 1 and pattern(command.refusal).match(refusal[0])
        else:
            ok = status == 0
        if not ok:
            failures.append(f"{command.page}: {command.text} -> status {status}: {err.getvalue().strip()[-400:]}")
    assert not failures, "\n".join(failures)
    assert ran > 55
