"""Missing values in every input column of every claim (tests/test_verdicts_*.py): each claim's declared
inputs (`checked_claim`'s `reads`), a valid set of its inputs, and that set with NaN — or None, in a column
of objects, strings or booleans — put into one row the claim reads or into every row."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pandas as pd
import pytest

from headway.studies.rules import Rules
from headway.studies.verdict import Finding, judge


@dataclass(frozen=True)
class Claimed:
    """A claim's test function, a builder of valid inputs on which it is testable (its keyword arguments
    but the rules), the row a single missing value goes into, and per column another row where the claim
    reads that column only there (e.g. the accuracy of a control run)."""

    function: Callable[..., Finding | None]
    build: Callable[[], dict[str, Any]]
    row: int = 0
    rows: dict[str, int] = field(default_factory=dict)


def takes_none(column: pd.Series) -> bool:
    """Whether a column holds objects, strings or booleans, where a missing value may also be None."""
    return not pd.api.types.is_numeric_dtype(column) or pd.api.types.is_bool_dtype(column)


def cases(claims: dict[str, Claimed], nullable: bool = False) -> list:
    """pytest params (claim, table, column, rows, value): every column a claim declares it reads (the
    nullable ones when `nullable`, the others otherwise) that its built inputs hold, one row or all, NaN and
    where it fits None."""
    found = []
    for name, claimed in claims.items():
        inputs = claimed.build()
        for table, read in claimed.function.reads.items():
            frame = inputs[table]
            for column in frame.columns:
                declared = read.declared(column)
                if declared is None or (declared in read.nullable) != nullable:
                    continue
                for value in (math.nan, None) if takes_none(frame[column]) else (math.nan,):
                    for rows in ("one row", "every row"):
                        found.append(pytest.param(name, table, column, rows, value,
                                                  id=f"{name}-{table}.{column}-{rows}-{value}"))
    return found


def with_missing(frame: pd.DataFrame, column: str, rows: list[int] | None, value: Any) -> pd.DataFrame:
    """`frame` with `value` (NaN or None) in `column` at the positions `rows` (None: every row)."""
    changed = frame.copy()
    values = changed[column].astype(object) if takes_none(changed[column]) else changed[column].astype(float)
    values.iloc[list(range(len(values))) if rows is None else rows] = value
    changed[column] = values
    return changed


def judged(claimed: Claimed, rules: Rules, table: str | None = None, column: str | None = None,
           rows: str = "one row", value: Any = math.nan) -> tuple[Finding, str]:
    """The claim's finding on its built inputs, with the missing value put in when `table` is given, and the
    verdict's status judged alone."""
    inputs = claimed.build()
    if table is not None:
        at = None if rows == "every row" else [claimed.rows.get(column, claimed.row)]
        inputs[table] = with_missing(inputs[table], column, at, value)
    finding = claimed.function(**inputs, rules=rules)
    return finding, judge([finding], rules)[0].status


def undeclared(claims: dict[str, Claimed]) -> dict[str, list[str]]:
    """Per claim, the declared columns (not optional, not a pattern) its built inputs lack: every one must be
    there, so that each is tested."""
    lacking = {}
    for name, claimed in claims.items():
        inputs = claimed.build()
        gaps = [f"{table}.{column}" for table, read in claimed.function.reads.items() for column in read.columns
                if not column.endswith("*") and column not in read.optional and column not in inputs[table].columns]
        if gaps:
            lacking[name] = gaps
    return lacking


def assert_all_covered(claims: dict[str, Claimed], module: Any, elsewhere: frozenset[str] = frozenset()) -> None:
    """Every column each claim reads is in its built inputs, and every claim the study module registers
    (`CLAIMS`) is here (but those named in `elsewhere`, whose inputs are not tables and have a test of their own)."""
    assert undeclared(claims) == {}
    declared = {claim.test.__name__ for claim in module.CLAIMS}
    assert declared - elsewhere == {claimed.function.__name__ for claimed in claims.values()}


def assert_missing_is_untestable(claimed: Claimed, rules: Rules, table: str, column: str, rows: str, value: Any,
                                 derived: dict[str, str] | None = None) -> None:
    """The claim reaches a finding on its built inputs, and with the missing value it is not testable and
    names the column (or the column it was derived from, e.g. `solved` from the accuracy)."""
    assert judged(claimed, rules)[1] in ("reproduced", "not reproduced")
    finding, status = judged(claimed, rules, table, column, rows, value)
    assert status == "not testable" and "a missing input: " in finding.untestable
    names = {column, (derived or {}).get(column, column)}
    assert any(f"{name} in the {table} table is missing" in finding.untestable for name in names)
