"""Faults, injected systematically: `train`, both studies and `llm-eval` SIGKILLed at random points resume
to results identical to an uninterrupted run; files damaged byte by byte are refused with one line naming
them or read exactly as written, never as other numbers.

The number of kills per command is `HEADWAY_FAULT_KILLS` (default 3); the counts of faults injected,
identical resumes and refusals are printed at the end of the module (`pytest -s tests/test_faults.py`).
"""

from __future__ import annotations

import collections
import contextlib
import errno
import hashlib
import itertools
import json
import os
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import TINY

from headway.cli.main import IO_EXIT, main
from headway.errors import ConfigError
from headway.llm.cache import ResponseCache
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, read_tensors, save_tensors, tensor_spec, weights_spec
from headway.runs.metrics import read_metrics
from headway.runs.schema import TableSchema
from headway.runs.store import finished_metrics, load_model, load_runs, load_weights
from headway.train.trainer import EnsembleTrainer

pytestmark = pytest.mark.slow
KILLS = int(os.environ.get("HEADWAY_FAULT_KILLS", "3"))
TALLY: collections.Counter = collections.Counter()
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "TQDM_DISABLE": "1"}


@pytest.fixture(scope="module", autouse=True)
def tally():
    yield
    print("\nfault injection: " + ", ".join(f"{key} {value}" for key, value in sorted(TALLY.items())))


def headway(*args: str) -> list[str]:
    return [sys.executable, "-m", "headway.cli.main", *args]


