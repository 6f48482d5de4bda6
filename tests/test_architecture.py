"""The floors of docs/architecture.md hold in the code: every import of every module under src/headway (at module
level, under TYPE_CHECKING and inside functions) goes to its own room, a lower floor or an exception the page's
table names; and the imports that run back (a function-level import that would close a cycle at module level) are
exactly the ones the page lists. The rules are read from the page, so the page and this test cannot drift apart."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PAGE = ROOT / "docs" / "architecture.md"


@dataclass(frozen=True)
class Import:
    """One import of a headway module: who imports, what, where in the file and whether at module level."""

    importer: str
    imported: str
    line: int
    module_level: bool


@dataclass(frozen=True)
class Room:
    """One row of the page's table of rooms: its floor and the modules above that floor it may import."""

    floor: int
    also: tuple[str, ...]


def module_name(path: Path) -> str:
    """The dotted name of a source file (`headway.tasks` for src/headway/tasks/__init__.py)."""
    parts = path.relative_to(SOURCE).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted((SOURCE / "headway").rglob("*.py"))}


def resolve(importer: str, node: ast.ImportFrom) -> str:
    """The absolute module a `from ... import` names (relative imports resolved against the importer)."""
    if not node.level:
        return node.module or ""
    package = importer if MODULES[importer].name == "__init__.py" else importer.rpartition(".")[0]
    for _ in range(node.level - 1):
        package = package.rpartition(".")[0]
    return f"{package}.{node.module}" if node.module else package


def imports_of(name: str) -> list[Import]:
    """Every import of a headway module in one source file. `from package import module` counts as an import of the
    module; a statement inside a function is not at module level (one under `if TYPE_CHECKING:` or `try:` is)."""
    tree = ast.parse(MODULES[name].read_text())
    nested = {id(node) for function in ast.walk(tree) if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
              for node in ast.walk(function)}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = resolve(name, node)
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]
        else:
            continue
        for target in dict.fromkeys(targets):
            if target == "headway" or target.startswith("headway."):
                found.append(Import(name, target, node.lineno, id(node) not in nested))
    return found


IMPORTS = [found for name in MODULES for found in imports_of(name)]


def room_of(module: str) -> str:
    """The room a module is in: its folder or file under headway (`headway` for the package's own __init__)."""
    return module.split(".")[1] if "." in module else "headway"


def page_table(heading: str) -> list[list[str]]:
    """The cells of the first table under a heading of the page, header and rule left out."""
    text = PAGE.read_text()
    start = text.index(f"\n{heading}\n")
    end = re.compile(r"\n#{1,3} ").search(text, start + 1)
    body = text[start:end.start() if end else len(text)]
    rows = [line for line in body.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def code_names(cell: str) -> list[str]:
    """The `quoted` names of a table cell."""
    return re.findall(r"`([^`]+)`", cell)


def rooms() -> dict[str, Room]:
    """The page's table of rooms: room → floor and the modules of higher floors or its own it may also import."""
    table = {}
    for floor, names, _, also in page_table("## Rooms"):
        for name in code_names(names):
            table[name] = Room(int(floor), tuple(code_names(also)))
    return table


def allowed(found: Import, table: dict[str, Room]) -> bool:
    """Whether an import keeps to the page: its own room, a lower floor, or an exception of the importer's row."""
    own, other = table[room_of(found.importer)], room_of(found.imported)
    if other == room_of(found.importer) or table[other].floor < own.floor:
        return True
    return any(found.imported == f"headway.{also}" or found.imported.startswith(f"headway.{also}.")
               for also in own.also)


def test_every_room_is_on_the_page():
    table = rooms()
    assert {room_of(name) for name in MODULES} == set(table), "a room of src/headway the page lacks, or one gone"
    assert all(also.split(".")[0] in table for row in table.values() for also in row.also)


def test_every_import_keeps_to_its_floor():
    table = rooms()
    broken = [f"{found.importer}:{found.line} imports {found.imported}" for found in IMPORTS
              if not allowed(found, table)]
    assert not broken, "imports the floors of docs/architecture.md forbid:\n" + "\n".join(broken)


@pytest.mark.parametrize(("importer", "imported"), [
    ("tasks", "analysis"), ("tasks", "model.transformer"), ("tasks", "studies"), ("tasks", "runs"),
    ("tasks", "train"), ("model", "runs"), ("analysis", "studies"), ("analysis", "cli"),
    ("analysis", "plots"), ("plots", "studies"), ("studies", "cli"), ("studies", "llm"),
])
def test_the_named_rules_hold(importer, imported):
    """The rules the page states in words: the table allows none of these imports, and no module makes one."""
    probe = Import(f"headway.{importer}.probe", f"headway.{imported}", 0, True)
    assert not allowed(probe, rooms()), f"the page's table lets {importer} import {imported}"
    assert not [found for found in IMPORTS if room_of(found.importer) == importer
                and (found.imported == f"headway.{imported}" or found.imported.startswith(f"headway.{imported}."))]


def module_level_reach() -> dict[str, set[str]]:
    """What each module loads at module level, transitively (importing a.b.c loads a and a.b first)."""
    direct: dict[str, set[str]] = {name: set() for name in MODULES}
    for found in IMPORTS:
        if found.module_level:
            parts = found.imported.split(".")
            direct[found.importer] |= {".".join(parts[:i]) for i in range(1, len(parts) + 1)} & set(MODULES)
    reach = {}
    for name in MODULES:
        seen, stack = set(), [name]
        while stack:
            for other in direct[stack.pop()] - seen:
                seen.add(other)
                stack.append(other)
        reach[name] = seen
    return reach


def test_the_imports_that_run_back_are_the_pages():
    """A function-level import of a module that loads the importer at module level breaks a cycle: each is listed."""
    reach = module_level_reach()
    back = {(found.importer, found.imported) for found in IMPORTS
            if not found.module_level and found.imported in MODULES and found.importer in reach[found.imported]}
    listed = {(importer, imported) for importer_cell, imported_cell, _ in page_table("## Imports that run back")
              for importer in code_names(importer_cell) for imported in code_names(imported_cell)}
    assert back == listed
