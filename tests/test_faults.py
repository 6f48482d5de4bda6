"""Faults, injected systematically: `train`, both studies and `llm-eval` SIGKILLed at random points resume
to results identical to an uninterrupted run; files damaged byte by byte are refused with one line naming
them or read exactly as written, never as other numbers.

The number of kills per command is `HEADWAY_FAULT_KILLS` (default 3); the counts of faults injected,
identical resumes and refusals are printed at the end of the module (`pytest -s tests/test_faults.py`).
"""

from __future__ import annotations

import collections
import hashlib
import json
import os
import shutil
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

from headway.cli.main import main
from headway.errors import ConfigError
from headway.llm.cache import ResponseCache
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps, load_tensors, read_tensors
from headway.runs.store import load_model

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


def test_killed_training_resumes_to_identical_weights_and_metrics(tmp_path):
    seconds = timed(headway(*TRAIN, "--out", str(tmp_path / "straight")))
    landed = run_killed(headway(*TRAIN, "--out", str(tmp_path / "killed")), seconds, np.random.default_rng(1), "train")
    straight, killed = layout.ensemble_dirs(tmp_path / "straight"), layout.ensemble_dirs(tmp_path / "killed")
    assert [d.name for d in straight] == [d.name for d in killed] and len(straight) == 2
    for a, b in zip(straight, killed, strict=True):
        assert checkpoint_steps(a) == checkpoint_steps(b)
        for step in checkpoint_steps(a):
            wa, wb = load_tensors(layout.checkpoint_path(a, step)), load_tensors(layout.checkpoint_path(b, step))
            assert all(torch.equal(wa[k], wb[k]) for k in wa), (b, step)
        pd.testing.assert_frame_equal(layout.read_table(a / layout.METRICS), layout.read_table(b / layout.METRICS))
        finals = [[run["final"] for run in layout.read_json(d / layout.SUMMARY)["runs"]] for d in (a, b)]
        assert finals[0] == finals[1]
    TALLY["train: identical after resume"] += 1
    print(f"train: {landed} kill(s) landed in a {seconds:.1f} s run")


STUDIES = {
    "retrieval": ["study", "retrieval", "--scale", "cpu", "--layers", "1,2", "--hops", "2", "--seed", "0",
                  "--curriculum", "ic", "--conditional-hops", "none", "--steps", "600"],
    "sorting": ["study", "sorting", "--scale", "cpu", "--seed", "0", "--weight-decay", "0.005", "--mean-gap",
                "uniform", "--steps", "150", "--llc-checkpoints", "3", "--examples", "100"],
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


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One finished tiny ensemble: config, summary, metrics, checkpoints and its last resume state."""
    out = tmp_path_factory.mktemp("trained")
    args = train_args("1", "0", 300)
    assert main([*args, "--out", str(out)]) == 0
    (run_dir,) = layout.ensemble_dirs(out)
    return run_dir, args


def _readers(run_dir: Path) -> dict[str, Callable]:
    resume = run_dir / layout.RESUME / layout.read_json(run_dir / layout.RESUME / layout.LATEST)["dir"]
    last = layout.checkpoint_path(run_dir, checkpoint_steps(run_dir)[-1])
    return {
        layout.CONFIG: layout.read_json, layout.SUMMARY: layout.read_json, layout.METRICS: layout.read_table,
        str(last.relative_to(run_dir)): read_tensors, f"{layout.RESUME}/{layout.LATEST}": layout.read_json,
        str((resume / "weights.safetensors").relative_to(run_dir)): read_tensors,
        str((resume / "trainer.safetensors").relative_to(run_dir)): read_tensors,
        str((resume / "metrics.parquet").relative_to(run_dir)): layout.read_table,
    }


def _same(a, b) -> bool:
    if isinstance(a, pd.DataFrame):
        return a.equals(b) and list(a.columns) == list(b.columns)
    if isinstance(a, tuple):  # (tensors, metadata)
        return a[1] == b[1] and a[0].keys() == b[0].keys() and all(torch.equal(a[0][k], b[0][k]) for k in a[0])
    return a == b


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_every_damaged_run_file_is_refused_naming_it_or_read_exactly(trained, damage, tmp_path):
    """Each file headway reads back, damaged at 150 random offsets (one byte XORed with a random
    non-zero mask) or truncated at 40 random lengths: the reader raises a ConfigError naming the file,
    or returns exactly what was written. Never other numbers."""
    run_dir, _ = trained
    rng = np.random.default_rng(7)
    for name, read in _readers(run_dir).items():
        original = (run_dir / name).read_bytes()
        expected = read(run_dir / name)
        copy = tmp_path / Path(name).name
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
            assert _same(expected, got), f"{name}: {damage} at byte {position} was read as other contents"
            TALLY["damaged files read exactly (the damage changed nothing read)"] += 1


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
