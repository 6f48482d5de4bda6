"""A study's verdict on each claim, decided the same way for every claim of every study.

Each claim is a test set by the study's code and `Rules` before its tables are judged (a `Finding`): the
null or control it is tested against, the test, its one-sided p-value, and the power the design has to detect
the claim's stated effect. (The tests are not pre-registered: several were written after earlier versions of
a study had seen the same runs; docs/verdicts.md says which.) `judge` then decides every claim of a study
together:

- **reproduced** — the test rejects its null at the family-wise level `rules.alpha`, Holm-corrected over
  the study's tested claims (every claim whose test gave a p-value, including those a lack of power then
  makes not testable: they were tested and could have rejected);
- **not reproduced** — it does not, and the design had at least `rules.power` to detect the stated effect
  (at the Bonferroni level alpha / m, the strictest Holm step, so the power is never overstated);
- **not testable** — the finding says why it cannot be tested (a missing control, a circuit that cannot
  beat its null, too few learned runs), one of its inputs holds a missing value, its p-value is missing or
  no probability, or it has too little power (or none known). Where the power is 0 because no outcome of
  the design gives a p that small, the verdict says the smallest p the design can give. An untestable claim
  never counts as a refutation, and a missing value never passes a comparison.

Each verdict carries a one-line `reason` (what `headway study` prints beside its status); a registered claim
whose experiment the grid did not train has no verdict and is listed as not run (`not_run`).

**A missing input makes a claim not testable.** Every claim is a function of its input tables declared with
`checked_claim`: its statement, its test in words, and for each table the columns it reads (`reads`). The
function sees each table restricted to those columns, so it cannot read one it did not declare, and reading a
column — as a whole (`table.col`, `table["col"]`, a group-by or merge key, `to_numpy`) or value by value
(`itertuples`) — checks it on the rows the function holds at that moment: a claim that keeps its learned runs
first checks the accuracy on every run, then the mode only on the learned ones. A NaN, None or absent column
raises `MissingInput`, which `checked_claim` turns into a not-testable finding naming the table, the column
and how many of how many rows hold the missing value. Where a missing value is part of the data (a run that
never generalised, a pair of layers without a control), the declaration says so and what it means
(`nullable`); a column older tables may lack is declared `optional`; a column computed from others (`solved`
from the accuracy) is `derived` from them, and reading it checks them.

**Each study declares its claims once**, in one registry (`registry` of `StudyClaim`s: a stable short id
such as "depth-law", the checked test function, and from it the statement, the test in words and the
tables it reads). The study's findings (`registered_findings`), its verdicts, the threshold-sensitivity
sweep (`headway.studies.sensitivity`) and the report's callouts all iterate over that registry, so no
claim is listed by hand twice.

The report opens with the verdicts (`verdict_callouts`) and states the rules in a Methods section
(`methods_section`).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import re
import functools
import inspect
import math
import numbers
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.statistics import holm
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.rules import Rules

STATUSES = ("reproduced", "not reproduced", "not testable")
CLAIM_ID = re.compile(r"[a-z][a-z0-9]*(-[a-z0-9]+)*")  # a claim's id: lowercase words joined by hyphens
# Callout colour per status: green when a claim holds, orange when it does not, blue otherwise.
_KIND = {"reproduced": "ok", "not reproduced": "warning"}


@dataclass(frozen=True)
class Verdict:
    """One claim judged by a study: the claim, its status (one of STATUSES), the evidence, the test's
    p-value, the family-wise level it was judged at and the power it had (None where not computed), the
    claim's id in its study's registry ("" for a finding made outside one) and the status's reason in one line."""

    claim: str
    status: str
    evidence: str
    p_value: float | None = None
    alpha: float | None = None
    power: float | None = None
    id: str = ""
    reason: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ConfigError(f"verdict status {self.status!r} is unknown; choose one of {', '.join(STATUSES)}")
        if not self.claim or not self.evidence:
            raise ConfigError("a verdict needs both a claim and its evidence")

    def to_dict(self) -> dict[str, object]:
        """{"claim", "status", "evidence", "p_value", "alpha", "power", "id", "reason"}, as summary.json stores it."""
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Finding:
    """One claim's test, set before its tables are judged, and its outcome before the study-wide correction.

    `test` says in advance what decides the claim: the null or control, the test and the effect it must
    detect. `p_value` is the test's one-sided p (NaN or None when it could not be computed); `power(level)` the
    probability that the test rejects at `level` when the stated effect holds; `evidence` the numbers
    (statistic, intervals, per-cell detail); `untestable` why the claim cannot be tested here ("" when it
    can); `id` the claim's id in its study's registry (set by `StudyClaim.finding`)."""

    claim: str
    test: str
    evidence: str
    p_value: float | None = math.nan
    power: Callable[[float], float | None] = lambda level: math.nan
    untestable: str = ""
    id: str = ""

    @classmethod
    def not_testable(cls, claim: str, test: str, why: str, evidence: str = "") -> Finding:
        """A claim this study cannot test, and why (the reason is not repeated as evidence)."""
        return cls(claim, test, evidence, untestable=why)


