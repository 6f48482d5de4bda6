"""What headway expects of each table it writes and reads back, declared once in code: column names and kinds.

A writer conforms its table to the declaration and checks it before writing (a mismatch is a bug in headway,
raised as a RuntimeError); a reader checks the file's footer against the same declaration before decoding
anything (`headway.runs.layout.read_table`), so a table is never trusted for what it says of itself. The
content digest beside it (`table_digest`) covers what the footer and the page checksums leave out: a renamed
column, a pointer to another column's pages, a changed row count.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

# A column's kind, as its Arrow type says: any width of integer or float, either string type.
KINDS = ("int", "float", "bool", "str", "list<float>", "list<list<float>>")
FAMILY = "{n}"  # in a declared name: a family of columns, digits in its place (query_hop{n}: query_hop1, …)


@dataclass(frozen=True)
class TableSchema:
    """The columns a table holds, name → kind (`KINDS`). A name holding `{n}` declares a family (any number of
    columns, digits in its place); names in `optional` may be absent; `ordered`: exactly these columns, in this
    order (a table whose columns are all known up front, such as an ensemble's metrics)."""

    columns: tuple[tuple[str, str], ...]
    optional: frozenset[str] = frozenset()
    ordered: bool = False

    def __post_init__(self) -> None:
        unknown = sorted({kind for _, kind in self.columns} - set(KINDS))
        if unknown:
            raise ValueError(f"unknown column kind(s) {unknown}; use {', '.join(KINDS)}")

    @classmethod
    def of(cls, columns: Mapping[str, str], optional: Iterable[str] = (), ordered: bool = False) -> TableSchema:
        """The schema of `columns` (name → kind)."""
        return cls(tuple(columns.items()), frozenset(optional), ordered)

    def plus(self, columns: Mapping[str, str], optional: Iterable[str] = ()) -> TableSchema:
        """This schema with more columns (e.g. the tags a study adds to every row)."""
        return TableSchema(self.columns + tuple(columns.items()), self.optional | frozenset(optional), self.ordered)

    def names(self) -> list[str]:
        """The declared names, families with `{n}`."""
        return [name for name, _ in self.columns]

    def declared(self, name: str) -> tuple[str, str] | None:
        """(declared name, kind) that the column `name` is, or None when this schema does not declare it."""
        for pattern, kind in self.columns:
            if name == pattern or (FAMILY in pattern and _family(pattern).fullmatch(name)):
                return pattern, kind
        return None

    def problem(self, fields: list[tuple[str, pa.DataType]], rows: int, legacy: bool = False) -> str | None:
        """Why a table of `rows` rows whose columns are `fields` (name, Arrow type) is not one of this schema, or
        None. A table with no rows may lack columns and hold any types (an empty part of an analysis). `legacy`: a
        table from before the writer conformed its kinds, whose integer columns may be stored as floats."""
        names = [name for name, _ in fields]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            return f"column(s) {', '.join(repeated)} appear more than once"
        unknown = [name for name in names if self.declared(name) is None]
        if unknown:
            return f"unexpected column(s) {', '.join(unknown)}; expected {', '.join(self.names())}"
        if rows == 0:
            return None
        present = {self.declared(name)[0] for name in names}
        absent = [name for name in self.names() if name not in present and FAMILY not in name
                  and name not in self.optional]
        if absent:
            return f"no column(s) {', '.join(absent)}"
        if self.ordered and names != [name for name in self.names() if name in present]:
            return f"columns in the order {', '.join(names)}; expected {', '.join(self.names())}"
        for name, kind in fields:
            expected = self.declared(name)[1]
            found = kind_of(kind)
            if found != expected and not (legacy and expected == "int" and found == "float"):
                return f"column {name} holds {found} ({kind}), not {expected}"
        return None

    def conform(self, table: pa.Table) -> pa.Table:
        """`table` with every column that may be cast to its declared kind without loss cast to it (nulls, empty
        lists, integers held as floats, integers where floats are declared); a table that then differs from the
        declaration is a bug in headway (RuntimeError naming the difference)."""
        import pyarrow as pa

        columns = []
        for name, column in zip(table.column_names, table.columns):
            declared, found = self.declared(name), kind_of(column.type)
            if declared is not None and found != declared[1] and (
                    "null" in found or {found, declared[1]} == {"int", "float"}):
                try:
                    column = column.cast(_canonical(declared[1]), safe=True)
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                    pass  # left as it is: `problem` names it
            columns.append(column)
        table = pa.Table.from_arrays(columns, names=table.column_names, metadata=table.schema.metadata)
        why = self.problem([(field.name, field.type) for field in table.schema], table.num_rows)
        if why is not None:
            raise RuntimeError(f"headway wrote a table that differs from its declared schema: {why}")
        return table


def _family(declared: str) -> re.Pattern[str]:
    return re.compile(re.escape(declared).replace(re.escape(FAMILY), r"[0-9]+"))


def kind_of(kind: pa.DataType) -> str:
    """The kind (`KINDS`) of an Arrow type; another type as Arrow names it."""
    import pyarrow as pa

    if pa.types.is_boolean(kind):
        return "bool"
    if pa.types.is_integer(kind):
        return "int"
    if pa.types.is_floating(kind):
        return "float"
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return "str"
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return f"list<{kind_of(kind.value_type)}>"
    if pa.types.is_null(kind):
        return "null"
    return str(kind)


def _canonical(kind: str) -> pa.DataType:
    """The Arrow type a writer casts a column of `kind` to."""
    import pyarrow as pa

    types = {"int": pa.int64(), "float": pa.float64(), "bool": pa.bool_(), "str": pa.large_string(),
             "list<float>": pa.list_(pa.float64()), "list<list<float>>": pa.list_(pa.list_(pa.float64()))}
    return types[kind]


def table_digest(table: pa.Table) -> str:
    """BLAKE2b (16 bytes, hex) of a table's content as a reader decodes it: row count, every column's name and
    Arrow type, which values are null, and the values."""
    digest = hashlib.blake2b(digest_size=16)
    digest.update(f"{table.num_rows}|".encode())
    for field, column in zip(table.schema, table.columns):
        digest.update(f"{field.name}|{type_name(field.type)}|".encode())
        _update(digest, column.combine_chunks())
    return digest.hexdigest()


def _update(digest: hashlib._Hash, array: pa.Array) -> None:
    """Feed one array to `digest`: its null mask, then its values (list lengths and items, string lengths and
    bytes, or fixed-width values with nulls as zero)."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc

    digest.update(np.ascontiguousarray(array.is_null().to_numpy(zero_copy_only=False)).tobytes())
    kind = array.type
    if pa.types.is_null(kind):
        return
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        lengths = pc.list_value_length(array).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        digest.update(lengths.tobytes())
        _update(digest, pc.list_flatten(array))
    elif pa.types.is_string(kind) or pa.types.is_large_string(kind):
        values = array.fill_null("").to_pylist()
        digest.update(np.array([len(value.encode()) for value in values], dtype=np.int64).tobytes())
        digest.update("".join(values).encode())
    elif pa.types.is_boolean(kind) or pa.types.is_integer(kind) or pa.types.is_floating(kind):
        filled = array.fill_null(pa.scalar(False if pa.types.is_boolean(kind) else 0, kind))
        digest.update(np.ascontiguousarray(filled.to_numpy(zero_copy_only=False)).tobytes())
    else:  # a type headway does not write: its values as text
        digest.update(repr(array.to_pylist()).encode())


def type_name(kind: pa.DataType) -> str:
    """An Arrow type as text, list types without their item field's name, which Parquet renames ("item" is
    written, "element" read back)."""
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return f"list<{type_name(kind.value_type)}>"
    return str(kind)
