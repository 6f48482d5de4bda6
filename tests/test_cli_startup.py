"""The command line starts fast: `headway --help` loads no command module, and no command's help or option
parsing loads torch (benchmarks/bench_cli.py measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from headway.cli.main import COMMANDS, cli

PROBE = """
import contextlib, io, json, sys
from headway.cli.main import main
seen = {}
for argv in %s:
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        status = main(argv)
    heavy = sorted(name for name in ("torch", "pandas", "numpy", "headway.cli.train") if name in sys.modules)
    seen[" ".join(argv)] = [status, heavy]
print(json.dumps(seen))
"""


def loaded(*argvs: list[str]) -> dict[str, list]:
    """For each command line run in turn in one fresh process: its exit status and the heavy modules loaded so far."""
    done = subprocess.run([sys.executable, "-c", PROBE % repr(list(argvs))], capture_output=True, text=True,
                          timeout=120, check=True)
    return json.loads(done.stdout)


def test_help_and_option_parsing_load_no_torch():
    seen = loaded(["--help"], ["--version"], ["train", "--help"], ["data", "retrieval", "--help"],
                  ["llm-eval", "--help"], ["data", "prompts", "--help"], ["export", "tl", "--help"],
                  ["train", "--no-such-option"], ["reach", "--help"], ["show", "--help"], ["demo", "--help"],
                  ["llc", "calibrate", "--help"])
    assert seen["--help"] == [0, []] and seen["--version"] == [0, []]  # nothing but click and the table
    for argv, (status, heavy) in seen.items():
        assert status == (2 if "no-such" in argv else 0), argv
        assert "torch" not in heavy and "pandas" not in heavy, (argv, heavy)


def test_the_command_table_says_what_each_command_says():
    ctx = click.Context(cli)
    assert cli.list_commands(ctx) == sorted(COMMANDS)
    for name, (_, summary) in COMMANDS.items():
        command = cli.get_command(ctx, name)
        assert command.name == name and summary == command.get_short_help_str(limit=1000), name
    assert cli.get_command(ctx, "nope") is None
