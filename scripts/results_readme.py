"""Render each results folder's README.md from its README.template.md and its own data files, so every number a
README quotes comes from summary.json or a CSV beside it, never from a hand-copied figure.

    python scripts/results_readme.py            # rewrite every results/*/README.md that has a template
    python scripts/results_readme.py --check    # exit 1, naming the folder, where a README differs from its render

A template is Markdown with placeholders `{{ [AGG] PATH [| FORMAT] }}`:
- PATH reads summary.json, or a file of the folder named first (`results.csv:`, `other.json:`): dotted keys
  (`seconds.training_s`), a list index (`verdicts[0]`), or a filter of a list of records (`phase[hops=4,layers=3]`,
  `verdicts[claim^=Heads settle]` for a text that starts so, `[steps!=None]` for a value that is there);
  a field read over several records gives the list of their values;
- AGG (`min`, `max`, `mean`, `sum`, `count`, `first`) reduces a list to one value (without one, a list must
  hold exactly one value);
- FORMAT is a Python format spec (`.3f`, `.0%`, `d`); without one a value prints as `str` does.
`{{ verdicts }}` renders the study's verdicts as a table (claim, status, p, power for null results), then the
claims not run.
tests/test_results_readmes.py renders every template and compares it with the README beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import sys
from pathlib import Path
from typing import Any

import pandas as pd

RESULTS = Path(__file__).resolve().parent.parent / "results"
TEMPLATE = "README.template.md"
PLACEHOLDER = re.compile(r"\{\{\s*(.+?)\s*\}\}")
STEP = re.compile(r"([^.\[\]]+)|\[([^\]]*)\]")
AGGREGATES = {"min": min, "max": max, "sum": sum, "count": len, "first": lambda v: v[0],
              "mean": statistics.fmean}


class TemplateError(ValueError):
    """A placeholder that names nothing in the folder's data, or a value that cannot be formatted so."""


def load(folder: Path, name: str) -> Any:
    """A data file of the folder: JSON as parsed, CSV as a list of records (NaN → None)."""
    path = folder / name
    if not path.is_file():
        raise TemplateError(f"{folder.name}: no {name}")
    if name.endswith(".json"):
        return json.loads(path.read_text())
    frame = pd.read_csv(path)
    return [{k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in row.items()}
            for row in frame.to_dict("records")]


def matches(record: Any, condition: str) -> bool:
    """Whether a record meets every `key=value` (equal as text), `key!=value` (not equal; `!=None` for a value
    that is there) or `key^=start` (its text starts so) of a filter."""
    if not isinstance(record, dict):
        return False
    for part in condition.split(","):
        key, _, wanted = part.partition("=")
        operator = key[-1] if key.endswith(("^", "!")) else "="
        value, wanted = str(record.get(key.rstrip("^!").strip())), wanted.strip()
        met = {"^": value.startswith(wanted), "!": value != wanted, "=": value == wanted}[operator]
        if not met:
            return False
    return True


def resolve(data: Any, path: str, where: str, allow_empty: bool = False) -> Any:
    """The value at `path` in `data` (module docstring); a field over a list maps over its records. A filter
    that matches nothing is an error unless `allow_empty` (a count may be 0)."""
    value = data
    for key, bracket in STEP.findall(path):
        if key:
            if isinstance(value, list):
                value = [record[key] for record in value if isinstance(record, dict) and key in record]
            elif isinstance(value, dict) and key in value:
                value = value[key]
            else:
                raise TemplateError(f"{where}: no {key!r} in {path!r}")
        elif bracket.lstrip("-").isdigit():
            value = value[int(bracket)]
        else:
            value = [record for record in value if matches(record, bracket)]
            if not value and not allow_empty:
                raise TemplateError(f"{where}: nothing matches [{bracket}] in {path!r}")
    return value


def verdict_table(summary: dict) -> str:
    """The verdicts as a Markdown table: claim, status, p-value, and power for a null result only (it decides
    nothing where the claim is reproduced); then each claim not run."""
    def number(value: Any) -> str:
        return "—" if value is None else f"{value:.2g}"

    rows = ["| claim | verdict | p | power (null results) |", "|---|---|---|---|"]
    rows += [f"| {v['claim']} | **{v['status']}** | {number(v.get('p_value'))} | "
             f"{number(None if v['status'] == 'reproduced' else v.get('power'))} |" for v in summary["verdicts"]]
    rows += [f"| {c['claim']} | **not run** | — | — |" for c in summary.get("not_run", [])]
    return "\n".join(rows)


def render_placeholder(folder: Path, text: str, cache: dict[str, Any]) -> str:
    """One placeholder's text in the rendered README."""
    where = f"{folder.name}: {{{{ {text} }}}}"
    expression, _, spec = (part.strip() for part in text.partition("|"))
    if expression == "verdicts":
        return verdict_table(cache.setdefault("summary.json", load(folder, "summary.json")))
    first, _, rest = expression.partition(" ")
    aggregate, path = (first, rest.strip()) if rest and re.fullmatch(r"[a-z]+", first) else ("", expression)
    if aggregate and aggregate not in AGGREGATES:
        raise TemplateError(f"{where}: unknown aggregate {aggregate!r}; choose one of {', '.join(AGGREGATES)}")
    source, _, rest = path.partition(":")
    source, path = (source, rest) if rest and source.endswith((".csv", ".json")) else ("summary.json", path)
    value = resolve(cache.setdefault(source, load(folder, source)), path, where, allow_empty=aggregate == "count")
    if aggregate:
        values = value if isinstance(value, list) else [value]
        if not values and aggregate != "count":
            raise TemplateError(f"{where}: no values to take the {aggregate} of")
        value = AGGREGATES[aggregate](values)
    elif isinstance(value, list):
        if len(value) != 1:
            raise TemplateError(f"{where}: {len(value)} values; pick one or reduce them with an aggregate")
        value = value[0]
    if value is None:
        return "—"  # a missing number (null in JSON, empty in a CSV)
    try:
        return format(value, spec) if spec else str(value)
    except (TypeError, ValueError) as err:
        raise TemplateError(f"{where}: cannot format {value!r} with {spec!r} ({err})") from None


def render(folder: Path) -> str:
    """The README of `folder` rendered from its template."""
    template = (folder / TEMPLATE).read_text()
    cache: dict[str, Any] = {}
    note = "<!-- Generated from README.template.md and this folder's data by scripts/results_readme.py; edit the template. -->\n"
    return note + PLACEHOLDER.sub(lambda m: render_placeholder(folder, m.group(1), cache), template)


def folders(root: Path = RESULTS) -> list[Path]:
    """The results folders that have a README template."""
    return sorted(p.parent for p in root.glob(f"*/{TEMPLATE}"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing; exit 1 on a difference")
    parser.add_argument("--root", type=Path, default=RESULTS, help="the results folder")
    args = parser.parse_args(argv)
    stale = []
    for folder in folders(args.root):
        try:
            text = render(folder)
        except TemplateError as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        if args.check:
            if (folder / "README.md").read_text() != text:
                stale.append(folder.name)
        else:
            (folder / "README.md").write_text(text)
    for name in stale:
        print(f"{name}: README.md differs from its template rendered (run scripts/results_readme.py)", file=sys.stderr)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
