"""User-facing errors: raised for bad input, printed by the CLI as one line."""


class ConfigError(ValueError):
    """A configuration value is invalid; the message names the value and what is allowed."""


class Interrupted(Exception):
    """Training stopped on request (Ctrl-C); the state at `step` is saved and can be resumed."""

    def __init__(self, step: int) -> None:
        super().__init__(f"interrupted at step {step}; run the same command again to resume")
        self.step = step


class TimeLimitReached(Interrupted):
    """Training reached the time limit it was given; the state at `step` is saved and can be resumed."""

    def __init__(self, step: int) -> None:
        Exception.__init__(self, f"time limit reached at step {step}; run the same command again to continue")
        self.step = step


class JobsFailed(Exception):
    """Some ensembles of a sweep failed (the others finished and are kept); one line per failure."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(f"{len(lines)} ensemble(s) failed, the rest finished; re-run the same command to retry: "
                         + "; ".join(lines))
        self.lines = lines
