"""`headway …`: the command-line entry point. Bad input exits with status 2 and one line; a stop signal, a full
disk or a lack of memory also ends with one line and a documented status, never a traceback (docs/cli.md)."""

from __future__ import annotations

import contextlib
import importlib
import os
import re
import signal
import sys
import threading
from collections.abc import Iterator

import click

from headway.errors import (INTERRUPT_EXIT, IO_EXIT, STOP_SIGNALS, TIME_LIMIT_EXIT, ConfigError, Interrupted,
                            JobsFailed, Stopped, note_stop, reset_stop, stop_signal)

__all__ = ["IO_EXIT", "TIME_LIMIT_EXIT", "cli", "main"]


# Every command: where it lives ("module:object", imported only when that command is run or asked for its help,
# so `headway --help` loads no command module) and its line in `headway --help` (a test holds it to the command's
# own help).
COMMANDS = {
    "data": ("headway.cli.data:data", "Generate task data as JSON Lines."),
    "demo": ("headway.cli.demo:demo", "Train layers × hops × seeds on the retrieval task (CPU scale) and report "
                                      "the depth law; with --compose, also the cell where two layers solve three "
                                      "hops by composing links."),
    "export": ("headway.cli.export:export", "Write a trained run in another library's format."),
    "llm-eval": ("headway.cli.llm_eval:llm_eval", "Prompted retrieval questions (F1-F5) for any model: accuracy "
                                                  "vs hops, figure, tables and report."),
    "llc": ("headway.cli.llc:llc", "Calibrate the SGLD sampler of the local learning coefficient on trained runs."),
    "reach": ("headway.cli.reach:reach", "Print the % of link orders from which the query reaches x_0, per layers "
                                         "(rows) and hops (columns)."),
    "show": ("headway.cli.show:show", "Print every run found in PATH (a run or sweep directory)."),
    "study": ("headway.cli.study:study", "Reproduce a study end to end: train its grid, analyse every model, write "
                                         "a report."),
    "train": ("headway.cli.train:train", "Train a task."),
}


class LazyGroup(click.Group):
    """The `headway` group: commands imported by name when used (as lm-eval registers its tasks)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attribute = COMMANDS[name][0].split(":")
        return getattr(importlib.import_module(module), attribute)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary) for name, (_, summary) in sorted(COMMANDS.items())])


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="headway")
def cli() -> None:
    """Grow small transformers on algorithmic tasks and measure the circuits they form."""


@contextlib.contextmanager
def stop_signals() -> Iterator[None]:
    """While the block runs, Ctrl-C, SIGTERM and SIGHUP raise `Stopped` (training handles all three itself and
    saves first); on the main thread only, as Python requires. A SIGINT that the parent ignores stays ignored. Once
    a stop is under way, a repeated signal is only counted (`headway.errors.note_stop`): it never cuts short the
    save or the unwinding the first one started.

    Ctrl-C raises `Stopped`, not Python's own KeyboardInterrupt: CPython marks a bare KeyboardInterrupt raised
    inside `exec` of a string (dataclasses build their methods so) as unhandled, and `python -m` then ends by
    SIGINT even after `main` caught it. A stop that lands while a module is being imported ends the process at
    once with its line and status: nothing is being saved then, and an import's bare `except:` (dill has one)
    would turn the exception into an unrelated ImportError."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, frame: object) -> None:
        if not note_stop(signum):  # a stop is under way (saving, or unwinding): a repeated signal is only counted
            return
        if _importing():
            click.echo(_stop_line(signum), err=True)
            sys.stderr.flush()
            os._exit(128 + signum)
        raise Stopped(signum)

    ours = [signum for signum in STOP_SIGNALS
            if signum != signal.SIGINT or signal.getsignal(signum) is signal.default_int_handler]
    previous = {signum: signal.signal(signum, stop) for signum in ours}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _importing() -> bool:
    """Whether some module's body is running now (importlib flags its spec while it executes)."""
    return any(getattr(getattr(module, "__spec__", None), "_initializing", False)
               for module in list(sys.modules.values()))