def _probability(value: object) -> float:
    """`value` as a probability, NaN when it is missing (None, NaN) or not one (outside [0, 1], not a number)."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real):
        return math.nan
    return float(value) if 0.0 <= value <= 1.0 else math.nan


def untestable_why(finding: Finding) -> str:
    """Why `finding` cannot be judged ("" when it can): its own reason, or a p-value missing or no probability."""
    if finding.untestable:
        return finding.untestable
    if finding.p_value is None:
        return "the test's p-value is missing"
    if math.isnan(_probability(finding.p_value)):
        return ("the test's statistic could not be computed" if is_missing(finding.p_value)
                else f"the test's p-value {finding.p_value!r} is no probability")
    return ""


def judge(findings: Sequence[Finding | None], rules: Rules) -> list[Verdict]:
    """The verdict on every finding (None entries dropped), Holm-corrected over the tested ones (those with a
    p-value) at `rules.alpha`; a null result is a refutation only with power ≥ `rules.power` (see the module
    docstring). A finding whose p-value is missing (None or NaN) or no probability is not testable and outside
    the family; a power that is missing or no probability is unknown, so a null result refutes nothing."""
    given = [f for f in findings if f is not None]
    tested = [f for f in given if not untestable_why(f)]
    rejected = dict(zip(map(id, tested), holm([float(f.p_value) for f in tested], rules.alpha)))
    level = rules.alpha / max(1, len(tested))
    family = f"Holm's correction over the {len(tested)} tested claim{'' if len(tested) == 1 else 's'}"
    verdicts = []
    for finding in given:
        rule = f"Test: {finding.test}."
        why = untestable_why(finding)
        if why:
            verdicts.append(Verdict(finding.claim, "not testable",
                                    f"{rule} Not testable: {why}." + (f" {finding.evidence}" if finding.evidence else ""),
                                    id=finding.id, reason=why))
            continue
        power = _probability(finding.power(level))
        judged = f"p = {finding.p_value:.3g}, judged with {family} at family-wise α = {rules.alpha:g}"
        if rejected[id(finding)]:
            status, tail = "reproduced", f"{judged}: rejected."
            reason = f"p = {finding.p_value:.3g} rejects its null at α = {rules.alpha:g} ({family})"
        elif power >= rules.power:
            status, tail = "not reproduced", f"{judged}: not rejected, with power {power:.2f} ≥ {rules.power:g}."
            reason = f"p = {finding.p_value:.3g} not rejected, with power {power:.2f} ≥ {rules.power:g}"
        else:
            status = "not testable"
            shown = "unknown" if math.isnan(power) else f"{power:.2f}"
            floor = smallest_p_text(finding.power, level, len(tested), rules.alpha) if power == 0 else ""
            tail = (f"{judged}: not rejected, but the design's power {shown} is below {rules.power:g}"
                    + (f" ({floor})" if floor else "") + ", so the null result refutes nothing.")
            reason = (f"p = {finding.p_value:.3g} not rejected, and power {shown} < {rules.power:g}: "
                      + (floor or "the null result refutes nothing"))
        verdicts.append(Verdict(finding.claim, status, f"{rule} {finding.evidence} {tail}", float(finding.p_value),
                                rules.alpha, None if math.isnan(power) else power, finding.id, reason))
    return verdicts


def smallest_p(power: Callable[[float], float | None], level: float) -> float:
    """The smallest p-value a design can give, for a test whose power is 0 at `level`: the least level in
    (`level`, 1] at which its power is positive (an exact test's power is a step function of the level, rising
    from 0 at the smallest attainable p), found by bisection; NaN when the power is 0 (or unknown) even at 1."""
    if not _probability(power(1.0)) > 0:
        return math.nan
    low, high = level, 1.0
    for _ in range(64):
        middle = math.sqrt(low * high) if low > 0 else high / 2
        low, high = (low, middle) if _probability(power(middle)) > 0 else (middle, high)
    return float(f"{high:.12g}")  # the bisection ends a rounding error above the attainable p


def smallest_p_text(power: Callable[[float], float | None], level: float, tested: int, alpha: float) -> str:
    """Why a design has power 0 at `level` (α / `tested`, the strictest Holm level), in words: the smallest p it
    can give, against α itself where no outcome could ever reject."""
    floor = smallest_p(power, level)
    if math.isnan(floor):
        return "no outcome of this design can reject its null at any level"
    if floor > alpha:
        return f"the smallest p this design can give is {floor:.3g} > α = {alpha:g}, so no outcome could reject"
    return (f"the smallest p this design can give is {floor:.3g} > α/{tested} = {level:.3g}, the strictest Holm "
            "level, at which the power is computed")


def intersection_union(p_values: Sequence[float]) -> float:
    """The p-value of a claim that needs every one of several tests to reject (intersection–union): the
    largest, NaN when one is missing (a missing test never passes; Python's max would skip a NaN it meets
    second)."""
    values = [_probability(p) for p in p_values]
    return math.nan if not values or any(math.isnan(p) for p in values) else max(values)


# --- the missing-input rule ------------------------------------------------------------------------

class MissingInput(Exception):
    """A claim read a missing value from one of its inputs; `reason` says which (`checked_claim` makes the
    claim not testable for it)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def is_missing(value: object) -> bool:
    """Whether one value is missing: None, NaN, pandas' NA or NaT (a list or string is a value)."""
    return value is None or (pd.api.types.is_scalar(value) and bool(pd.isna(value)))