def run_killed(command: list[str], seconds: float, rng: np.random.Generator, label: str) -> int:
    """Start `command` up to KILLS times, SIGKILL each at a random time in [0.1, 0.6] × `seconds` (the
    uninterrupted run's duration), then let it finish; return the kills that landed before it ended."""
    landed = 0
    for _ in range(KILLS):
        proc = subprocess.Popen(command, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            _, err = proc.communicate(timeout=rng.uniform(0.1, 0.6) * seconds)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            landed += 1
            continue
        assert proc.returncode == 0, err.decode()[-2000:]
        break
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    TALLY[f"{label}: kills landed"] += landed
    return landed


def timed(command: list[str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    return time.perf_counter() - started


def without_timing(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if "seconds" in c or c.endswith("_time")])


# --- SIGKILL at random points ------------------------------------------------------------------------

def train_args(hops: str, seeds: str, steps: int) -> list[str]:
    """`headway train` of the tiny runs (two layers) over `hops` × `seeds`, a resume state every 100 steps."""
    fixed = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()
             if k not in ("hops", "layers", "steps", "checkpoint_every")]
    return ["train", "--hops", hops, "--layers", "2", "--seed", seeds, "--steps", str(steps), "--checkpoint-every",
            "100", "--no-progress", "--device", "cpu", *fixed]


TRAIN = train_args("1,2", "0,1", 1500)


def assert_same_training(first: Path, second: Path, ensembles: int) -> None:
    """Two sweep folders hold the same ensembles with equal weights at every checkpoint, metrics and finals."""
    straight, other = layout.ensemble_dirs(first), layout.ensemble_dirs(second)
    assert [d.name for d in straight] == [d.name for d in other] and len(straight) == ensembles
    for a, b in zip(straight, other, strict=True):
        assert checkpoint_steps(a) == checkpoint_steps(b)
        for step in checkpoint_steps(a):
            wa, wb = load_weights(a, step), load_weights(b, step)
            assert all(torch.equal(wa[k], wb[k]) for k in wa), (b, step)
        pd.testing.assert_frame_equal(finished_metrics(a), finished_metrics(b))
        finals = [[run["final"] for run in layout.read_json(d / layout.SUMMARY)["runs"]] for d in (a, b)]
        assert finals[0] == finals[1]


def test_killed_training_resumes_to_identical_weights_and_metrics(tmp_path):
    seconds = timed(headway(*TRAIN, "--out", str(tmp_path / "straight")))
    landed = run_killed(headway(*TRAIN, "--out", str(tmp_path / "killed")), seconds, np.random.default_rng(1), "train")
    assert_same_training(tmp_path / "straight", tmp_path / "killed", 2)
    TALLY["train: identical after resume"] += 1
    print(f"train: {landed} kill(s) landed in a {seconds:.1f} s run")


# --- SIGTERM and SIGHUP, what a scheduler sends before it preempts ---------------------------------------

SIGNALLED = train_args("1", "0,1", 800)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The signalled command run without a stop."""
    out = tmp_path_factory.mktemp("straight")
    timed(headway(*SIGNALLED, "--out", str(out)))
    return out


def wait_for(pattern: str, folder: Path, proc: subprocess.Popen, seconds: float = 300) -> None:
    """Wait until a file matching `pattern` exists under `folder` (the process still running)."""
    deadline = time.monotonic() + seconds
    while not list(folder.glob(pattern)):
        assert proc.poll() is None and time.monotonic() < deadline, "the command ended before it trained"
        time.sleep(0.02)


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_stop_signal_saves_and_the_same_command_resumes_to_identical_results(straight, signum, tmp_path):
    """Slurm and Kubernetes send SIGTERM before they preempt (a closed session SIGHUP): training saves at the
    next step, says so in one line and exits with 128 + the signal; the same command then ends where an
    uninterrupted one does, to the bit."""
    out = tmp_path / "stopped"
    proc = subprocess.Popen(headway(*SIGNALLED, "--out", str(out)), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for(f"*/{layout.RESUME}/{layout.LATEST}", out, proc)  # training has started
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    lines = err.strip().splitlines()
    assert proc.returncode == 128 + signum and "Traceback" not in err, err
    stopped = re.fullmatch(rf"headway: stopped by {signum.name} at step (\d+); run the same command again to resume",
                           lines[-1])
    assert stopped and len(lines) == 2 and 0 < int(stopped.group(1)) < 800, err
    done = subprocess.run(headway(*SIGNALLED, "--out", str(out)), env=ENV, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    assert_same_training(straight, out, 1)
    TALLY[f"{signum.name}: saved, resumed, identical"] += 1


def test_a_repeated_sigterm_never_ends_the_process_by_the_signal(tmp_path):
    """A scheduler that sends SIGTERM again 0.3 s after the first (while the state is saved, or while the process
    exits; it once ended the process by the signal): the process still ends with 143 and the stop line, and the
    state of the step it names is saved. (A repeat during the save itself: tests/test_trainer.py.)"""
    out = tmp_path / "stopped"
    proc = subprocess.Popen(headway(*SIGNALLED, "--out", str(out)), env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    wait_for(f"*/{layout.RESUME}/{layout.LATEST}", out, proc)
    proc.send_signal(signal.SIGTERM)
    time.sleep(0.3)
    with contextlib.suppress(ProcessLookupError):  # it may have ended already
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 143 and "Traceback" not in err, (proc.returncode, err)
    stopped = re.fullmatch(r"headway: stopped by SIGTERM at step (\d+)( \(saved; 1 more stop signal\(s\) while "
                           r"saving were noted\))?; run the same command again to resume", err.strip().splitlines()[-1])
    assert stopped, err
    (ensemble,) = layout.ensemble_dirs(out)
    assert layout.read_json(ensemble / layout.RESUME / layout.LATEST)["step"] == int(stopped.group(1))
    TALLY["SIGTERM twice: 143, saved"] += 1


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["Ctrl-C", "SIGTERM"])
def test_a_stop_during_start_up_ends_with_one_line(signum, tmp_path):
    """Ctrl-C or SIGTERM a second after the command starts (loading its modules, or already drawing its data):
    one line and the signal's status, no traceback."""
    # Ctrl-C as from a terminal: a shell starting the suite in the background makes children ignore SIGINT,
    # and a Python started that way never installs its KeyboardInterrupt handler.
    proc = subprocess.Popen(headway(*train_args("1", "0", 100_000), "--out", str(tmp_path / "out")), env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(1.0)
    proc.send_signal(signum)
    _, err = proc.communicate(timeout=300)
    lines = [line for line in err.strip().splitlines() if not line.endswith(f"→ {tmp_path / 'out'}")]
    assert proc.returncode == 128 + signum and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] in ("headway: aborted", f"headway: stopped by {signum.name}; everything saved so far is kept, "
                        "run the same command again to continue") or " at step " in lines[0], err


SELF_STOPPING = {
    # A command whose body is a string run by `exec`, as dataclasses build their methods while torch loads.
    "in_exec.py": "import click\n\n\n@click.command()\ndef stop():\n"
                  "    exec('import os, signal, time\\nos.kill(os.getpid(), signal.SIGINT)\\ntime.sleep(30)')\n",
    # A module whose import swallows every exception with a bare `except:` (dill's does) and fails otherwise.
    "in_import.py": "import os, signal, time\ntry:\n    os.kill(os.getpid(), signal.SIGINT)\n    time.sleep(30)\n"
                    "except:\n    raise ImportError('a module the bare except looked for')\n",
    "runner.py": "import sys\nfrom headway.cli import main as cli\n"
                 "cli.COMMANDS['stop'] = ('in_exec:stop', 'stops itself')\n"
                 "if sys.argv[1] == 'import':\n    with cli.stop_signals():\n        import in_import\n"
                 "sys.exit(cli.main(['stop']))\n",
}


@pytest.mark.parametrize("where", ["exec", "import"])
def test_a_ctrl_c_inside_exec_or_an_import_still_ends_with_its_line_and_status(where, tmp_path):
    """The two ways Ctrl-C at start-up once ended otherwise (`python -m`, as the test above runs headway): caught
    inside an `exec` of a string, CPython still ended the process by SIGINT; inside an import with a bare
    `except:`, it became an ImportError and a traceback."""
    for name, text in SELF_STOPPING.items():
        (tmp_path / name).write_text(text)
    done = subprocess.run([sys.executable, "-m", "runner", where], cwd=tmp_path, env=ENV, capture_output=True,
                          text=True, timeout=60, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert done.returncode == 130 and done.stderr.strip() == "headway: aborted", (done.returncode, done.stderr)


# --- a full disk, and pieces gone --------------------------------------------------------------------------


def test_a_full_disk_stops_with_one_line_and_the_same_command_resumes_to_identical_results(trained, tmp_path,
                                                                                          monkeypatch, capsys):
    """The 16th file written fails as on a full disk (ENOSPC, part of it written): the command ends with one
    line and status 74; run again with space, it ends with the weights and metrics of an uninterrupted run."""
    run_dir, args = trained
    writes = itertools.count(1)
    real = layout.atomic

    @contextlib.contextmanager
    def full_at_sixteenth(path: Path):
        with real(path) as tmp:
            if next(writes) == 16:  # the trainer file of the third save (steps 0, 1, 7: TINY's log-spaced)
                tmp.write_bytes(b"part of a file")
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp))
            yield tmp

    monkeypatch.setattr(layout, "atomic", full_at_sixteenth)
    out = tmp_path / "full"
    assert main([*args, "--out", str(out)]) == IO_EXIT
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("headway:")]
    assert len(err) == 1 and err[0].startswith("headway: error: No space left on device") and "kept" in err[0], err
    (ensemble,) = layout.ensemble_dirs(out)
    assert not list(ensemble.rglob("*.tmp")) and layout.read_json(ensemble / layout.RESUME / layout.LATEST)["step"] > 0
    monkeypatch.setattr(layout, "atomic", real)
    assert main([*args, "--out", str(out)]) == 0
    assert_same_training(run_dir.parent, out, 1)
    TALLY["full disk: one line, resumed, identical"] += 1


