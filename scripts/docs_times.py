"""Write every time estimate in README.md and docs/*.md from the one table of measured times, docs/times.toml.

    python scripts/docs_times.py            # rewrite the marked spans and shell-block comments from the table
    python scripts/docs_times.py --check    # exit 1, naming each place where a doc disagrees with the table

In prose an estimate is a marked span, `<!-- time:KEY -->about 37 min on 2 shared cores<!-- /time -->` (the comments
do not render). In a shell block, the comment after a command the table names (`make demo   # …: about 4.3 min on
2 cores`) holds the row's text. Every row renders as "about N min on MACHINE" (seconds under 100 s, hours from
100 min); a projected row's seconds come from its study's `gpu_projection`, so they follow headway.runs.cost. An
estimate near `make demo`, `make test` or `headway study …` outside both is reported; records of past
measurements ("ran … in 12 min 57 s") state no estimate and are left alone.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import io
import itertools
import re
import shlex
import sys
import tomllib
from pathlib import Path

from headway.files import atomic

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "times.toml"
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SPAN = re.compile(r"<!-- time:([\w-]+) -->(.*?)<!-- /time -->")
# A row's text as rendered, where it sits in a shell comment.
RENDERED = re.compile(r"about [\d.–]+ (?:s|min|h) on [^;#]*?(?:cores|\(projected\))")
NUMBER = r"\d+(?:\.\d+)?(?:\s*[–-]\s*\d+(?:\.\d+)?)?"
UNIT = r"\s*(?:s|secs?|seconds|min|mins|minutes|h|hours?)\b"
TIME = re.compile(NUMBER + UNIT)
# How an estimate reads: hedged (~, about, under, <; "about 73 and 45 minutes" too), a range, or "an hour"; not a
# record to the second ("about 1 min 33 s left").
ESTIMATE = re.compile(rf"(?:(?:~|≈|<|\babout|\baround|\bunder|\btakes?)\s*{NUMBER}(?:\s+(?:and|or|to)\s+{NUMBER})?{UNIT}"
                      rf"|\d+(?:\.\d+)?\s*[–-]\s*\d+(?:\.\d+)?\s*(?:min|minutes|h|hours?)\b|\ban hour\b)"
                      rf"(?!\s*\d+\s*s\b)")
INLINE_CODE = re.compile(r"`[^`]*`")
COMMAND = re.compile(r"make (?:demo|test)\b|headway study \w+|--scale\b")
FENCE = re.compile(r"^\s*```")
# A shell block that shows what a study's dry run prints (its projected times among it).
DRY_RUN = re.compile(r"\$ headway study .*--dry-run$")


def load(path: Path = TABLE) -> dict[str, dict]:
    """The table's rows by key."""
    return tomllib.loads(path.read_text())


def seconds(row: dict) -> tuple[float, float]:
    """The row's seconds as (low, high): measured, or projected by its study's `gpu_projection` at its scale."""
    if "projection" in row:
        plan = importlib.import_module(f"headway.studies.{row['projection']}.plan")
        total = plan.gpu_projection(plan.study_plan(row["scale"]))["total_s"]
        return total, total
    value = row["seconds"]
    return (float(value[0]), float(value[1])) if isinstance(value, list) else (float(value), float(value))


def _number(value: float) -> str:
    """A value to one decimal under 10, whole from 10 (halves round up)."""
    return f"{value:.1f}".removesuffix(".0") if value < 10 else str(int(value + 0.5))


def render(row: dict) -> str:
    """The row as the docs state it: "about N min on MACHINE" (a range as "about L–H min")."""
    low, high = seconds(row)
    unit, scale = ("s", 1) if high < 100 else ("min", 60) if high < 6000 else ("h", 3600)
    amount = _number(low / scale) if low == high else f"{_number(low / scale)}–{_number(high / scale)}"
    return f"about {amount} {unit} on {row['machine']}"


def _command_row(code: str, table: dict[str, dict]) -> str | None:
    """The key of the row whose command the shell line `code` runs (the longest that fits), or None."""
    keys = [key for key, row in table.items() if "command" in row and row["command"] in code]
    return max(keys, key=lambda key: len(table[key]["command"]), default=None)


def _shell_problem(line: str, table: dict[str, dict], texts: dict[str, str]) -> tuple[str | None, str | None]:
    """(the row's key, a problem) of one shell-block line: a time in the comment after a command must be its row's
    text, and nothing else there may read as a time."""
    code, _, comment = line.partition("#")
    key = _command_row(code, table)
    if not TIME.search(comment):
        return key, None
    if key is None:
        return None, f"a time for a command the table lacks: {line.strip()!r}" if COMMAND.search(code) else None
    found = RENDERED.search(comment)
    if found is None or found.group(0) != texts[key]:
        return key, f"{key}: the comment should say {texts[key]!r}: {line.strip()!r}"
    if TIME.search(comment[:found.start()] + comment[found.end():]):
        return key, f"{key}: a second time in the comment: {line.strip()!r}"
    return key, None