def present(what: str, value: Any) -> Any:
    """`value`, or MissingInput naming `what` when it is missing: for the inputs of a claim that are no table
    column (a statistic computed beforehand, a field of a traced run)."""
    if is_missing(value):
        raise MissingInput(f"{what} is missing")
    return value


@dataclass(frozen=True)
class Reads:
    """The columns a claim reads from one input table (build with `reads`). `columns`: every column it reads,
    checked for missing values where read unless `nullable`; `nullable`: column → what its missing value
    means (part of the data, never a missing input); `optional`: columns a table may lack (checked where
    present); `derived`: column → the columns it is computed from, checked with it. A name ending in `*`
    stands for every column it begins."""

    columns: tuple[str, ...]
    nullable: Mapping[str, str] = field(default_factory=dict)
    optional: tuple[str, ...] = ()
    derived: Mapping[str, tuple[str, ...]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        named = set(self.nullable) | set(self.optional) | set(self.derived) | {c for s in self.derived.values()
                                                                                for c in s}
        unlisted = sorted(named - set(self.columns))
        if unlisted:
            raise ValueError(f"reads: {', '.join(unlisted)} must be among the columns read")

    def declared(self, column: str) -> str | None:
        """The declared name (itself, or the `*` pattern) that covers `column`, None if none does."""
        return next((c for c in self.columns if c == column or (c.endswith("*") and fnmatch.fnmatchcase(column, c))),
                    None)


def reads(*columns: str, nullable: Mapping[str, str] | None = None, optional: Sequence[str] = (),
          derived: Mapping[str, Sequence[str]] | None = None) -> Reads:
    """What a claim reads from one table (`Reads`): the columns, then those whose missing value is data
    (with its meaning), those the table may lack, and those computed from others."""
    return Reads(tuple(columns), dict(nullable or {}), tuple(optional),
                 {k: tuple(v) for k, v in (derived or {}).items()})


@dataclass(frozen=True)
class _Column:
    """How one column of a checked table is read: the table it came from, whether a missing value is data,
    and the columns it is derived from."""

    table: str
    nullable: bool
    sources: tuple[str, ...] = ()


class CheckedFrame(pd.DataFrame):
    """A claim's view of one input table: only its declared columns, each checked for missing values on the
    rows held when it is read (module docstring). Row selections, merges and copies stay checked; a column
    found whole stays whole in a selection of its rows, so it is checked once."""

    _metadata = ["_read", "_whole"]
    _read: dict[str, _Column] | None = None
    _whole: frozenset[str] = frozenset()

    @property
    def _constructor(self) -> type[CheckedFrame]:
        return CheckedFrame

    def _plain(self) -> pd.DataFrame:
        return pd.DataFrame(self)

    def _check(self, name: str) -> None:
        """MissingInput when column `name` (or a column it is derived from) holds a missing value here."""
        if name in self._whole:
            return
        read = self._read
        if read is None:  # pandas building a result (a merge) before `merge` declares it
            return
        column = read.get(name)
        if column is not None and not column.nullable:
            values = pd.DataFrame.__getitem__(self, name)
            lost = int(values.isna().sum())
            if lost:
                raise MissingInput(f"{name} in {column.table} is missing in {lost} of the {len(values)} row(s) the "
                                   "test reads")
        for source in column.sources if column else ():
            self._check(source)
        object.__setattr__(self, "_whole", self._whole | {name})

    def _check_all(self) -> None:
        for name in self.columns:
            if isinstance(name, str):
                self._check(name)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str) and key in self.columns:
            self._check(key)
        elif isinstance(key, list | tuple) and key and all(isinstance(k, str) for k in key):
            for name in key:
                if name in self.columns:
                    self._check(name)
        return super().__getitem__(key)

    def __getattr__(self, name: str) -> Any:
        value = super().__getattr__(name)  # a column is read through __getitem__, which checks it
        if isinstance(value, pd.Series) and not name.startswith("_") and name in self.columns:
            self._check(name)
        return value

    def merge(self, right: Any, *args: Any, **kwargs: Any) -> CheckedFrame:
        merged = CheckedFrame(super().merge(right, *args, **kwargs))  # checked afresh: a merge may add rows
        merged._read = {**(getattr(right, "_read", None) or {}), **(self._read or {})}
        merged._whole = frozenset()
        return merged

    def itertuples(self, index: bool = True, name: str | None = "Pandas") -> Iterator[Any]:
        """Rows whose values are checked as they are read (`row.col`)."""
        for row in self._plain().itertuples(index, name):
            yield _CheckedRow(row, self)

    def iterrows(self) -> Iterator[tuple[Any, pd.Series]]:
        """Rows as Series, every declared column checked first (a Series row reads them all)."""
        self._check_all()
        return self._plain().iterrows()

    def to_numpy(self, *args: Any, **kwargs: Any) -> Any:
        self._check_all()
        return self._plain().to_numpy(*args, **kwargs)


