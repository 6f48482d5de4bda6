"""Cells: one study per combination of run settings given as lists, `headway study NAME --vocab 48,96 --loss
mse,cross_entropy …`, each in a folder of its own named by its settings, and the tables that put the cells side by
side.

A cell's folder is the variant spec of its settings (`vocab=48+loss=mse`, `headway.studies.variants`), so the
study's own tables stay about one recipe (docs/decisions.md: the vocabulary sweep is one study per vocabulary ×
width × loss, not an axis of the phase diagram), while `cells.csv` holds every cell's per-run table with its
settings in front and `cell_verdicts.csv` every cell's verdicts.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headway.runs import layout
from headway.studies.variants import JOIN

if TYPE_CHECKING:
    import pandas as pd

CELLS, CELL_VERDICTS = "cells.csv", "cell_verdicts.csv"


def setting_cells(lists: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the listed run settings, the first setting slowest ([{}] when none is given). A
    cell's name holds every setting the command gave, swept or not, so that cells of two commands that differ in
    a setting given once never share a folder."""
    return [dict(zip(lists, values, strict=True)) for values in itertools.product(*lists.values())]


def cell_name(cell: Mapping[str, Any]) -> str:
    """The folder of a cell: its settings as a variant spec, `vocab=48+loss=mse`."""
    return JOIN.join(f"{name}={value}" for name, value in cell.items())


def write_cell_tables(out: Path, cells: Sequence[Mapping[str, Any]], results: str) -> list[Path]:
    """`cells.csv` (each finished cell's `results` table, its settings first) and `cell_verdicts.csv` (each
    finished cell's verdicts: status, p, α, power, claim) under `out`; the paths written."""
    import pandas as pd

    tables, verdicts = [], []
    for cell in cells:
        folder = out / cell_name(cell)
        if (folder / results).is_file():
            tables.append(_in_front(pd.read_csv(folder / results), cell))
        if (folder / "summary.json").is_file():
            found = json.loads((folder / "summary.json").read_text(encoding="utf-8")).get("verdicts") or []
            verdicts.append(_in_front(pd.DataFrame(found, columns=["id", "status", "p_value", "alpha", "power",
                                                                     "claim"]), cell))
    written = []
    for name, parts in ((CELLS, tables), (CELL_VERDICTS, verdicts)):
        if parts:
            layout.write_text(out / name, pd.concat(parts, ignore_index=True).to_csv(index=False))
            written.append(out / name)
    return written


def _in_front(frame: pd.DataFrame, cell: Mapping[str, Any]) -> pd.DataFrame:
    """`frame` with the cell's settings as its first columns (replacing columns of the same name)."""
    rest = frame.drop(columns=[name for name in cell if name in frame.columns])
    for position, (name, value) in enumerate(cell.items()):
        rest.insert(position, name, value)
    return rest