def test_a_file_size_limit_of_the_system_stops_with_one_line(trained, tmp_path):
    """A real write refused by the system (RLIMIT_FSIZE: EFBIG, as a full disk gives ENOSPC) while the first
    checkpoint is saved: status 74, one line, no traceback; with the limit gone the same command trains."""
    _, args = trained

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)

    command = headway(*args, "--out", str(tmp_path / "out"))
    stopped = subprocess.run(command, env=ENV, capture_output=True, text=True, timeout=900, preexec_fn=limited)
    lines = stopped.stderr.strip().splitlines()
    assert stopped.returncode == IO_EXIT and "Traceback" not in stopped.stderr, stopped.stderr[-2000:]
    assert lines[-1].startswith("headway: error: File too large") and len(lines) == 2, stopped.stderr
    assert subprocess.run(command, env=ENV, capture_output=True, timeout=900).returncode == 0


def test_missing_pieces_and_a_hand_made_config_are_refused_with_one_line(trained, tmp_path, capsys):
    """A resume state without its weights, a finished ensemble without its metrics, and a config.json made by
    hand (its checksum recomputed) that holds no valid runs: one line naming the file, status 2, nothing written."""
    run_dir, args = trained
    cases = []
    resumable = tmp_path / "resumable" / run_dir.name
    shutil.copytree(run_dir, resumable)
    (resumable / layout.SUMMARY).unlink()
    weights = resumable / layout.RESUME / layout.read_json(resumable / layout.RESUME / layout.LATEST)["dir"]
    (weights / "weights.safetensors").unlink()
    cases.append(([*args, "--out", str(resumable.parent)], resumable.parent,
                  f"{weights / 'weights.safetensors'} is missing"))
    finished = tmp_path / "finished" / run_dir.name
    shutil.copytree(run_dir, finished)
    (finished / layout.METRICS).unlink()
    cases.append(([*args, "--out", str(finished.parent)], finished.parent, f"{finished / layout.METRICS} is missing"))
    for n, runs in enumerate([None, "x", [{"layers": "deep"}], [{"unknown": 1}], [["layers", 2]], []]):
        made = tmp_path / f"made{n}" / "ensemble"
        layout.write_json(made / layout.CONFIG, {} if runs is None else {"runs": runs})
        cases.append((["show", str(made.parent)], made.parent, f"{made / layout.CONFIG} is damaged"))
    for argv, folder, message in cases:
        before = _digests(folder)
        assert main(argv) == 2, argv
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("headway: error")]
        assert len(err) == 1 and message in err[0], (argv, err)
        assert _digests(folder) == before
        TALLY["missing or hand-made files refused"] += 1