class _CheckedRow:
    """One row of a CheckedFrame: reading a value checks it (and the values it is derived from)."""

    def __init__(self, row: Any, frame: CheckedFrame) -> None:
        self._row, self._frame = row, frame

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._row, name)
        column = (self._frame._read or {}).get(name)
        if column is not None:
            if not column.nullable and is_missing(value):
                self._frame._check(name)  # raises, counting the rows of the frame that miss it
            for source in column.sources:
                getattr(self, source)
        return value


def checked(frame: pd.DataFrame, table: str, read: Reads) -> CheckedFrame:
    """`frame` as a claim reads it: restricted to the columns `read` declares (those present), each checked
    where read. A table with rows that lacks a declared column that is not optional raises MissingInput.
    `table` names it in a reason ("the final table")."""
    if not isinstance(frame, pd.DataFrame):
        raise MissingInput(f"{table} is missing")
    columns: dict[str, _Column] = {}
    positions = []
    for position, name in enumerate(frame.columns):
        declared = read.declared(name) if isinstance(name, str) else None
        if declared is not None:
            columns[name] = _Column(table, declared in read.nullable, read.derived.get(declared, ()))
            positions.append(position)
    absent = [c for c in read.columns if not c.endswith("*") and c not in columns and c not in read.optional]
    if absent and len(frame):
        raise MissingInput(f"{table} has no {', '.join(absent)} column")
    view = CheckedFrame(pd.DataFrame(frame).take(positions, axis=1))
    view._read = columns
    return view


def check(frame: CheckedFrame, *columns: str) -> None:
    """Read `columns` of a checked table on its rows: MissingInput where one misses a value. For the inputs a
    claim consumed through a statistic computed beforehand (the learned runs' modes behind a gap test)."""
    frame[list(columns)]


def verify(frame: pd.DataFrame, table: str, read: Reads) -> CheckedFrame:
    """`checked`, with every declared column checked on every row at once: for inputs a claim reads through
    code shared beyond it (a traced run's metrics and LLC trace)."""
    view = checked(frame, table, read)
    view._check_all()
    return view


@dataclass(frozen=True)
class Claim:
    """A claim as its test function sees it: the statement and the test in words, from which it builds its
    finding."""

    statement: str
    test: str

    def finding(self, evidence: str, p_value: float, power: Callable[[float], float]) -> Finding:
        """The test's outcome: its evidence, one-sided p-value and power at a level."""
        return Finding(self.statement, self.test, evidence, p_value, power)

    def not_testable(self, why: str, evidence: str = "") -> Finding:
        """The claim cannot be tested here, and why."""
        return Finding.not_testable(self.statement, self.test, why, evidence)


