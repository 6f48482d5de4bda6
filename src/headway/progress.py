"""Progress a person can follow wherever the output goes: tqdm's bar on a terminal, and plain lines at intervals
when stderr is a file, a pipe or a CI log (`make demo | tee log`), where a bar would print nothing.

`progress(total, desc, unit)` returns either; both take `update`, `set_postfix`, `write` and `close` (and work
as context managers). The plain lines start once a job has run for `INTERVAL_S` seconds, so a short job prints
nothing, and a job that printed any ends with a last line.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from typing import Any, TextIO, TypeVar

T = TypeVar("T")

INTERVAL_S = 30.0  # seconds between two plain progress lines


class Lines:
    """A progress report as plain lines on `stream`: desc, count of total, percent, elapsed and left, postfix."""

    def __init__(self, total: int | None, desc: str, unit: str, initial: int = 0, interval: float | None = None,
                 stream: TextIO | None = None) -> None:
        self.total, self.desc, self.unit = total, desc, unit
        self.interval = INTERVAL_S if interval is None else interval
        self.n = initial
        self.stream = stream
        self.postfix = ""
        self.started = self.last = time.monotonic()
        self.printed = False
        # the rate that projects the time left is measured from the end of the first unit on: the first one may
        # carry a one-off cost (compiling the step took 44 s on the CPU) the others do not
        self.rate_from: tuple[float, int] | None = None

    def update(self, n: int = 1) -> None:
        """Count `n` more done; print a line when the interval has passed since the last."""
        self.n += n
        if self.rate_from is None:
            self.rate_from = (time.monotonic(), self.n)
        if time.monotonic() - self.last >= self.interval:
            self._line()

    def set_postfix(self, **values: Any) -> None:
        """Values shown at the end of the next line (as tqdm's postfix)."""
        self.postfix = ", ".join(f"{key} {value}" for key, value in values.items())

    def write(self, text: str) -> None:
        """A message of its own line."""
        print(text, file=self.stream or sys.stderr, flush=True)

    def close(self) -> None:
        """The last line, if any was printed before."""
        if self.printed:
            self._line()

    def _line(self) -> None:
        now = time.monotonic()
        elapsed = now - self.started
        done = f"{self.n}/{self.total} {self.unit}s" if self.total else f"{self.n} {self.unit}s"
        share = f" ({self.n / self.total:.0%})" if self.total else ""
        since, counted = self.rate_from if self.rate_from else (now, self.n)
        rate = (self.n - counted) / (now - since) if now > since else 0.0
        left = (f", about {_duration((self.total - self.n) / rate)} left"
                if self.total and rate > 0 and self.n < self.total else "")
        extra = f"; {self.postfix}" if self.postfix else ""
        self.write(f"{self.desc}: {done}{share}, {_duration(elapsed)} elapsed{left}{extra}")
        self.last, self.printed = time.monotonic(), True

    def __enter__(self) -> Lines:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _duration(seconds: float) -> str:
    """Seconds as "45 s", "12 min 5 s" or "2 h 3 min"."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes} min"


def progress(total: int | None, desc: str, unit: str = "it", enabled: bool = True, initial: int = 0,
             leave: bool = True) -> Any:
    """A tqdm bar on a terminal, plain `Lines` when stderr is not one, a silent bar when not `enabled`."""
    from tqdm.auto import tqdm

    if enabled and not sys.stderr.isatty():
        return Lines(total, desc, unit, initial)
    return tqdm(total=total, initial=initial, desc=desc, unit=unit, disable=not enabled, dynamic_ncols=True,
                leave=leave)


def tracked(items: Sequence[T], desc: str, unit: str = "it", enabled: bool = True, leave: bool = True) -> Iterator[T]:
    """The items of `items`, counted on a `progress` bar as each is done."""
    with progress(len(items), desc, unit, enabled, leave=leave) as bar:
        for item in items:
            yield item
            bar.update(1)