STUDIES = {
    "retrieval": ["study", "retrieval", "--scale", "cpu", "--layers", "1,2", "--hops", "2", "--seed", "0",
                  "--curriculum", "ic", "--conditional-hops", "none", "--steps", "600"],
    "sorting": ["study", "sorting", "--scale", "cpu", "--seed", "0", "--weight-decay", "0.005", "--mean-gap",
                "uniform", "--steps", "150", "--llc-checkpoints", "3", "--examples", "100", "--llc-burnin", "100"],
}


@pytest.mark.parametrize("study", sorted(STUDIES))
def test_killed_study_resumes_to_identical_results_and_verdicts(study, tmp_path):
    args = [*STUDIES[study], "--no-progress", "--device", "cpu"]
    seconds = timed(headway(*args, "--out", str(tmp_path / "straight")))
    landed = run_killed(headway(*args, "--out", str(tmp_path / "killed")), seconds, np.random.default_rng(2),
                        study)
    a, b = (pd.read_csv(tmp_path / name / "results.csv") for name in ("straight", "killed"))
    pd.testing.assert_frame_equal(without_timing(a), without_timing(b))
    verdicts = [json.loads((tmp_path / name / "summary.json").read_text())["verdicts"]
                for name in ("straight", "killed")]
    assert verdicts[0] == verdicts[1]
    TALLY[f"{study}: identical after resume"] += 1
    print(f"{study}: {landed} kill(s) landed in a {seconds:.1f} s run")


