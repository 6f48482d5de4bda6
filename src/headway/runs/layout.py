"""Where things live in an ensemble's run directory; atomic writes to it and checked reads from it.

    <ensemble>/config.json                     runs (flat configs) trained together, in instance order
    <ensemble>/metrics.parquet                 one row per instance per logged step
    <ensemble>/checkpoints/step_0000100.safetensors   weights of every instance (leading axis E)
    <ensemble>/resume/latest.json              -> the newest complete resume state
    <ensemble>/resume/step_0000100/            weights, optimiser moments, trainer counters, metrics
    <ensemble>/summary.json                    final metrics per run; written when training completes
    <ensemble>/.lock                           held (flock) by the process training it; names that process
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import math
import os
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from headway.errors import ConfigError
from headway.limits import MAX_JSON_BYTES, MAX_JSON_DEPTH, MAX_JSON_NUMBER, MAX_PARQUET_FOOTER, MAX_TABLE_BYTES
from headway.files import atomic, check_replaceable
from headway.runs.schema import TableSchema, table_digest, type_name

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.parquet as pq

CONFIG = "config.json"
METRICS = "metrics.parquet"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
RESUME = "resume"
LATEST = "latest.json"
LOCK = ".lock"
DIGEST_KEY = "headway_blake2b"  # JSON files: a checksum of the other entries; Parquet metadata: of the content
SHAPE_KEY = b"headway_shape"  # Parquet metadata before the content digest: the rows, columns and types written


def checkpoint_path(run_dir: Path, step: int) -> Path:
    return run_dir / CHECKPOINTS / f"step_{step:07d}.safetensors"


def resume_dir(run_dir: Path, step: int) -> Path:
    return run_dir / RESUME / f"step_{step:07d}"


def damaged(path: Path | str, why: str) -> ConfigError:
    """The one-line error for a file that cannot be read as what headway wrote there."""
    why = " ".join(why.split())  # a library's multi-line reason, on one line
    return ConfigError(f"{path} is damaged ({why}); delete it to have it computed again, or restore it from a copy")


def missing(path: Path | str) -> ConfigError:
    """The one-line error for a file headway wrote and expects to read back, which is gone."""
    return ConfigError(f"{path} is missing; run the command that wrote it again, or restore it from a copy")


def digest(data: bytes) -> str:
    """The checksum headway keeps of a file's bytes (BLAKE2b, 16 bytes, hex)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def write_text(path: Path, text: str) -> str:
    """Write `text` (UTF-8) atomically and return the checksum of its bytes, for a checked file to record
    (a CSV keeps no checksum of its own, so the JSON summary beside it holds it; `read_text`)."""
    return write_bytes(path, text.encode("utf-8"))


def write_bytes(path: Path, data: bytes) -> str:
    """Write `data` atomically and return its checksum, as `write_text` does."""
    with atomic(path) as tmp:
        tmp.write_bytes(data)
    return digest(data)


def read_bytes(path: Path | str, expected: str) -> bytes:
    """The bytes of a file whose checksum is `expected` (recorded in a checked file); altered, truncated or
    gone, it is refused with one line naming it."""
    if not Path(path).is_file():
        raise missing(path)
    data = Path(path).read_bytes()
    if digest(data) != expected:
        raise damaged(path, "its contents differ from the checksum recorded when it was written")
    return data


def read_text(path: Path | str, expected: str) -> str:
    """The text of a file from `write_text` whose checksum is `expected` (`read_bytes`)."""
    return read_bytes(path, expected).decode("utf-8")


def _json_digest(data: dict[str, Any]) -> str:
    return digest(json.dumps(data, sort_keys=True).encode())


def write_json(path: Path, data: dict[str, Any], checked: bool = True) -> None:
    """Write a JSON object through a temporary file and an atomic rename, so a kill never leaves half a
    file; `checked` adds a checksum of its contents (`DIGEST_KEY`) that `read_json` verifies. An output for
    other tools (`checked=False`, e.g. a study's summary.json) is standard JSON: NaN and infinities become null."""
    text = (json.dumps({**data, DIGEST_KEY: _json_digest(data)}, indent=2, sort_keys=True) if checked
            else json.dumps(_standard(data), indent=2, sort_keys=True, allow_nan=False))
    with atomic(path) as tmp:
        tmp.write_text(text)


