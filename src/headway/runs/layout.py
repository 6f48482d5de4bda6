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

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

CONFIG = "config.json"
METRICS = "metrics.parquet"
SUMMARY = "summary.json"
CHECKPOINTS = "checkpoints"
RESUME = "resume"
LATEST = "latest.json"
LOCK = ".lock"
DIGEST_KEY = "headway_blake2b"  # JSON files: a checksum of the other entries
SHAPE_KEY = b"headway_shape"  # Parquet metadata: the rows, columns and dtypes a table was written with


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


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write in the block, renamed over `path` when the block ends and
    removed when it fails (a full disk, a stop signal): a reader finds the old file or the new one, never
    part of one, and a failed write leaves nothing behind."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


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
    """A JSON object written by `write_json`, without its checksum; a file that is gone, does not parse, has
    no checksum or whose contents differ from it is refused, naming it."""
    if not Path(path).is_file():
        raise missing(path)
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise damaged(path, f"not valid JSON: {err}") from None
    if not isinstance(data, dict):
        raise damaged(path, f"a JSON {type(data).__name__}, not an object")
    expected = data.pop(DIGEST_KEY, None)
    if expected is None:
        raise damaged(path, f"no checksum ({DIGEST_KEY}): written by an older headway, or altered")
    if expected != _json_digest(data):
        raise damaged(path, f"its contents differ from its checksum ({DIGEST_KEY}), e.g. edited by hand")
    return data


def _shape(table: pa.Table) -> bytes:
    """A table's row count, column names and Arrow types, as the bytes its metadata stores. Arrow's types, not
    pandas' dtypes: a column of Python ints held as `object` is written as int64 and read back as int64, so
    only the stored types describe what a reader will find."""
    return json.dumps([table.num_rows, [[field.name, _type_name(field.type)] for field in table.schema]]).encode()


def _type_name(kind: pa.DataType) -> str:
    """An Arrow type as text, list types without their item field's name, which Parquet renames ("item" is
    written, "element" read back)."""
    import pyarrow as pa

    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return f"list<{_type_name(kind.value_type)}>"
    return str(kind)


def _pandas_shape(frame: pd.DataFrame) -> bytes:
    """The shape tables written before `_shape` stored: the frame's row count, column names and pandas dtypes."""
    return json.dumps([len(frame), [[str(name), str(dtype)] for name, dtype in frame.dtypes.items()]]).encode()


def write_table(path: Path, frame: pd.DataFrame) -> None:
    """Write a table as Parquet with page checksums (the values) and its shape in the file's metadata
    (rows, column names and dtypes), through a temporary file and an atomic rename."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pandas(frame, preserve_index=False)
    table = table.replace_schema_metadata({**(table.schema.metadata or {}), SHAPE_KEY: _shape(table)})
    with atomic(path) as tmp:
        pq.write_table(table, tmp, write_page_checksum=True)


def read_table(path: Path | str) -> pd.DataFrame:
    """A table from `write_table`, its page checksums and shape verified; a truncated or altered file, or
    one written otherwise, is refused, naming it."""
    import pyarrow.parquet as pq

    if not Path(path).is_file():
        raise missing(path)
    try:
        table = pq.read_table(path, page_checksum_verification=True)
        frame = table.to_pandas()
        expected = (table.schema.metadata or {}).get(SHAPE_KEY)
        if expected is None:
            raise ValueError(f"no {SHAPE_KEY.decode()} entry: written by an older headway, or altered")
        if expected not in (_shape(table), _pandas_shape(frame)):
            raise ValueError("its rows or columns differ from the ones it was written with")
        return frame
    except Exception as err:  # noqa: BLE001 - any failure to decode a file headway wrote means it is damaged
        raise damaged(path, f"not a readable Parquet table: {err}") from None


def ensemble_dirs(path: Path) -> list[Path]:
    """The ensemble directories at `path`: itself if it is one, else those below it, sorted."""
    path = Path(path)
    if (path / CONFIG).is_file():
        return [path]
    return sorted(p.parent for p in path.glob(f"**/{CONFIG}"))


@contextlib.contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold `run_dir`'s lock while the block runs, so that two processes never train one ensemble at
    once (the second is refused, naming the first); the system drops the lock when its process dies."""
    path = Path(run_dir) / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
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
