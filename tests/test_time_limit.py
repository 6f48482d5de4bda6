"""`--time-limit`: training and studies stop at a deadline with everything finished kept, exit 75, and the
same command continues to the numbers of an uninterrupted run."""

from __future__ import annotations

import json
import pickle
import shutil
import time
from types import SimpleNamespace

import pandas as pd
import pytest
from conftest import TINY, tiny_run
from test_study_sorting import small_plan

import headway.errors
import headway.train.trainer
from headway.cli.main import TIME_LIMIT_EXIT, main
from headway.errors import ConfigError, JobsFailed, TimeLimitReached
from headway.execution.ray_cluster import raise_failures
from headway.runs import layout
from headway.runs.store import finished_metrics
from headway.studies.analysis_time import LEGS
from headway.studies.sorting.study import SortingStudy
from headway.train.sweep import train_runs

FAR = 1e18  # a time.time() past any deadline


def clock(calls: int) -> SimpleNamespace:
    """A stand-in for the `time` module whose time() is 0 for `calls` calls and then past every deadline."""
    left = [calls]

    def now() -> float:
        left[0] -= 1
        return 0.0 if left[0] >= 0 else FAR

    return SimpleNamespace(time=now, perf_counter=time.perf_counter)


def train_args(out) -> list[str]:
    settings = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k != "layers"]
    return ["train", "--out", str(out), "--layers", "1,2", "--seed", "0,1", *settings, "--no-progress",
            "--device", "cpu"]


def without_timing(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if "seconds" in c or c.endswith("_time")])


def finals(out) -> list:
    return [[run["final"] for run in layout.read_json(d / layout.SUMMARY)["runs"]] for d in layout.ensemble_dirs(out)]


def test_train_stopped_by_the_time_limit_exits_75_and_the_same_command_finishes_identically(tmp_path, capsys,
                                                                                            monkeypatch):
    assert main(train_args(tmp_path / "straight")) == 0
    monkeypatch.setattr(headway.train.trainer, "time", clock(7))  # the limit runs out at step 8 of the first ensemble
    assert main([*train_args(tmp_path / "pieces"), "--time-limit", "60"]) == TIME_LIMIT_EXIT
    err = capsys.readouterr().err
    assert "time limit reached at step 8; run the same command again to continue" in err
    first, *rest = layout.ensemble_dirs(tmp_path / "pieces")
    assert layout.read_json(first / layout.RESUME / layout.LATEST)["step"] == 8 and not rest  # the second not started
    monkeypatch.undo()
    assert main([*train_args(tmp_path / "pieces"), "--time-limit", "60"]) == 0
    straight, pieces = layout.ensemble_dirs(tmp_path / "straight"), layout.ensemble_dirs(tmp_path / "pieces")
    assert [d.name for d in straight] == [d.name for d in pieces] and len(straight) == 2
    for a, b in zip(straight, pieces, strict=True):
        pd.testing.assert_frame_equal(without_timing(finished_metrics(a)), without_timing(finished_metrics(b)))
    assert finals(tmp_path / "straight") == finals(tmp_path / "pieces")


def test_no_ensemble_starts_once_the_deadline_has_passed(tmp_path, monkeypatch):
    runs = [tiny_run(layers=layers, seed=0) for layers in (1, 2)]
    monkeypatch.setattr(headway.errors, "time", clock(1))  # the first ensemble starts, the second finds it passed
    with pytest.raises(TimeLimitReached, match="time limit reached before training "):
        train_runs(runs, tmp_path, device="cpu", progress=False, deadline=time.time() + 3600)
    done, *rest = layout.ensemble_dirs(tmp_path)
    assert (done / layout.SUMMARY).is_file() and not rest


@pytest.mark.parametrize("text", ["0", "-2", "soon", "nan"])
def test_a_bad_time_limit_is_refused_by_name(tmp_path, capsys, text):
    assert main([*train_args(tmp_path / "runs"), f"--time-limit={text}"]) == 2
    assert f"--time-limit got {text!r}" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()
    assert main(["study", "sorting", "--out", str(tmp_path / "s"), f"--time-limit={text}", "--dry-run"]) == 2


def comparable(out) -> dict:
    summary = json.loads((out / "summary.json").read_text())
    return {k: v for k, v in summary.items() if k not in ("seconds", "hardware")}


@pytest.mark.slow
def test_a_study_stopped_during_its_analysis_continues_to_the_same_summary(tmp_path, monkeypatch):
    plan = small_plan(data=("uniform",), weight_decays=(0.005,))
    SortingStudy(plan, tmp_path / "straight", device="cpu", progress=False).run()
    shutil.copytree(tmp_path / "straight" / "runs", tmp_path / "pieces" / "runs")  # trained: the analysis is tested
    pieces = tmp_path / "pieces"
    with pytest.raises(TimeLimitReached, match="before analysing"):
        SortingStudy(plan, pieces, device="cpu", progress=False, deadline=time.time() - 1).run()
    assert not (pieces / "analysis").exists()
    monkeypatch.setattr(headway.errors, "time", clock(3))  # the ensemble and two trace checkpoints, then the limit
    with pytest.raises(TimeLimitReached, match=r"in the LLC trace of .* \(2 of \d+ checkpoints done\)"):
        SortingStudy(plan, pieces, device="cpu", progress=False, deadline=time.time() + 3600).run()
    folder = next((pieces / "analysis").iterdir())
    assert len(list((folder / "llc_trace").glob("step_*.parquet"))) == 2 and not (folder / "done.json").exists()
    stopped = layout.read_json(folder / LEGS)["started"]  # the stopped leg, counted to its newest saved part
    first_leg = max(p.stat().st_mtime for p in folder.rglob("*") if p.is_file() and p.name != LEGS) - stopped
    monkeypatch.undo()
    started = time.perf_counter()
    SortingStudy(plan, pieces, device="cpu", progress=False, deadline=time.time() + 3600).run()
    last_leg = time.perf_counter() - started
    assert not (folder / LEGS).exists() and first_leg > 0
    assert first_leg <= layout.read_json(folder / "done.json")["seconds"] <= first_leg + last_leg + 0.01
    assert comparable(pieces) == comparable(tmp_path / "straight")
    results = [pd.read_csv(out / "results.csv") for out in (tmp_path / "straight", pieces)]
    pd.testing.assert_frame_equal(without_timing(results[0]), without_timing(results[1]))


def test_a_time_limit_on_a_cluster_is_run_again_not_a_failure():
    stopped = pickle.loads(pickle.dumps(TimeLimitReached(12)))  # how a Ray task's error reaches the driver
    assert stopped.step == 12 and "at step 12; run the same command again" in str(stopped)
    with pytest.raises(TimeLimitReached, match=r"with 2 ensemble\(s\) unfinished \(a, b\); run the same command again"):
        raise_failures({"b": stopped, "a": TimeLimitReached(where="before analysing a")})
    with pytest.raises(JobsFailed, match="c: boom.*1 more stopped at the time limit"):
        raise_failures({"a": stopped, "c": RuntimeError("boom")})
    with pytest.raises(ConfigError, match="c: bad"):
        raise_failures({"a": stopped, "c": ConfigError("bad")})