def checked_claim(statement: str | Callable[[Any], str], test: Callable[[Any], str],
                  **tables: Reads) -> Callable[[Callable[..., Finding | None]], Callable[..., Finding | None]]:
    """Declare a claim's test function: its statement (text, or a function of the rules), its test in words (a
    function of the rules) and, per table argument, what it reads (`reads`). The function takes a `rules`
    argument and, by keyword, `claim` (a `Claim`); callers pass the rest. Each table reaches it as a
    `CheckedFrame`, and a missing input it reads makes the claim not testable with the reason. The function
    keeps what it reads (`reads`) and its claim under given rules (`describe(rules)`), which a registry reads."""
    def describe(rules: Any) -> Claim:
        return Claim(statement(rules) if callable(statement) else statement, test(rules))

    def decorate(function: Callable[..., Finding | None]) -> Callable[..., Finding | None]:
        signature = inspect.signature(function)
        unknown = sorted(set(tables) - set(signature.parameters))
        if unknown or "rules" not in signature.parameters or "claim" not in signature.parameters:
            raise ValueError(f"{function.__name__}: a checked claim takes rules, claim and its declared tables "
                             f"(unknown: {', '.join(unknown) or 'none'})")
        outer = signature.replace(parameters=[p for n, p in signature.parameters.items() if n != "claim"])

        @functools.wraps(function)
        def judged(*args: Any, **kwargs: Any) -> Finding | None:
            bound = outer.bind(*args, **kwargs)
            bound.apply_defaults()
            claim = describe(bound.arguments["rules"])
            try:
                given = {name: checked(value, f"the {name} table", tables[name]) if name in tables else value
                         for name, value in bound.arguments.items()}
                return function(**given, claim=claim)
            except MissingInput as missing:
                return claim.not_testable(f"a missing input: {missing.reason}")

        judged.__signature__ = outer  # type: ignore[attr-defined]
        judged.reads = dict(tables)  # type: ignore[attr-defined]
        judged.describe = describe  # type: ignore[attr-defined]
        return judged

    return decorate


# --- a study's registry of claims ------------------------------------------------------------------

@dataclass(frozen=True)
class StudyClaim:
    """One claim of a study's registry: its stable short `id` ("depth-law": lowercase words joined by
    hyphens, what reports, docs and the sensitivity table key it by) and its `test`, a `checked_claim`
    function whose arguments besides `rules` are attributes of the study's tables (`tables`). `held`: the
    threshold-sensitivity sweep keeps this claim's finding at the study's rules and tables, because its
    tables are too costly to derive again at every swept value (a simulated power); it is still judged in
    the study's family there. `null_at_study_values`: the rules whose swept values the claim's null was not
    measured at (it needs the models, analysed at the study's values only), so its sweep over them shows no
    data and the report leaves it out. `needs`: what the grid must train for the claim to be judged, said
    when it was not (its test gives no finding)."""

    id: str
    test: Callable[..., Finding | None]
    held: bool = False
    null_at_study_values: tuple[str, ...] = ()
    needs: str = ""

    def __post_init__(self) -> None:
        if not CLAIM_ID.fullmatch(self.id):
            raise ValueError(f"claim id {self.id!r} must be lowercase words joined by hyphens, e.g. 'depth-law'")
        if not hasattr(self.test, "describe"):
            raise ValueError(f"claim {self.id}: its test must be declared with checked_claim")

    @property
    def tables(self) -> tuple[str, ...]:
        """The attributes of the study's tables the test reads, in its argument order."""
        return tuple(name for name in inspect.signature(self.test).parameters if name != "rules")

    @property
    def reads(self) -> dict[str, Reads]:
        """The columns the test declares it reads, per table."""
        return self.test.reads  # type: ignore[attr-defined]

    def statement(self, rules: Rules) -> str:
        """The claim's statement under `rules` (a template over them for some claims)."""
        return self.test.describe(rules).statement  # type: ignore[attr-defined]

    def finding(self, tables: Any, rules: Rules) -> Finding | None:
        """The claim's finding from the study's `tables` under `rules`, tagged with its id (None: the grid did
        not train the experiment the claim is about)."""
        found = self.test(**{name: getattr(tables, name) for name in self.tables}, rules=rules)
        return None if found is None else dataclasses.replace(found, id=self.id)