def test_killed_llm_eval_resumes_to_identical_answers(tmp_path):
    pytest.importorskip("transformers")
    args = ["llm-eval", "--model", "smollm2-135m", "--formulations", "F1,F5", "--max-hops", "2", "--questions", "3",
            "--scoring", "loglik", "--no-progress"]
    seconds = timed(headway(*args, "--out", str(tmp_path / "straight")))
    landed = run_killed(headway(*args, "--out", str(tmp_path / "killed")), seconds, np.random.default_rng(3),
                        "llm-eval")
    for table in ("predictions.csv", "results.csv"):
        a, b = (pd.read_csv(tmp_path / name / table) for name in ("straight", "killed"))
        pd.testing.assert_frame_equal(a, b)
    TALLY["llm-eval: identical after resume"] += 1
    print(f"llm-eval: {landed} kill(s) landed in a {seconds:.1f} s run")


# --- damaged files -------------------------------------------------------------------------------------


def test_a_table_with_object_columns_reads_back_as_written_not_as_damaged(tmp_path):
    # an analysis table concatenated from empty and non-empty parts holds ints and floats in object columns;
    # Parquet stores them as int64 and double, which is what the table's recorded shape must say
    import pyarrow as pa
    import pyarrow.parquet as pq

    parts = [pd.DataFrame(columns=["layer", "drop", "heads", "trace"]),
             pd.DataFrame({"layer": [0, 1], "drop": [0.5, float("nan")], "heads": ["L1H0", "L2H1"],
                           "trace": [[0.1, 0.2], [0.3]]})]
    frame = pd.concat(parts, ignore_index=True)
    assert frame["layer"].dtype == object
    schema = TableSchema.of({"layer": "int", "drop": "float", "heads": "str", "trace": "list<float>"})
    layout.write_table(tmp_path / "mixed.parquet", frame, schema)
    back = layout.read_table(tmp_path / "mixed.parquet", schema)
    assert back["layer"].tolist() == [0, 1] and back["heads"].tolist() == ["L1H0", "L2H1"]
    assert [list(t) for t in back["trace"]] == [[0.1, 0.2], [0.3]]  # a list column: Parquet renames its items
    # a table written before the shape held Arrow types (it held pandas dtypes) still reads
    clean = pd.DataFrame({"layer": [0, 1], "drop": [0.5, 0.25]})
    table = pa.Table.from_pandas(clean, preserve_index=False)
    old = layout._pandas_shape(clean)
    pq.write_table(table.replace_schema_metadata({**table.schema.metadata, layout.SHAPE_KEY: old}), tmp_path / "old.parquet")
    old_schema = TableSchema.of({"layer": "int", "drop": "float"})
    assert layout.read_table(tmp_path / "old.parquet", old_schema).equals(clean)
    # and one whose rows were changed behind its metadata is still refused
    fewer = pa.Table.from_pandas(clean.iloc[:1], preserve_index=False)
    pq.write_table(fewer.replace_schema_metadata({**fewer.schema.metadata, layout.SHAPE_KEY: old}), tmp_path / "cut.parquet")
    with pytest.raises(ConfigError, match="is damaged"):
        layout.read_table(tmp_path / "cut.parquet", old_schema)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny ensemble: config, summary, metrics, checkpoints and its last resume state."""
    out = tmp_path_factory.mktemp("trained")
    args = train_args("1", "0", 300)
    assert main([*args, "--out", str(out)]) == 0
    (run_dir,) = layout.ensemble_dirs(out)
    return run_dir, args


def _readers(run_dir: Path) -> dict[str, Callable]:
    """Each file of a run with the checked reader headway reads it through, given what its runs make it hold."""
    step = layout.read_json(run_dir / layout.RESUME / layout.LATEST)["step"]
    resume = layout.resume_dir(run_dir, step)
    last = layout.checkpoint_path(run_dir, checkpoint_steps(run_dir)[-1])
    runs = load_runs(run_dir)
    _, model, optim, state = EnsembleTrainer(runs, run_dir, progress=False).setup()
    weights, trainer = weights_spec(model, len(runs)), tensor_spec({**optim.state_tensors(), **state.tensors()})
    return {
        layout.CONFIG: layout.read_json, layout.SUMMARY: layout.read_json,
        layout.METRICS: lambda path: read_metrics(path, runs),
        str(last.relative_to(run_dir)): lambda path: read_tensors(path, weights, ("step",)),
        f"{layout.RESUME}/{layout.LATEST}": layout.read_json,
        str((resume / "weights.safetensors").relative_to(run_dir)): lambda path: read_tensors(path, weights),
        str((resume / "trainer.safetensors").relative_to(run_dir)): lambda path: read_tensors(path, trainer,
                                                                                             ("counters",)),
        str((resume / "metrics.parquet").relative_to(run_dir)): lambda path: read_metrics(path, runs, upto=step),
    }


def _same(a, b) -> bool:
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.columns) == list(b.columns)
    if isinstance(a, tuple):  # (tensors, metadata)
        return a[1] == b[1] and a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
    return a == b


def assert_refused_or_exact(path: Path, read: Callable, damage: str, rng: np.random.Generator, scratch: Path) -> None:
    """`path` damaged at 150 random offsets (one byte XORed with a random non-zero mask) or truncated at 40 random
    lengths, each copy read with `read`: it raises a one-line ConfigError naming the copy, or returns exactly what
    `read` returns for the intact file. Never other numbers."""
    original, expected = path.read_bytes(), read(path)
    copy = scratch / path.name
    positions = rng.choice(len(original), size=min(150 if damage == "flip" else 40, len(original)), replace=False)
    for position in positions:
        data = bytearray(original)
        if damage == "flip":
            data[position] ^= int(rng.integers(1, 256))
        else:
            data = data[:position]
        copy.write_bytes(bytes(data))
        try:
            got = read(copy)
        except ConfigError as err:
            assert str(copy) in str(err) and "\n" not in str(err) and "is damaged" in str(err)
            TALLY["damaged files refused"] += 1
            continue
        assert _same(expected, got), f"{path.name}: {damage} at byte {position} was read as other contents"
        TALLY["damaged files read exactly (the damage changed nothing read)"] += 1


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_every_damaged_run_file_is_refused_naming_it_or_read_exactly(trained, damage, tmp_path):
    """Each file headway reads back from a run, damaged byte by byte (`assert_refused_or_exact`)."""
    run_dir, _ = trained
    rng = np.random.default_rng(7)
    for name, read in _readers(run_dir).items():
        assert_refused_or_exact(run_dir / name, read, damage, rng, tmp_path)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_every_damaged_analysis_llm_and_export_file_is_refused_naming_it_or_read_exactly(damage, tmp_path):
    """The other kinds of file headway reads back: a study's analysis tensors (as the sorting study keeps its
    circuits), an llm-eval summary and the predictions whose checksum it holds, and checked bytes (the export's
    weights and config), each damaged byte by byte."""
    folder = tmp_path / "written"
    circuits = folder / "circuits.safetensors"
    written = {"ov": torch.randn(3, 2, 5, 5), "scores": torch.randn(3, 2, 5)}
    save_tensors(circuits, written, {"run_ids": "a,b,c"})
    predictions = "id,formulation,hops,acc\nF1-1-0,F1,1,True\nF1-1-1,F1,1,False\n"
    checksums = {"predictions.csv": layout.write_text(folder / "predictions.csv", predictions),
                 "model.safetensors": layout.write_bytes(folder / "model.safetensors", bytes(range(256)) * 4)}
    layout.write_json(folder / "summary.json", {"meta": {"model": "m", "seed": 0}, "checksums": checksums})
    readers = {circuits: lambda path: read_tensors(path, tensor_spec(written), ("run_ids",)),
               folder / "summary.json": layout.read_json,
               folder / "predictions.csv": lambda path: layout.read_text(path, checksums["predictions.csv"]),
               folder / "model.safetensors": lambda path: layout.read_bytes(path, checksums["model.safetensors"])}
    rng = np.random.default_rng(8)
    for path, read in readers.items():
        assert_refused_or_exact(path, read, damage, rng, tmp_path)


def _digests(folder: Path) -> dict[str, str]:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file() and p.name != layout.LOCK}


@pytest.mark.parametrize("name", ["config.json", "summary.json", "metrics.parquet", "resume"])
def test_commands_refuse_a_damaged_file_with_one_line_and_write_nothing(trained, name, tmp_path, capsys):
    run_dir, args = trained
    sweep = tmp_path / "sweep"
    shutil.copytree(run_dir, sweep / run_dir.name)
    target = sweep / run_dir.name / name
    if name == "resume":  # the trainer reads its resume state when the summary is missing
        (sweep / run_dir.name / layout.SUMMARY).unlink()
        target = next((sweep / run_dir.name / layout.RESUME).glob("step_*")) / "trainer.safetensors"
    target.write_bytes(target.read_bytes()[: len(target.read_bytes()) // 2])
    before = _digests(sweep)
    command = ["show", str(sweep)] if name in ("config.json", "summary.json") else [*args, "--out", str(sweep)]
    assert main(command) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("headway: error")]
    assert len(err) == 1 and str(target) in err[0] and "is damaged" in err[0], err
    assert _digests(sweep) == before
    TALLY["commands refused cleanly"] += 1


def test_a_damaged_checkpoint_and_a_damaged_answer_cache_are_refused(trained, tmp_path):
    run_dir, _ = trained
    copy = tmp_path / run_dir.name
    shutil.copytree(run_dir, copy)
    last = layout.checkpoint_path(copy, checkpoint_steps(copy)[-1])
    data = bytearray(last.read_bytes())
    data[-5] ^= 0x01  # one bit of one weight
    last.write_bytes(bytes(data))
    with pytest.raises(ConfigError, match=f"{last} is damaged .its checksum does not match"):
        load_model(copy)

    cache = ResponseCache(tmp_path / "cache.sqlite")
    cache.put_many({"k": -1.25})
    cache.close()
    raw = (tmp_path / "cache.sqlite").read_bytes()
    (tmp_path / "cache.sqlite").write_bytes(raw.replace(b"-1.25", b"-1.75"))
    with pytest.raises(ConfigError, match="cache.sqlite is damaged .an answer does not match its checksum"):
        ResponseCache(tmp_path / "cache.sqlite").get_many(["k"])
    (tmp_path / "cache.sqlite").write_bytes(raw[:100])
    with pytest.raises(ConfigError, match="cache.sqlite"):
        ResponseCache(tmp_path / "cache.sqlite").get_many(["k"])


def test_a_cache_row_without_a_checksum_and_bit_flips_of_the_cache_never_give_other_answers(tmp_path):
    """A row edited to a bare number (as a cache from before answers were checksummed holds) is refused, not read as
    an answer; and 150 single-bit flips anywhere in the file are each refused with one line naming it, or leave
    every answer still found exactly what was stored (a row no longer found is asked again, never misread)."""
    path = tmp_path / "cache.sqlite"
    answers = {f"key{i}": -1.25 - i for i in range(40)}
    with ResponseCache(path) as cache:
        cache.put_many(answers)
    raw = path.read_bytes()
    with contextlib.closing(sqlite3.connect(path)) as db, db:
        db.execute("UPDATE responses SET value = '-9.5' WHERE key = 'key3'")
    with pytest.raises(ConfigError, match="cache.sqlite is damaged .an answer without a checksum"), \
            ResponseCache(path) as cache:
        cache.get_many(["key3"])
    rng = np.random.default_rng(9)
    for position, bit in zip(rng.choice(len(raw), 150, replace=False), rng.integers(0, 8, 150), strict=True):
        data = bytearray(raw)
        data[position] ^= 1 << int(bit)
        path.write_bytes(bytes(data))
        try:
            with ResponseCache(path) as cache:
                found = cache.get_many(answers)
        except ConfigError as err:
            assert str(path) in str(err) and "\n" not in str(err)
            TALLY["damaged caches refused"] += 1
            continue
        assert all(answers[key] == value for key, value in found.items()), position
        TALLY["damaged caches read exactly"] += 1
