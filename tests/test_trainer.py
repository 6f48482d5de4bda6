"""The ensemble trainer: members train as they would alone, divergence is contained, runs resume
exactly after a real SIGKILL, and the run store reads it all back."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pandas as pd
import pytest
import torch
from conftest import TINY, tiny_run

from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps
from headway.runs.store import load_metrics, load_model, load_runs, load_summary, load_weights
from headway.train.sweep import train_runs
from headway.train.trainer import EnsembleTrainer, checkpoint_schedule


def final_weights(run_dir):
    return load_weights(run_dir)


def test_ensemble_members_end_where_they_would_alone(tmp_path):
    runs = [tiny_run(seed=s, lr=lr, weight_decay=wd, order=order)
            for s, lr, wd, order in [(0, 1e-3, 0.1, "shuffled"), (1, 3e-3, 0.0, "chain"),
                                     (2, 1e-3, 0.5, "shuffled"), (3, 2e-3, 0.1, "chain")]]
    EnsembleTrainer(runs, tmp_path / "together", progress=False).fit()
    together = final_weights(tmp_path / "together")
    metrics = pd.read_parquet(tmp_path / "together" / layout.METRICS)
    for e, run in enumerate(runs):
        alone_dir = tmp_path / f"alone{e}"
        alone_metrics = EnsembleTrainer([run], alone_dir, progress=False).fit()
        alone = final_weights(alone_dir)
        for name, tensor in alone.items():
            assert torch.allclose(together[name][e], tensor[0], atol=1e-5, rtol=1e-4), name
        mine = metrics[metrics.instance == e].reset_index(drop=True)
        assert mine.val_loss.to_numpy() == pytest.approx(alone_metrics.val_loss.to_numpy(), rel=1e-4)
        assert mine.val_accuracy.to_numpy() == pytest.approx(alone_metrics.val_accuracy.to_numpy(), abs=1e-9)
    # the members really differ from each other
    assert not torch.allclose(together["unembed.W_U"][0], together["unembed.W_U"][2])


def test_diverging_instance_is_frozen_and_the_others_go_on(tmp_path):
    good, bad = tiny_run(seed=0), tiny_run(seed=1, lr=1e30)
    metrics = EnsembleTrainer([good, bad], tmp_path / "pair", progress=False).fit()
    alone = EnsembleTrainer([good], tmp_path / "alone", progress=False).fit()
    last = metrics[metrics.step == TINY["steps"]].set_index("instance")
    assert bool(last.loc[1, "diverged"]) and not bool(last.loc[0, "diverged"])
    summary = layout.read_json(tmp_path / "pair" / layout.SUMMARY)
    assert summary["runs"][1]["final"]["diverged_step"] >= 1
    assert summary["runs"][0]["final"]["diverged_step"] is None
    assert last.loc[0, "val_loss"] == pytest.approx(alone.val_loss.iloc[-1], rel=1e-4)


def test_metrics_rows_checkpoints_and_store(tmp_path):
    runs = [tiny_run(seed=s, hops=2, vocab=12, chains=2) for s in (0, 1)] + [tiny_run(seed=0, layers=2)]
    df = train_runs(runs, tmp_path, progress=False)
    assert len({*df.ensemble}) == 2  # 1-layer hops-2 pair packed together, the 2-layer run alone
    per_run = df.groupby("run_id").step.apply(list)
    assert all(steps == [0, 20, 40, 60] for steps in per_run)
    assert {"train_loss", "val_loss", "val_accuracy", "val_acc_hop1", "val_acc_hop2", "layers", "hops", "seed"} <= set(df)
    pair_dir = next(d for d in tmp_path.iterdir() if d.is_dir() and len(load_runs(d)) == 2)
    assert checkpoint_steps(pair_dir) == checkpoint_schedule(60, 30, 4)
    model = load_model(pair_dir, instances=1, step=30)
    assert model.n_instances == 1
    full = load_weights(pair_dir, 30)
    assert torch.equal(model.blocks[0].attn.W_V[0], full["blocks.0.attn.W_V"][1])
    summary = load_summary(tmp_path)
    assert len(summary) == 3 and all(s["complete"] and s["final"]["step"] == 60 for s in summary)
    assert len(load_metrics(pair_dir)) == 8


def test_checkpoint_schedule_is_regular_plus_log_spaced():
    steps = checkpoint_schedule(10_000, 1000, 10)
    assert steps[0] == 0 and steps[-1] == 10_000
    assert {1, 1000, 5000} <= set(steps)
    assert len([s for s in steps if s < 100]) >= 4  # dense early, for emergence analysis


def _train_cmd(out):
    args = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k not in ("steps", "checkpoint_every")]
    return [sys.executable, "-m", "headway.cli.main", "train", "--out", str(out), "--steps", "400",
            "--checkpoint-every", "40", "--no-progress", *args]


def test_sigkilled_run_resumes_to_identical_weights_and_metrics(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(_train_cmd(tmp_path / "straight"), check=True, env=env, capture_output=True)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_train_cmd(killed), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    reached = 0
    while time.time() < deadline and proc.poll() is None:
        pointers = list(killed.glob(f"*/{layout.RESUME}/{layout.LATEST}"))
        if pointers:
            try:
                reached = json.loads(pointers[0].read_text())["step"]
            except (ValueError, OSError):
                reached = 0
            if reached >= 120:
                break
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert 120 <= reached < 400, "the run must be killed mid-way"
    assert not list(killed.glob(f"*/{layout.SUMMARY}"))

    subprocess.run(_train_cmd(killed), check=True, env=env, capture_output=True)
    (a,), (b,) = layout.ensemble_dirs(tmp_path / "straight"), layout.ensemble_dirs(killed)
    assert checkpoint_steps(a) == checkpoint_steps(b)
    for step in checkpoint_steps(a):
        wa, wb = load_weights(a, step), load_weights(b, step)
        assert all(torch.equal(wa[k], wb[k]) for k in wa), step
    pd.testing.assert_frame_equal(pd.read_parquet(a / layout.METRICS), pd.read_parquet(b / layout.METRICS))


def test_a_second_process_on_an_ensemble_being_trained_is_refused_naming_the_first(tmp_path, capsys):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen(_train_cmd(tmp_path), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 120
        while not list(tmp_path.glob(f"*/{layout.RESUME}/{layout.LATEST}")) and time.time() < deadline:
            time.sleep(0.02)
        (run_dir,) = layout.ensemble_dirs(tmp_path)
        metrics_before = (run_dir / layout.METRICS).stat().st_mtime_ns if (run_dir / layout.METRICS).exists() else 0
        from headway.cli.main import main
        assert main(_train_cmd(tmp_path)[3:]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("headway:")]
        assert len(err) == 1 and f"is being trained by pid {first.pid} on " in err[0]
        assert first.poll() is None, "the first process must still be training when the second is refused"
        assert not (run_dir / layout.SUMMARY).exists()
    finally:
        first.wait(timeout=300)
    assert first.returncode == 0 and (run_dir / layout.METRICS).stat().st_mtime_ns >= metrics_before
    assert main(_train_cmd(tmp_path)[3:]) == 0  # the lock went with its process


def test_gradient_clipping_is_per_instance(tmp_path):
    runs = [tiny_run(seed=s, grad_clip=1e-3) for s in (0, 1)]
    trainer = EnsembleTrainer(runs, tmp_path, progress=False)
    data, model, optim, state = trainer.setup()
    trainer.train_step(model, data, optim, state, 0)
    clipped = model.flat.grad.norm(dim=1)
    assert torch.all(state.grad_norm > 1e-2)  # the norms before clipping
    assert torch.allclose(clipped, torch.full((2,), 1e-3), rtol=1e-3)


def test_ctrl_c_saves_the_state_and_the_same_command_resumes(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    subprocess.run(_train_cmd(tmp_path / "straight"), check=True, env=env, capture_output=True)
    stopped = tmp_path / "stopped"
    proc = subprocess.Popen(_train_cmd(stopped), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and not list(stopped.glob(f"*/{layout.CHECKPOINTS}/step_0000080.safetensors")):
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "interrupted at step" in err and "Traceback" not in err
    (run_dir,) = layout.ensemble_dirs(stopped)
    saved = layout.read_json(run_dir / layout.RESUME / layout.LATEST)["step"]
    assert 80 <= saved < 400 and f"step {saved}" in err
    subprocess.run(_train_cmd(stopped), check=True, env=env, capture_output=True)
    (straight,) = layout.ensemble_dirs(tmp_path / "straight")
    assert checkpoint_steps(straight) == checkpoint_steps(run_dir)
    pd.testing.assert_frame_equal(pd.read_parquet(straight / layout.METRICS), pd.read_parquet(run_dir / layout.METRICS))
    assert all(torch.equal(a, b) for a, b in zip(final_weights(straight).values(), final_weights(run_dir).values()))


def test_a_run_killed_before_its_first_update_resumes_without_logging_step_zero_twice(tmp_path, monkeypatch):
    run = tiny_run(steps=4, eval_every=2)
    trainer = EnsembleTrainer([run], tmp_path, progress=False)

    def killed(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(trainer, "train_step", killed)
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()  # step 0 was logged and its state saved; no update happened
    metrics = EnsembleTrainer([run], tmp_path, progress=False).fit()
    assert metrics.step.tolist() == [0, 2, 4]


def test_a_stop_signal_repeated_while_saving_is_noted_and_the_save_completes(tmp_path):
    """SIGTERM during step 3, then again while the stop's state is being saved (as a scheduler repeats it): the
    second is counted, not obeyed; the state of the step the first stopped at is saved whole, and training ends
    with Interrupted (status 143) naming both. The same run then resumes to the end."""
    from headway.errors import Interrupted

    run = tiny_run(steps=20, eval_every=5)
    trainer = EnsembleTrainer([run], tmp_path, progress=False)
    step, save = trainer.train_step, trainer._save

    def stopped_at_three(model, data, optim, state, at):
        step(model, data, optim, state, at)
        if at == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    def repeated_while_saving(model, optim, state, at, rows, keep):
        if trainer._stop_signal is not None:
            os.kill(os.getpid(), signal.SIGTERM)
        save(model, optim, state, at, rows, keep)

    trainer.train_step, trainer._save = stopped_at_three, repeated_while_saving
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted) as stop:
        trainer.fit()
    assert (stop.value.step, stop.value.signum, stop.value.repeats, stop.value.status) == (3, signal.SIGTERM, 1, 143)
    assert "at step 3 (saved; 1 more stop signal(s) while saving were noted)" in str(stop.value)
    assert layout.read_json(tmp_path / layout.RESUME / layout.LATEST)["step"] == 3
    assert signal.getsignal(signal.SIGTERM) == before  # the trainer's handler is gone
    metrics = EnsembleTrainer([run], tmp_path, progress=False).fit()
    assert metrics.step.tolist() == [0, 5, 10, 15, 20]
