"""User-facing errors: raised for bad input, printed by the CLI as one line."""

import signal
import time


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and what is allowed."""


INTERRUPT_EXIT = 130  # 128 + SIGINT, as a shell reports a command stopped by Ctrl-C
TIME_LIMIT_EXIT = 75  # EX_TEMPFAIL: stopped at --time-limit with everything saved; the same command continues
IO_EXIT = 74  # EX_IOERR: a file could not be written (a full disk); what was saved is kept
# What a scheduler sends before it preempts (Slurm, Kubernetes: SIGTERM; a closed terminal or session: SIGHUP);
# handled like Ctrl-C, whose SIGINT is listed with them.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Stopped(KeyboardInterrupt):
    """A stop signal (Ctrl-C's SIGINT, or SIGTERM, SIGHUP that a scheduler sends before it preempts) raised as a
    KeyboardInterrupt, so that every signal stops the same way: what is saved is kept and the same command
    resumes."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def stop_signal(stop: KeyboardInterrupt) -> int:
    """The signal behind a stop: its own for `Stopped`, SIGINT for a bare KeyboardInterrupt."""
    return stop.signum if isinstance(stop, Stopped) else signal.SIGINT


# The stop under way in this process: the first stop signal's number (None: none yet) and how many came after it.
# Once a stop is under way, a repeated signal (a scheduler sends SIGTERM again before it kills) is counted, never
# raised, so that it cannot cut the save short; the CLI starts each command with none (`reset_stop`).
_STOP = {"signum": None, "repeats": 0}


def reset_stop() -> None:
    """No stop under way: a new command starts."""
    _STOP.update(signum=None, repeats=0)


def note_stop(signum: int) -> bool:
    """Record stop signal `signum`; True when it is the first (the stop starts now), False when a stop was already
    under way (the signal is counted, `repeated_stops`)."""
    if _STOP["signum"] is None:
        _STOP["signum"] = signum
        return True
    _STOP["repeats"] += 1
    return False


def repeated_stops() -> int:
    """The stop signals that came after the first while the process stopped."""
    return _STOP["repeats"]


class Interrupted(Exception):
    """Training stopped on request (Ctrl-C, or `signum` such as SIGTERM); the state at `step` is saved and
    can be resumed. `repeats`: further stop signals that came while it saved (noted, not obeyed)."""

    def __init__(self, step: int, signum: int = signal.SIGINT, repeats: int = 0) -> None:
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        noted = f" (saved; {repeats} more stop signal(s) while saving were noted)" if repeats else ""
        super().__init__(f"{how} at step {step}{noted}; run the same command again to resume")
        self.step, self.signum, self.repeats = step, signum, repeats

    def __reduce__(self) -> tuple[type, tuple[int, int, int]]:
        """Pickle by the constructor's arguments (a Ray task's error travels to the driver pickled)."""
        return type(self), (self.step, self.signum, self.repeats)

    @property
    def status(self) -> int:
        """The exit status: 128 + the signal that stopped it (130 for Ctrl-C, 143 for SIGTERM)."""
        return 128 + self.signum


class TimeLimitReached(Interrupted):
    """Work reached the time limit it was given: training at `step` (its state saved), or the work named
    by `where` was not started; everything finished so far is kept and the same command continues."""

    def __init__(self, step: int | None = None, where: str | None = None) -> None:
        place = where if where is not None else f"at step {step}"
        Exception.__init__(self, f"time limit reached {place}; run the same command again to continue")
        self.step, self.where, self.signum = step, where, None

    @property
    def status(self) -> int:
        """TIME_LIMIT_EXIT: stopped at the limit with everything saved; the same command continues."""
        return TIME_LIMIT_EXIT

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
