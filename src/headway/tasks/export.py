"""JSON Lines export of any task's examples (each task's `records` says what a line holds)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO

from headway.files import atomic
from headway.tasks.base import Batch, Task

# Examples converted to records at a time while writing, so memory stays bounded for big batches.
_WRITE_CHUNK = 4096


def write_jsonl(path_or_file: str | Path | IO[str], cfg: Task, batch: Batch) -> int:
    """Write one compact JSON record per line to an open text file, or atomically to a path
    (`headway.files.atomic`); return the count."""
    if isinstance(path_or_file, (str, Path)):
        with atomic(Path(path_or_file)) as tmp, open(tmp, "w", encoding="utf-8") as file:
            return write_jsonl(file, cfg, batch)
    for start in range(0, len(batch), _WRITE_CHUNK):
        records = cfg.records(batch.subset(slice(start, start + _WRITE_CHUNK)))
        path_or_file.write("".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records))
    return len(batch)