def _standard(value: Any) -> Any:
    """`value` with every non-finite float (NaN, ±inf), at any depth of dicts and lists, replaced by None."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _standard(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_standard(item) for item in value]
    return value


def read_json(path: Path | str) -> dict[str, Any]:
    """A JSON object written by `write_json`, without its checksum; a file that is gone, larger or deeper than
    headway writes (`parse_json`), does not parse, has no checksum or whose contents differ from it is refused,
    naming it."""
    if not Path(path).is_file():
        raise missing(path)
    size = Path(path).stat().st_size
    if size > MAX_JSON_BYTES:
        raise damaged(path, f"it holds {size} bytes; headway's JSON files hold at most {MAX_JSON_BYTES}")
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise damaged(path, f"not valid JSON: {err}") from None
    data = parse_json(path, text)
    if not isinstance(data, dict):
        raise damaged(path, f"a JSON {type(data).__name__}, not an object")
    expected = data.pop(DIGEST_KEY, None)
    if expected is None:
        raise damaged(path, f"no checksum ({DIGEST_KEY}): written by an older headway, or altered")
    if expected != _json_digest(data):
        raise damaged(path, f"its contents differ from its checksum ({DIGEST_KEY}), e.g. edited by hand")
    return data


class _Unreadable(ValueError):
    """A file that differs from what headway writes there, found by a check of headway's own (the reason)."""


def parse_json(path: Path | str, text: str) -> Any:
    """The JSON value of `text`, read from the file `path`, refused with one line naming the file when it is not
    JSON headway writes: a number longer than `MAX_JSON_NUMBER` characters (checked on its text, before it is
    converted) or a float literal beyond a float's range, and nesting deeper than `MAX_JSON_DEPTH` (Python's
    parser stops at its recursion limit, about 1000 levels, so a deeper file is never read further)."""
    try:
        value = json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except _Unreadable as err:
        raise damaged(path, str(err)) from None
    except RecursionError:
        raise damaged(path, f"it nests deeper than Python parses; headway's JSON nests at most {MAX_JSON_DEPTH} "
                            "deep") from None
    except json.JSONDecodeError as err:
        raise damaged(path, f"not valid JSON: {err}") from None
    depth = json_depth(value)
    if depth > MAX_JSON_DEPTH:
        raise damaged(path, f"it nests {depth} deep; headway's JSON nests at most {MAX_JSON_DEPTH} deep")
    return value


def _parse_int(literal: str) -> int:
    if len(literal) > MAX_JSON_NUMBER:
        raise _Unreadable(f"it holds a number of {len(literal)} characters; headway writes at most {MAX_JSON_NUMBER}")
    return int(literal)


def _parse_float(literal: str) -> float:
    if len(literal) > MAX_JSON_NUMBER:
        raise _Unreadable(f"it holds a number of {len(literal)} characters; headway writes at most {MAX_JSON_NUMBER}")
    value = float(literal)
    if math.isinf(value):
        raise _Unreadable(f"it holds the number {literal}, beyond the range of a float")
    return value


def json_depth(value: Any) -> int:
    """How deep the lists and dicts of a parsed JSON value nest (a scalar: 0), found without recursion."""
    deepest, pending = 0, [(value, 0)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth + 1)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest


def _shape(table: pa.Table) -> bytes:
    """The row count, column names and Arrow types that a table written before its content digest (`SHAPE_KEY`)
    recorded of itself."""
    return json.dumps([table.num_rows, [[field.name, type_name(field.type)] for field in table.schema]]).encode()


def _pandas_shape(frame: pd.DataFrame) -> bytes:
    """The shape tables written before `_shape` stored: the frame's row count, column names and pandas dtypes."""
    return json.dumps([len(frame), [[str(name), str(dtype)] for name, dtype in frame.dtypes.items()]]).encode()


