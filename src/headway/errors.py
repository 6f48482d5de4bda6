"""User-facing errors: raised for bad input, printed by the CLI as one line."""

import time


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and what is allowed."""


class Interrupted(Exception):
    """Training stopped on request (Ctrl-C); the state at `step` is saved and can be resumed."""

    def __init__(self, step: int) -> None:
        super().__init__(f"interrupted at step {step}; run the same command again to resume")
        self.step = step


class TimeLimitReached(Interrupted):
    """Work reached the time limit it was given: training at `step` (its state saved), or the work named
    by `where` was not started; everything finished so far is kept and the same command continues."""

    def __init__(self, step: int | None = None, where: str | None = None) -> None:
        place = where if where is not None else f"at step {step}"
        Exception.__init__(self, f"time limit reached {place}; run the same command again to continue")
        self.step, self.where = step, where

    def __reduce__(self) -> tuple[type, tuple[int | None, str | None]]:
        """Pickle by the constructor's arguments (a Ray task's error travels to the driver pickled)."""
        return type(self), (self.step, self.where)

    @classmethod
    def check(cls, deadline: float | None, where: str) -> None:
        """Raise when `deadline` (a `time.time()` value; None: no limit) has passed; `where` names the
        work not started, e.g. "before analysing L2-…"."""
        if deadline is not None and time.time() >= deadline:
            raise cls(where=where)


class JobsFailed(Exception):
    """Some ensembles of a sweep failed (the others finished and are kept); one line per failure."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(f"{len(lines)} ensemble(s) failed, the rest finished; re-run the same command to retry: "
                         + "; ".join(lines))
        self.lines = lines