def registry(*claims: StudyClaim) -> tuple[StudyClaim, ...]:
    """A study's claims in report order, each id once."""
    ids = [claim.id for claim in claims]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ValueError(f"claim id(s) {', '.join(repeated)} registered more than once")
    return claims


def registered_findings(claims: Sequence[StudyClaim], tables: Any, rules: Rules) -> list[Finding]:
    """The finding of every registered claim, in registry order; a claim whose experiment was not trained
    (None) is left out."""
    found = (claim.finding(tables, rules) for claim in claims)
    return [finding for finding in found if finding is not None]


def not_run(claims: Sequence[StudyClaim], verdicts: Sequence[Verdict], rules: Rules) -> list[dict[str, str]]:
    """The registered claims without a verdict (the grid did not train their experiment), in registry order:
    {"id", "claim", "reason"}, as summary.json stores them under "not_run"."""
    judged = {verdict.id for verdict in verdicts}
    return [{"id": claim.id, "claim": claim.statement(rules),
             "reason": f"not run: {claim.needs or 'the grid did not train the experiment it is about'}"}
            for claim in claims if claim.id not in judged]


def decision_rule(rules: Rules, tested: str = "claims") -> str:
    """How every verdict is decided, in words for a report's introduction to its verdicts; `tested` names what
    the family holds ("claims", "cells", "conditions")."""
    return (f"Reproduced: the test rejects its null at the family-wise level α = {rules.alpha:g}, with Holm's "
            f"correction over the tested {tested} (every one whose test gave a p-value, including those then found "
            f"not testable for lack of power: they were tested and could have rejected). Not reproduced: it does "
            f"not, and the design had power ≥ {rules.power:g} to detect the stated effect at the strictest Holm "
            "level. Not testable: too little power (where no outcome of the design could reach that level, the "
            "smallest p it can give is stated), a missing control or input, or too few usable runs. Power is "
            "shown only where it decides, for a null result; a rejection needs none. Each test was set in the "
            "study's code and rules before these tables were judged, not pre-registered before training.")


def verdict_frame(verdicts: Sequence[Verdict]) -> pd.DataFrame:
    """The verdicts as a report's table: id, claim, status, p, α, and power only where it decides (a claim not
    reproduced or not testable; None for a reproduced one)."""
    return pd.DataFrame([{"id": v.id, "claim": v.claim, "status": v.status, "p": v.p_value, "α": v.alpha,
                          "power (null results)": None if v.status == "reproduced" else v.power}
                         for v in verdicts], columns=["id", "claim", "status", "p", "α", "power (null results)"])


def verdict_callouts(report: Report, verdicts: Sequence[Verdict], intro: str,
                     sweeps: Mapping[str, str] | None = None, unrun: Sequence[Mapping[str, str]] = ()) -> Report:
    """Add a "Claims checked" section to `report`: `intro`, then one callout per verdict, naming the claim's
    id and ending with what its threshold sweep shows (`sweeps`: claim id → sentence, where there is one), then
    one per claim not run (`unrun`: `not_run`'s entries)."""
    report.section("Claims checked")
    report.paragraph(intro)
    for verdict in verdicts:
        named = f"**{verdict.claim}** [{verdict.id}]" if verdict.id else f"**{verdict.claim}**"
        swept = (sweeps or {}).get(verdict.id, "")
        report.callout(f"{named} — {verdict.status}. {verdict.evidence}" + (f" {swept}" if swept else ""),
                       _KIND.get(verdict.status, "note"))
    for claim in unrun:
        report.callout(f"**{claim['claim']}** [{claim['id']}] — {claim['reason']}.", "note")
    return report


def methods_section(report: Report, rules: Rules) -> Report:
    """Add a "Methods: the rules" section: every rule of the study with its value, when it is read, why,
    and the values its sensitivity sweep tries."""
    import pandas as pd

    report.section("Methods: the rules")
    report.paragraph("Every threshold, level and minimum effect the verdicts use "
                     f"(`{type(rules).__module__}.{type(rules).__name__}`), set before these tables were judged. "
                     "A claim is reproduced when its test rejects its null at the family-wise level α (Holm's "
                     "correction over the study's tested claims: every claim whose test gave a p-value), not "
                     "reproduced when it does not and the design had the stated power, and not testable otherwise.")
    report.table(pd.DataFrame(rules.rows()), "The rules (stage: analysis rules are part of the analysis cache's "
                 "stamp; summary rules are read when judging the tables).", float_format="{:g}")
    return report
