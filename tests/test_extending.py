"""docs/extending.md's example runs as written: every Python block of the page in order, in one namespace, prints
what the output block after it shows. The example task registers under a test-only name in a copy of the task
registry, so it is gone once the test ends and no other test sees it."""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

from headway.tasks.registry import TASKS

PAGE = Path(__file__).resolve().parents[1] / "docs" / "extending.md"
NAME = "docs_parity"  # the example task's name while this test runs; "parity" may one day be a real task's


def python_blocks() -> list[tuple[str, str | None]]:
    """(code, the output block right after it or None) of every python block of the page."""
    found = re.findall(r"```python\n(.*?)```\n(?:```\n(.*?)```)?", PAGE.read_text(), re.S)
    return [(code, output or None) for code, output in found]


def test_the_documented_example_runs_as_written(monkeypatch):
    """The task registers and draws a batch, its run config builds, the rules and the claim are judged on a tiny
    table (reproduced, then not testable for a missing value), each printing what the page shows."""
    TASKS.names()  # the built-in tasks first, so the copy below holds them
    monkeypatch.setattr(TASKS, "_classes", dict(TASKS._classes))
    blocks = python_blocks()
    assert len(blocks) >= 5 and sum(output is not None for _, output in blocks) >= 4
    scope: dict = {"__name__": "docs_extending"}
    for code, expected in blocks:
        printed = io.StringIO()
        # dont_inherit: the page's code is compiled without this module's `from __future__ import annotations`,
        # as a reader runs it (its dataclasses would look string annotations up in a module that is not there)
        compiled = compile(code.replace('"parity"', f'"{NAME}"'), str(PAGE), "exec", dont_inherit=True)
        with contextlib.redirect_stdout(printed):
            exec(compiled, scope)  # noqa: S102
        assert printed.getvalue() == (expected or ""), code
    assert TASKS.get(NAME) is scope["ParityConfig"] and "parity" not in TASKS.names()
