"""Progress off a terminal (a log, `make demo | tee`, CI): plain lines at intervals, not a bar that prints nothing."""

from __future__ import annotations

import pytest
from conftest import tiny_run

from headway import progress as progress_module
from headway.cli.main import main
from headway.progress import Lines, progress
from headway.train.sweep import train_runs


class Clock:
    """time.monotonic under the test's control."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_lines_come_at_intervals_with_time_left(monkeypatch, capsys):
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    bar = Lines(100, "L2-S9-abc", "step", interval=30)
    for _ in range(10):  # ten steps in 20 s: under the interval, nothing yet
        clock.now += 2
        bar.update(1)
    assert capsys.readouterr().err == ""
    clock.now += 10
    bar.set_postfix(loss="0.123")
    bar.update(15)
    # the rate is measured from the end of the first step on: 24 steps in 28 s, so 75 steps take 87.5 s more
    assert capsys.readouterr().err == "L2-S9-abc: 25/100 steps (25%), 30 s elapsed, about 1 min 28 s left; loss 0.123\n"
    clock.now += 5
    bar.update(75)
    bar.close()  # lines were printed, so the last one says it is done
    assert capsys.readouterr().err.startswith("L2-S9-abc: 100/100 steps (100%), 35 s elapsed;")


def test_a_slow_first_step_does_not_inflate_the_time_left(monkeypatch, capsys):
    """A compiled step's first call carries the compilation (44 s on the CPU); the time left is projected from the
    steps after it, not from an average that includes it."""
    clock = Clock()
    monkeypatch.setattr(progress_module.time, "monotonic", clock)
    bar = Lines(3000, "L3-S37-abc", "step", interval=30)
    clock.now += 43  # the first step, compiling
    bar.update(1)
    assert "left" not in capsys.readouterr().err  # one step says nothing of the rate
    clock.now += 30
    bar.update(150)  # then 5 steps a second
    assert capsys.readouterr().err == "L3-S37-abc: 151/3000 steps (5%), 1 min 13 s elapsed, about 9 min 30 s left\n"


def test_a_short_job_prints_nothing_and_a_terminal_gets_tqdm(capsys):
    with progress(5, "quick", "step") as bar:  # stderr is captured: not a terminal
        assert isinstance(bar, Lines)
        bar.update(5)
    assert capsys.readouterr().err == ""
    assert not isinstance(progress(5, "off", enabled=False), Lines)


@pytest.mark.usefixtures("one_thread")
def test_training_and_data_prompts_report_progress_in_a_log(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(progress_module, "INTERVAL_S", 0.0)  # a line at every update
    train_runs([tiny_run(steps=4, eval_every=2, checkpoint_every=2)], tmp_path / "runs", device="cpu", progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert any(": 1/4 steps (25%)" in line for line in lines) and any(": 4/4 steps (100%)" in line for line in lines)
    before_any_step = next(line for line in lines if ": 1/4 steps" in line)  # shows the step-0 evaluation
    assert "nan" not in before_any_step and "val_acc" in before_any_step, before_any_step
    assert any("; loss " in line for line in lines if ": 4/4 steps" in line)
    assert main(["data", "prompts", "--formulations", "F1", "--max-hops", "3", "--questions", "2",
                 "--out", str(tmp_path / "prompts")]) == 0
    err = capsys.readouterr().err
    assert "drawing questions: 1/3 cells (33%)" in err and "drawing questions: 3/3 cells (100%)" in err