def _stop_line(signum: int) -> str:
    """The one line a stop outside training prints."""
    if signum == signal.SIGINT:
        return "headway: aborted"
    return (f"headway: stopped by {signal.Signals(signum).name}; everything saved so far is kept, run the same "
            "command again to continue")


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map user errors to one line on stderr and exit status 2, and every stop and fault the
    command cannot go on from to one line and its status."""
    reset_stop()
    try:
        with stop_signals():
            return _run(sys.argv[1:] if argv is None else list(argv))
    except KeyboardInterrupt as stop:  # a stop outside training, start-up included
        signum = stop_signal(stop)
        click.echo(_stop_line(signum), err=True)
        return 128 + signum
    finally:
        if argv is None:  # the process ends with the status decided: a stop signal now must not end it otherwise
            for signum in STOP_SIGNALS:
                signal.signal(signum, signal.SIG_IGN)


def _run(args: list[str]) -> int:
    """Parse and run one command, turning what it raises into one line and an exit status."""
    try:
        with cli.make_context("headway", args) as ctx:
            cli.invoke(ctx)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.exceptions.Abort:
        click.echo("headway: aborted", err=True)
        return INTERRUPT_EXIT
    except click.UsageError as err:
        hint = f" (try '{err.ctx.command_path} --help')" if err.ctx else ""
        click.echo(f"headway: error: {_one_line(err.format_message())}{hint}", err=True)
        return 2
    except click.ClickException as err:
        click.echo(f"headway: error: {_one_line(err.format_message())}", err=True)
        return err.exit_code
    except ConfigError as err:
        click.echo(f"headway: error: {_one_line(str(err))}", err=True)
        return 2
    except JobsFailed as err:
        click.echo(f"headway: error: {_one_line(str(err))}", err=True)
        return 1
    except Interrupted as err:  # Ctrl-C, SIGTERM or SIGHUP in training (its state saved), or the time limit
        click.echo(f"headway: {err}", err=True)
        return err.status
    except OSError as err:  # a full disk, a read-only or vanished folder: what was written before is intact
        where = f" ({err.filename})" if err.filename else ""
        click.echo(f"headway: error: {_one_line(err.strerror or str(err))}{where}; fix that (e.g. free disk space) "
                   "and run the same command again: everything saved so far is kept", err=True)
        return IO_EXIT
    except MemoryError:  # Python's, and numpy's (_ArrayMemoryError)
        return _out_of_memory()
    except RuntimeError as err:  # torch's allocators raise RuntimeError (OutOfMemoryError on CUDA), told by message
        if not _allocator_failure(err):
            raise
        return _out_of_memory()
    return 0


# What torch's allocators say when they cannot allocate: the CPU allocator, CUDA's caching allocator and a CUDA
# call that ran out, cuBLAS's workspace, and Apple's MPS. Nothing else is taken for a lack of memory.
ALLOCATOR_FAILURES = re.compile(r"DefaultCPUAllocator: can't allocate memory|CUDA out of memory|"
                                r"CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|MPS backend out of memory")


def _allocator_failure(err: BaseException) -> bool:
    """Whether `err`, or an error it was raised from (torch.compile wraps what fails inside it), is an
    allocator's failure to allocate."""
    seen: BaseException | None = err
    while seen is not None:
        if isinstance(seen, RuntimeError) and ALLOCATOR_FAILURES.search(str(seen)):
            return True
        seen = seen.__cause__
    return False


def _out_of_memory() -> int:
    """Print the one line of a lack of memory (docs/cli.md, Exit statuses) and return its status, 1."""
    click.echo("headway: error: out of memory; lower the sizes of the command (docs/cli.md#limits) and run it "
               "again: everything saved so far is kept", err=True)
    return 1


def _one_line(text: str) -> str:
    """A message on one line, as every refusal is printed."""
    return " ".join(text.split())


if __name__ == "__main__":
    sys.exit(main())
