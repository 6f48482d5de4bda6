"""Writing files safely: what an output path is on disk, where a write to it lands, and the atomic write every
writer uses. headway writes regular files and folders only, through a symlink to its target (the link stays), never
over a device, FIFO or socket (docs/cli.md#output-paths), and a write is a temporary file renamed into place."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from headway.errors import ConfigError

NAME_BYTES = 255  # the longest file name Linux and macOS file systems take, in bytes

# The kinds of file headway never writes over, by the test of their mode.
SPECIAL = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
           (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"))


def shown(path: Path | str) -> str:
    """`path` as text any terminal prints: bytes that are not UTF-8 as `\\xNN` escapes."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def text_problem(path: Path | str) -> str | None:
    """Why `path` cannot be an output, when its absolute form holds bytes that are not UTF-8 (the tables and JSON
    headway writes name their paths as UTF-8 text), a name too long for a file system, or a control character (a
    newline would split every message and log line that names it); None when it is printable UTF-8."""
    full = Path(path).absolute()
    try:
        text = str(full)
        text.encode("utf-8")
    except UnicodeEncodeError:
        return (f"{shown(full)} holds bytes that are not UTF-8 (shown as \\xNN); headway writes its outputs under "
                "UTF-8 paths only: rename what holds them, or choose another path")
    longest = max(full.parts, key=lambda part: len(os.fsencode(part)))
    if len(os.fsencode(longest)) > NAME_BYTES:
        return f"the name {longest[:40]}… is longer than {NAME_BYTES} bytes, the most a file system takes: shorten it"
    if any(ord(char) < 32 or ord(char) == 127 for char in text):
        return (f"{text!r} holds a control character (a newline, tab or escape); headway writes its outputs under "
                "printable names only: choose another path")
    return None


def landing(path: Path | str) -> Path:
    """Where a write to `path` lands: `path` itself when no symlink is on its way, else where its links lead,
    followed to the end (a link whose target does not exist yet included: the target is created, the link stays).
    A symlink loop is refused with one line."""
    path = Path(path)
    try:
        os.stat(path)
    except OSError as err:  # absent or unreachable: what the links lead to is checked as it is
        if err.errno == errno.ELOOP:
            raise ConfigError(f"{shown(path)} is a symlink loop (or a chain of links too long to follow); give a path "
                              "that leads to a file or folder") from None
    real = Path(os.path.realpath(path))
    return path if real == Path(os.path.abspath(path)) else real


def special_kind(path: Path | str) -> str | None:
    """What `path` is when it is something headway never writes over ("a character device", "a FIFO (named pipe)",
    …; a final symlink not followed), else None: absent, a regular file, a folder or a link."""
    try:
        mode = os.lstat(path).st_mode
    except OSError:
        return None
    return next((name for test, name in SPECIAL if test(mode)), None)


def special_problem(path: Path | str) -> str | None:
    """Why `path` (where a write lands, see `landing`) must not be written: it is a device, FIFO or socket."""
    kind = special_kind(path)
    if kind is None:
        return None
    return (f"{shown(path)} is {kind}, not a regular file or folder; headway never writes over one: give a file or "
            "folder path")


def check_replaceable(path: Path | str) -> None:
    """Refuse, with one line, a path that is a device, FIFO or socket (`special_problem`)."""
    problem = special_problem(path)
    if problem:
        raise ConfigError(problem)


def temporary(path: Path) -> Path:
    """The temporary file beside `path` that `atomic` writes: `NAME.tmp`, or a short name derived from NAME when
    that would pass the file system's limit on a name. Refused with one line when a folder is in its way."""
    name = path.name + ".tmp"
    if len(os.fsencode(name)) > NAME_BYTES:
        name = f".{hashlib.sha256(os.fsencode(path.name)).hexdigest()[:16]}.tmp"
    tmp = path.with_name(name)
    if tmp.is_dir() and not tmp.is_symlink():
        raise ConfigError(f"{shown(tmp)} is a folder in the way of writing {shown(path)} (headway writes there first "
                          "and renames): move it away")
    return tmp


@contextlib.contextmanager
def atomic(path: Path) -> Iterator[Path]:
    """A temporary path beside `path` to write in the block, renamed over `path` when the block ends and
    removed when it fails (a full disk, a stop signal): a reader finds the old file or the new one, never
    part of one, and a failed write leaves nothing behind. A symlink is written through (its target is
    replaced, the link stays; a loop is refused) and a device, FIFO or socket is refused, never replaced
    (`landing`, `check_replaceable`)."""
    path = landing(path)
    check_replaceable(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temporary(path)
    tmp.unlink(missing_ok=True)  # a leftover of a killed write, or a link planted there: never written through
    try:
        yield tmp
        check_replaceable(path)  # made one since the block began
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
