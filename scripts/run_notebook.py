"""Run a notebook of docs/notebooks in this process, with its parameters cell overridden, and (with --write) store
each code cell's printed output in it, so the docs show what it prints. Used by tests/test_lens_notebook.py.

    python scripts/run_notebook.py docs/notebooks/retrieval_circuit.ipynb --set RUN_DIR=runs/notebook/<ensemble> --write
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
from pathlib import Path
from typing import Any

from headway.files import atomic


def execute(path: Path, parameters: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """(the namespace after the last cell, each code cell's printed output): the code cells run in order in one
    namespace, `parameters` assigned right after the cell tagged "parameters"."""
    notebook = json.loads(Path(path).read_text())
    namespace: dict[str, Any] = {"__name__": "__notebook__"}
    printed = []
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        buffer = io.StringIO()
        with contextlib.redirect_stdout(buffer):
            exec(compile("".join(cell["source"]), f"{path} cell {index}", "exec"), namespace)  # noqa: S102
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            unknown = sorted(set(parameters) - set(namespace))
            if unknown:
                raise KeyError(f"{unknown} are not parameters of {path}")
            namespace.update(parameters)
        printed.append(buffer.getvalue())
    return namespace, printed


def write_outputs(path: Path, printed: list[str]) -> None:
    """Store `printed` as the stream outputs of the notebook's code cells, in order."""
    notebook = json.loads(Path(path).read_text())
    cells = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    for count, (cell, text) in enumerate(zip(cells, printed, strict=True), start=1):
        cell["execution_count"] = count
        cell["outputs"] = ([{"name": "stdout", "output_type": "stream", "text": text.splitlines(True)}]
                           if text else [])
    with atomic(Path(path)) as tmp:  # a reader finds the old notebook or the new one; a device is refused
        tmp.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n")


def main() -> None:
    """Run the notebook; with --write keep what it printed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("notebook", type=Path)
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a parameter (a string value), repeatable")
    parser.add_argument("--write", action="store_true", help="store each cell's printed output in the notebook")
    args = parser.parse_args()
    parameters = dict(item.split("=", 1) for item in args.set)
    _, printed = execute(args.notebook, parameters)
    print("".join(printed))
    if args.write:
        write_outputs(args.notebook, printed)


if __name__ == "__main__":
    main()
