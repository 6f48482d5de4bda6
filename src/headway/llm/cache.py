"""An on-disk cache of backend answers, so an interrupted evaluation resumes without asking the model again.

Answers are keyed by the backend's `kind` and `model_id`, the method and the request itself, and
stored as JSON in one SQLite file, each with a checksum of its key and value, so that a damaged file
is refused, naming it, rather than read as other answers. `CachedBackend` writes each chunk of answers as soon as the
inner backend returns it, so stopping a run (Ctrl-C, a crash, a lost server) loses at most one chunk.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from headway.errors import ConfigError
from headway.llm.backend import Backend, LoglikRequest, Progress
from headway.runs import layout
from headway.settings import check_int

# SQLite limits the number of `?` parameters in one statement (999 in older builds).
_KEYS_PER_QUERY = 500


def _checksum(key: str, text: str) -> str:
    return hashlib.blake2b(f"{key}={text}".encode("utf-8"), digest_size=8).hexdigest()


def _decode(path: Path, key: str, stored: Any) -> Any:
    """The value of a stored row, its checksum verified. A row without one (written before answers were
    checksummed, or altered) is refused like a damaged one: deleting the cache, which asks the model again,
    is the migration (docs/llm-eval.md)."""
    try:
        row = layout.parse_json(path, stored) if isinstance(stored, str) else None
    except ConfigError:  # not JSON, or nested deeper or holding longer numbers than headway writes
        row = None
    if isinstance(row, dict) and row.keys() == {"value", "check"} and isinstance(row["check"], str):
        if row["check"] == _checksum(key, json.dumps(row["value"])):
            return row["value"]
        raise layout.damaged(path, "an answer does not match its checksum")
    raise layout.damaged(path, "an answer without a checksum: written by a headway before answers were "
                               "checksummed, or altered")


def request_key(kind: str, model_id: str, method: str, payload: Mapping[str, Any]) -> str:
    """SHA-256 hex digest of a canonical JSON of the request, so equal requests share one cache entry."""
    text = json.dumps([kind, model_id, method, payload], sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class ResponseCache:
    """A key → JSON value store in one SQLite file, safe to share between threads.

    Every `put_many` commits at once, so what was written survives the process being killed.
    """

    def __init__(self, path: str | Path) -> None:
        """Open (or create, with its parent folders) the cache file at `path`."""
        self.path = Path(path)
        self._lock = threading.Lock()
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = sqlite3.connect(self.path, check_same_thread=False)
        except (OSError, sqlite3.Error) as error:
            raise ConfigError(f"cannot open the response cache {self.path}: {error}; choose a writable path") from error
        try:
            with self._db:
                self._db.execute("CREATE TABLE IF NOT EXISTS responses (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        except sqlite3.Error as error:
            self._db.close()
            raise ConfigError(
                f"{self.path} is not a usable response cache ({error}); delete it or choose another path"
            ) from error

    def get_many(self, keys: Iterable[str]) -> dict[str, Any]:
        """The stored value of each key that is present; absent keys are left out."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, Any] = {}
        with self._lock:
            for start in range(0, len(wanted), _KEYS_PER_QUERY):
                part = wanted[start:start + _KEYS_PER_QUERY]
                marks = ",".join("?" * len(part))
                try:
                    rows = self._db.execute(f"SELECT key, value FROM responses WHERE key IN ({marks})", part).fetchall()
                except sqlite3.DatabaseError as error:
                    raise layout.damaged(self.path, str(error)) from None
                found.update((key, _decode(self.path, key, value)) for key, value in rows)
        return found

    def put_many(self, items: Mapping[str, Any]) -> None:
        """Store (or replace) each key's JSON-encodable value and commit at once; a full disk is an OSError (what
        was committed before stays), a damaged file a one-line refusal."""
        rows = [(key, json.dumps({"value": value, "check": _checksum(key, json.dumps(value))}))
                for key, value in items.items()]
        try:
            with self._lock, self._db:
                self._db.executemany("INSERT OR REPLACE INTO responses (key, value) VALUES (?, ?)", rows)
        except sqlite3.DatabaseError as error:
            primary = (getattr(error, "sqlite_errorcode", 0) or 0) & 0xFF  # without the extended code's detail
            if primary == sqlite3.SQLITE_FULL:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.path)) from None
            if primary in (sqlite3.SQLITE_IOERR, sqlite3.SQLITE_READONLY):
                raise OSError(errno.EIO, str(error), str(self.path)) from None
            raise layout.damaged(self.path, str(error)) from None

    def __len__(self) -> int:
        """Number of stored answers."""
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM responses").fetchone()[0]

    def close(self) -> None:
        """Close the file; the cache cannot be used afterwards."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> Self:
        """Use the cache in a `with` block that closes it."""
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close the cache when the `with` block ends."""
        self.close()