def write_table(path: Path, frame: pd.DataFrame, schema: TableSchema) -> None:
    """Write a table as Parquet, conformed to and checked against `schema` (`TableSchema.conform`), with page
    checksums and a digest of its content in the file's metadata (`table_digest`), through a temporary file and
    an atomic rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = schema.conform(pa.Table.from_pandas(frame, preserve_index=False))
    table = table.replace_schema_metadata({DIGEST_KEY: table_digest(table)})
    with atomic(path) as tmp:
        pq.write_table(table, tmp, write_page_checksum=True)


def read_table(path: Path | str, schema: TableSchema, max_rows: int | None = None) -> pd.DataFrame:
    """A table from `write_table`, checked before any value is decoded against what headway expects: the
    columns and kinds of `schema`, at most `max_rows` rows, a footer and a decoded size within `MAX_PARQUET_FOOTER`
    and `MAX_TABLE_BYTES`; then its page checksums and content digest. Anything else is refused, naming the file
    (a table from before the digest is checked against the shape it recorded, and `schema`)."""
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise missing(path)
    try:
        footer = _parquet_footer(path)
        if footer > MAX_PARQUET_FOOTER:
            raise _Unreadable(f"a Parquet footer of {footer} bytes; headway writes at most {MAX_PARQUET_FOOTER}")
        with pq.ParquetFile(path, page_checksum_verification=True) as file:
            arrow, metadata = file.schema_arrow, file.metadata
            stored = arrow.metadata or {}
            legacy = DIGEST_KEY.encode() not in stored
            if legacy and SHAPE_KEY not in stored:
                raise _Unreadable(f"no checksum ({DIGEST_KEY}): written by an older headway, or altered")
            why = schema.problem([(field.name, field.type) for field in arrow], metadata.num_rows, legacy)
            if why is not None:
                raise _Unreadable(f"not the table headway writes there: {why}")
            if max_rows is not None and metadata.num_rows > max_rows:
                raise _Unreadable(f"{metadata.num_rows} rows, more than the {max_rows} its runs log")
            size = _decoded_size(metadata)
            if size > MAX_TABLE_BYTES:
                raise _Unreadable(f"about {size} bytes once decoded; headway reads at most {MAX_TABLE_BYTES}")
            table = file.read()
        frame = table.to_pandas(ignore_metadata=True)
        if legacy and stored[SHAPE_KEY] not in (_shape(table), _pandas_shape(frame)):
            raise _Unreadable("its rows or columns differ from the ones it was written with")
        if not legacy and stored[DIGEST_KEY.encode()] != table_digest(table).encode():
            raise _Unreadable(f"its contents differ from its checksum ({DIGEST_KEY})")
        return frame
    except _Unreadable as err:
        raise damaged(path, str(err)) from None
    except Exception as err:  # noqa: BLE001 - any failure to decode a file headway wrote means it is damaged
        raise damaged(path, f"not a readable Parquet table: {err}") from None


def _parquet_footer(path: Path | str) -> int:
    """The length of a Parquet file's footer, from the 8 bytes that end the file (its length, then "PAR1")."""
    with open(path, "rb") as handle:
        handle.seek(0, os.SEEK_END)
        if handle.tell() < 12:
            raise ValueError("shorter than the smallest Parquet file")
        handle.seek(-8, os.SEEK_END)
        tail = handle.read(8)
    if tail[4:] != b"PAR1":
        raise ValueError("no Parquet footer at its end")
    return int.from_bytes(tail[:4], "little")


def _decoded_size(metadata: pq.FileMetaData) -> int:
    """Bytes a table takes once decoded, estimated from its footer: 8 per value, plus every row group's
    uncompressed pages (its strings and lists). Row groups, not their column chunks: pyarrow aborts the process
    on some damaged column-chunk metadata instead of raising (a histogram of the wrong size)."""
    pages = sum(metadata.row_group(group).total_byte_size for group in range(metadata.num_row_groups))
    return 8 * metadata.num_rows * metadata.num_columns + pages


def ensemble_dirs(path: Path) -> list[Path]:
    """The ensemble directories at `path`: itself if it is one, else those below it, sorted."""
    path = Path(path)
    if (path / CONFIG).is_file():
        return [path]
    return sorted(p.parent for p in path.glob(f"**/{CONFIG}"))


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock while the block runs, so that two processes never train one ensemble at
    once (the second is refused, naming the first); the system drops the lock when its process dies. The
    lock file is never a link or a device (`headway.files.check_replaceable`), which its holder's name would
    be written through."""
    path = Path(run_dir) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    check_replaceable(path)
    if path.is_symlink():
        raise ConfigError(f"{path} is a symlink; headway's lock file is a regular file: delete the link")
    with open(path, "a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "another process"
            raise ConfigError(f"{run_dir} is being trained by {holder}; wait for it to finish, or stop it "
                              "(its next run resumes), or choose another output directory") from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}")
        handle.flush()
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
