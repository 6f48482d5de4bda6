"""Which command an output folder belongs to: a marker file in it (`.headway.json`, e.g. {"kind": "study
retrieval"}) written when a command makes the folder, and checked before any command writes into a folder, so
that one kind of output never overwrites or mixes with another's (docs/cli.md#output-paths).

A folder a command may write into is absent, empty (hidden files aside), marked with its own kind, or, without a
marker, one an older headway wrote that holds what this kind of command writes (`inferred_kinds`): such a folder is
used as it is and left unmarked. Every folder below a marked one belongs to it: the ensembles `train`, `demo` and a
study write under their `--out` are parts of that folder, not folders of their own."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from headway.errors import ConfigError
from headway.runs import layout
from headway.files import shown

MARKER = ".headway.json"
TRAIN, DEMO, LLM_EVAL, EXPORT_TL, DATA_PROMPTS = "train", "demo", "llm-eval", "export tl", "data prompts"
# Files only one kind of command writes at the top of its folder, by which an unmarked folder is recognised.
DEMO_FILES = ("depth_table.csv", "depth_accuracy.png", "depth_phase.png")
LLM_EVAL_FILES = ("cache.sqlite", "predictions.csv")
EXPORT_FILES = ("headway.json",)
PROMPT_FILES = ("questions.jsonl", "harness")
MAX_READ = 1 << 20  # bytes of a summary.json or config.json read to recognise a folder; a larger one shows nothing


def study_kind(name: str) -> str:
    """The kind of the folder `headway study NAME` writes."""
    return f"study {name}"


def folder_kind(folder: Path) -> str | None:
    """The kind named by `folder`'s marker, None when it has none; a marker that is not a regular file holding a
    kind is refused, naming it."""
    marker = folder / MARKER
    try:
        regular = os.lstat(marker)
    except FileNotFoundError:
        return None
    except OSError as err:
        raise ConfigError(f"{shown(marker)} cannot be read ({err.strerror})") from None
    if not stat.S_ISREG(regular.st_mode):
        raise layout.damaged(shown(marker), "not a regular file")
    kind = layout.read_json(marker).get("kind")
    if not isinstance(kind, str) or not kind:
        raise layout.damaged(shown(marker), "no kind of command named in it")
    return kind


def owner_problem(folder: Path, kind: str | None) -> str | None:
    """Why a command of `kind` must not write into `folder` (a path where a write lands: no symlink left on the
    way), or None when it may. `kind` None: `folder` is a file a command writes (`data TASK --out`, `reach --csv`),
    refused inside any folder a command owns."""
    folder = Path(folder)
    for above in folder.absolute().parents:
        owner = folder_kind(above)
        if owner is not None and owner != kind:
            what = f"`headway {kind}` writes" if kind else "write this file"
            return (f"{shown(folder)} is inside {shown(above)}, which holds the output of `headway {owner}`; "
                    f"{what} elsewhere: choose a path outside it")
    if kind is None or not folder.is_dir():
        return None
    owner = folder_kind(folder)
    if owner is not None:
        return None if owner == kind else (
            f"{shown(folder)} holds the output of `headway {owner}` (named in its {MARKER}); `headway {kind}` would "
            "overwrite or mix with it: choose another folder")
    if not _visible(folder):
        return None
    inferred = inferred_kinds(folder)
    if kind in inferred:
        return None
    if inferred:
        return (f"{shown(folder)} holds the output of `headway {inferred[0]}` (an older headway's, without a "
                f"{MARKER}); `headway {kind}` would overwrite or mix with it: choose another folder")
    if (folder / layout.CONFIG).is_file():
        return (f"{shown(folder)} is one ensemble (it holds {layout.CONFIG}); give the folder that holds it, or "
                "another folder")
    names = ", ".join(sorted(_visible(folder))[:3])
    return (f"{shown(folder)} holds files headway did not write ({names}, …); `headway {kind}` writes only into a "
            "new or empty folder, or one it wrote: choose another folder")


def claim(folder: Path, kind: str) -> None:
    """Make `folder` a folder of `kind` before a command of that kind writes into it: refused with one line when it
    may not (`owner_problem`); created and marked when it is absent or empty; else left as it is (marked with
    `kind` already, or an older headway's folder of that kind)."""
    folder = Path(folder)
    problem = owner_problem(folder, kind)
    if problem:
        raise ConfigError(problem)
    if folder.is_dir() and (folder_kind(folder) is not None or _visible(folder)):
        return
    folder.mkdir(parents=True, exist_ok=True)
    layout.write_json(folder / MARKER, {"kind": kind})


def inferred_kinds(folder: Path) -> tuple[str, ...]:
    """The kinds of command that could have written `folder`, which holds no marker (an older headway's), judged by
    the files only that kind writes; () when nothing in it shows one. Only what a command writes at the top of its
    folder is looked at, and the task of the first ensemble of a study's `runs/`."""
    names = _visible(folder)
    summary = _small_json(folder / layout.SUMMARY)
    if isinstance(summary.get("study"), str):
        return (study_kind(summary["study"]),)
    if "meta" in summary or names & set(LLM_EVAL_FILES):
        return (LLM_EVAL,)
    if names & set(EXPORT_FILES):
        return (EXPORT_TL,)
    if (folder / "runs").is_dir() and (task := _first_task(folder / "runs")) is not None:
        return (study_kind(task),)
    if names & set(PROMPT_FILES):
        return (DATA_PROMPTS,)
    if names & set(DEMO_FILES):
        return (DEMO,)
    if any((folder / name / layout.CONFIG).is_file() for name in names):
        return (TRAIN, DEMO)
    return ()


def _visible(folder: Path) -> set[str]:
    """The names in `folder` other than hidden ones (`.name`: a marker, a lock, `.DS_Store`, `.gitkeep`)."""
    return {entry.name for entry in os.scandir(folder) if not entry.name.startswith(".")}


def _small_json(path: Path) -> dict:
    """The JSON object in `path` when it is a regular file of at most MAX_READ bytes that parses as one, else {}."""
    try:
        if not path.is_file() or path.stat().st_size > MAX_READ:
            return {}
        data = json.loads(path.read_bytes())
    except (OSError, ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _first_task(runs: Path) -> str | None:
    """The task of the first run of the first ensemble in `runs` (by name), None when there is none to read."""
    for entry in sorted(os.scandir(runs), key=lambda e: e.name):
        stored = _small_json(Path(entry.path) / layout.CONFIG).get("runs")
        if isinstance(stored, list) and stored and isinstance(stored[0], dict):
            task = stored[0].get("task")
            return task if isinstance(task, str) else None
    return None