def _paragraphs(lines: list[str]) -> list[tuple[int, str]]:
    """(first line number, text) of each prose paragraph, each table row its own, shell blocks left out."""
    found, current, start, fenced = [], [], 0, False
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
        if line.startswith("|") and not fenced:
            found.append((number, line))
        if fenced or FENCE.match(line) or not line.strip() or line.startswith("|"):
            if current:
                found.append((start, " ".join(current)))
            current = []
            continue
        if not current:
            start = number
        current.append(line)
    if current:
        found.append((start, " ".join(current)))
    return found


def check_page(page: Path, table: dict[str, dict], texts: dict[str, str]) -> tuple[list[str], set[str]]:
    """The problems of one page and the keys it uses."""
    lines, used, problems, fenced = page.read_text().splitlines(), set(), [], False
    name = page.relative_to(ROOT) if page.is_relative_to(ROOT) else page
    for number, line in enumerate(lines, 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if fenced:
            key, problem = _shell_problem(line, table, texts)
            if key is not None and TIME.search(line.partition("#")[2]):
                used.add(key)
            if problem:
                problems.append(f"{name}:{number}: {problem}")
            continue
        for span in SPAN.finditer(INLINE_CODE.sub("", line)):  # a span quoted in code is an example
            key, text = span.groups()
            used.add(key)
            if key not in texts:
                problems.append(f"{name}:{number}: time:{key} is not a row of {TABLE.name}")
            elif text != texts[key]:
                problems.append(f"{name}:{number}: time:{key} says {text!r}, the table {texts[key]!r}")
    for number, text in _paragraphs(lines):
        bare = SPAN.sub("", text)
        estimate = ESTIMATE.search(INLINE_CODE.sub("", bare))  # quoted output states no estimate
        if estimate and COMMAND.search(bare):
            problems.append(f"{name}:{number}: an unmarked estimate ({estimate.group(0)!r}) beside a command: mark it "
                            f"<!-- time:KEY -->…<!-- /time --> with a row of {TABLE.name}, or state it as a record")
    return problems, used


def dry_run(command: str) -> list[str]:
    """The lines `command` (a `headway study … --dry-run`, which writes nothing) prints now."""
    from headway.cli.main import main

    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        main(shlex.split(command)[1:])
    return printed.getvalue().splitlines()


def transcripts(page: Path) -> list[tuple[int, str, list[str]]]:
    """(line number, command, the lines shown after it) of each shell block of `page` that opens with
    `$ headway study … --dry-run` and shows its projection."""
    found, lines = [], page.read_text().splitlines()
    for number, line in enumerate(lines, 1):
        if FENCE.match(line) and number < len(lines) and DRY_RUN.match(lines[number]):
            shown = list(itertools.takewhile(lambda text: not FENCE.match(text), lines[number + 1:]))
            if any("projected" in text for text in shown):  # a refusal shown after a dry run is another test's
                found.append((number + 1, lines[number].removeprefix("$ "), shown))
    return found


def problems(pages: list[Path] = PAGES, table: dict[str, dict] | None = None) -> list[str]:
    """Every place where the pages disagree with the table, and every row no page uses."""
    table = load() if table is None else table
    texts = {key: render(row) for key, row in table.items()}
    found, used = [], set()
    for page in pages:
        page_problems, page_used = check_page(page, table, texts)
        found += page_problems
        used |= page_used
    return found + [f"{TABLE.name}: {key} is stated by no page" for key in sorted(set(table) - used)]


def stale_transcripts(pages: list[Path] = PAGES) -> list[str]:
    """Every shown `--dry-run` of a study whose command prints otherwise now."""
    found = []
    for page in pages:
        for number, command, shown in transcripts(page):
            printed = dry_run(command)
            if shown != printed:
                found.append(f"{page.relative_to(ROOT)}:{number}: `{command}` prints otherwise now: {printed}")
    return found


def rewrite(text: str, table: dict[str, dict], texts: dict[str, str]) -> str:
    """`text` with every marked span and every shell comment's row text as the table renders it."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
        elif fenced and "#" in line:
            code, _, comment = line.partition("#")
            key = _command_row(code, table)
            if key is not None:
                line = f"{code}#{RENDERED.sub(texts[key], comment, count=1)}"
        else:
            line = SPAN.sub(lambda m: f"<!-- time:{m[1]} -->{texts.get(m[1], m[2])}<!-- /time -->", line)
        out.append(line)
    return "\n".join(out)


def main() -> int:
    """Rewrite the pages from the table, or with --check report where they disagree."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="report disagreements and exit 1, changing nothing")
    args = parser.parse_args()
    if args.check:
        found = problems() + stale_transcripts()
        print("\n".join(found) or "every time in the docs agrees with docs/times.toml")
        return 1 if found else 0
    table = load()
    texts = {key: render(row) for key, row in table.items()}
    for page in PAGES:
        text = page.read_text()
        new = rewrite(text, table, texts)
        if new != text:
            with atomic(page) as tmp:  # a reader finds the old page or the new one; a device is refused
                tmp.write_text(new)
            print(f"rewrote {page.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