class CachedBackend(Backend):
    """A backend that answers repeated requests from a `ResponseCache` and sends only the rest to `inner`.

    Misses go to `inner` in chunks of `chunk` requests and each chunk's answers are stored as soon as
    they return. Identical requests within one call are asked once. `misses` counts requests sent to
    `inner`; `hits` counts requests answered without it (stored earlier, or a repeat within the call).
    `close()` closes `inner` but not the cache: whoever opened the cache closes it, so one cache can
    serve several backends in turn.
    """

    def __init__(self, inner: Backend, cache: ResponseCache, chunk: int = 32) -> None:
        """Wrap `inner`, taking its kind, model and capabilities, which also key the cache."""
        self.inner = inner
        self.cache = cache
        self.chunk = check_int("chunk", chunk, 1)
        self.kind = inner.kind
        self.model_id = inner.model_id
        self.supports_loglik = inner.supports_loglik
        self.supports_generate = inner.supports_generate
        self.hits = 0
        self.misses = 0

    def loglikelihood(self, requests: Sequence[LoglikRequest], progress: Progress | None = None) -> list[float]:
        """Scores from the cache where stored, from `inner` otherwise, in request order."""
        payloads = [{"context": r.context, "continuation": r.continuation} for r in requests]

        def ask(batch: list[dict[str, Any]], report: Progress | None) -> list[Any]:
            """Score a chunk of missing requests with the inner backend."""
            return self.inner.loglikelihood([LoglikRequest(**payload) for payload in batch], report)

        return self._answer("loglikelihood", payloads, ask, progress)

    def generate(self, prompts: Sequence[str], max_tokens: int, progress: Progress | None = None) -> list[str]:
        """Replies from the cache where stored, from `inner` otherwise, in prompt order."""
        payloads = [{"prompt": prompt, "max_tokens": max_tokens} for prompt in prompts]

        def ask(batch: list[dict[str, Any]], report: Progress | None) -> list[Any]:
            """Generate replies to a chunk of missing prompts with the inner backend."""
            return self.inner.generate([payload["prompt"] for payload in batch], max_tokens, report)

        return self._answer("generate", payloads, ask, progress)

    def close(self) -> None:
        """Close the inner backend (the cache stays open for its owner to close)."""
        self.inner.close()

    def _answer(
        self,
        method: str,
        payloads: list[dict[str, Any]],
        ask: Callable[[list[dict[str, Any]], Progress | None], list[Any]],
        progress: Progress | None,
    ) -> list[Any]:
        """Answer each payload from the cache or, chunk by chunk, from `ask`, storing each chunk at once.

        Progress counts every request, repeats included, so it adds up to len(payloads).
        """
        keys = [request_key(self.kind, self.model_id, method, payload) for payload in payloads]
        copies: dict[str, int] = {}
        for key in keys:
            copies[key] = copies.get(key, 0) + 1
        answers = self.cache.get_many(copies)
        stored = sum(copies[key] for key in answers)
        self.hits += stored
        if progress is not None and stored:
            progress(stored)
        payload_of = dict(zip(keys, payloads, strict=True))
        missing = [key for key in copies if key not in answers]
        for start in range(0, len(missing), self.chunk):
            part = missing[start:start + self.chunk]
            self.misses += len(part)
            replies = ask([payload_of[key] for key in part], progress)
            fresh = dict(zip(part, replies, strict=True))
            self.cache.put_many(fresh)
            answers.update(fresh)
            repeats = sum(copies[key] - 1 for key in part)
            self.hits += repeats
            if progress is not None and repeats:
                progress(repeats)
        return [answers[key] for key in keys]
