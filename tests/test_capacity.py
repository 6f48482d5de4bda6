"""Ensembles sized to memory: the CPU measurement, splitting a grid into ensembles that fit (same
numbers, resumption unchanged) and LLC instance groups that give the numbers of one batch."""

from __future__ import annotations

import time

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from conftest import tiny_run

from headway.analysis.llc import SGLDSettings, anchor_loss, estimate_llc, instance_groups, sampling_footprint
from headway.cli.main import main
from headway.errors import ConfigError, TimeLimitReached
from headway.execution.memory import LiveTensorBytes, fit_footprint, peak_bytes
from headway.execution.sizes import balanced_sizes
from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.runs.config import group_runs
from headway.runs.cost import training_memory
from headway.train.capacity import ensemble_capacity, ensemble_limit, one_step, probe_runs, training_footprint
from headway.train.sweep import train_runs, training_jobs
from headway.train.trainer import EnsembleTrainer


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


# --- measuring --------------------------------------------------------------------------------


def test_live_tensor_bytes_counts_storages_until_freed():
    with LiveTensorBytes() as counter:
        a = torch.zeros(1000)  # 4000 bytes
        b = a + 1
        view = b[:10]  # no new storage
        del a
        c = view * 2  # 40 bytes; a is gone by now
    assert counter.peak == 8000
    assert counter.current == 4000 + 40
    assert c.shape == (10,)


def test_cpu_measurement_is_linear_in_e_and_near_the_analytic_estimate():
    run = tiny_run()
    peaks = {e: peak_bytes(lambda e=e: one_step(probe_runs(run, e, True), torch.device("cpu"), "fp32"), "cpu")
             for e in (1, 2, 4)}
    slope = peaks[2] - peaks[1]
    assert slope > 0
    assert peaks[4] - peaks[2] == pytest.approx(2 * slope, rel=0.05)
    analytic = training_memory(probe_runs(run, 2, True)) - training_memory(probe_runs(run, 1, True))
    assert analytic / 4 < slope < analytic * 2
    footprint = training_footprint(run, "cpu")
    assert footprint.per_item == pytest.approx(slope, rel=0.05)
    assert training_footprint(run, "cpu") is footprint  # cached in-process
    assert ensemble_capacity([run], "cpu", budget=footprint.predict(3)) == 3
    assert ensemble_capacity([run], "cpu", budget=0) == 1


def test_footprint_fit_and_balanced_sizes():
    assert fit_footprint([1, 2], [150, 250]) == fit_footprint([1, 2, 4], [150, 250, 450])
    assert fit_footprint([1, 2], [150, 250]).capacity(1000) == 9
    assert balanced_sizes(5, 2) == [2, 2, 1] and balanced_sizes(7, 3) == [3, 2, 2] and balanced_sizes(4, 9) == [4]
    with pytest.raises(ConfigError, match="two or more sizes"):
        fit_footprint([2, 2], [1, 2])


# --- splitting a grid -------------------------------------------------------------------------


def grid(steps: int = 40) -> list:
    return [tiny_run(seed=s, steps=steps, eval_every=20, checkpoint_every=20) for s in range(5)]


def test_a_grid_split_by_max_ensemble_trains_the_same_numbers(tmp_path):
    runs = grid()
    split = train_runs(runs, tmp_path / "split", device="cpu", progress=False, max_ensemble=2)
    whole = train_runs(runs, tmp_path / "whole", device="cpu", progress=False)
    assert sorted(split.groupby("ensemble").run_id.nunique()) == [1, 2, 2]
    assert whole.ensemble.nunique() == 1
    assert sorted(split.ensemble.unique()) == sorted(group_runs(runs, lambda members: 2))
    assert whole.ensemble.iloc[0] in group_runs(runs, lambda members: 5)  # a group that fits keeps its name
    key = ["run_id", "step"]
    a, b = split.sort_values(key).reset_index(drop=True), whole.sort_values(key).reset_index(drop=True)
    assert (a[key] == b[key]).all().all()
    for column in ("train_loss", "val_loss", "val_accuracy", "grad_norm"):
        np.testing.assert_allclose(a[column], b[column], rtol=1e-4, atol=1e-6, err_msg=column)


def test_existing_ensembles_resume_as_they_are(tmp_path):
    runs = grid(steps=60)
    [(name, members)] = group_runs(runs).items()
    with pytest.raises(TimeLimitReached):
        EnsembleTrainer(members, tmp_path / name, progress=False, deadline=time.time()).fit()
    [job] = training_jobs(runs, tmp_path, "cpu", False, max_ensemble=2)
    assert job.name == name and len(job.args[0]) == 5
    more = runs + [tiny_run(seed=s, steps=60, eval_every=20, checkpoint_every=20) for s in (5, 6, 7)]
    jobs = training_jobs(more, tmp_path, "cpu", False, max_ensemble=2)
    assert sorted(len(job.args[0]) for job in jobs) == [1, 2, 5]  # the new three split, the old five kept


def test_capacity_is_measured_only_for_a_group_that_might_not_fit():
    runs = grid()
    assert ensemble_limit("cpu")(runs) is None  # tiny: plainly fits, nothing measured
    assert ensemble_limit("cpu", max_ensemble=3)(runs) == 3
    assert ensemble_limit(None)(runs) is None


@pytest.mark.parametrize("bad", [0, -1])
def test_bad_max_ensemble_is_refused_naming_it(tmp_path, bad, capsys):
    with pytest.raises(ConfigError, match=f"max_ensemble = {bad} is invalid"):
        train_runs(grid(), tmp_path, device="cpu", progress=False, max_ensemble=bad)
    code = main(["train", "--scale", "cpu", "--steps", "2", "--max-ensemble", str(bad), "--out", str(tmp_path / "x")])
    assert code == 2 and f"max_ensemble = {bad} is invalid" in capsys.readouterr().err
    assert not (tmp_path / "x").exists()


# --- LLC in instance groups -------------------------------------------------------------------


def ce_last(model, tokens, targets):
    logits = model(tokens)
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten(), reduction="none").view(targets.shape).mean(1)


def five_instances():
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 6, (5, 256, 5), generator=g)
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8, d_mlp=16), 6, 5, 6, range(5))
    return model, tokens, tokens[..., 0].clone()


@pytest.mark.parametrize("max_rows", [3, 7])
def test_llc_in_instance_groups_equals_one_batch(max_rows):
    model, tokens, targets = five_instances()
    settings = SGLDSettings(chains=3, draws=20, burnin=0, batch_size=32, lr=1e-3, init_loss_batches=2)
    whole = estimate_llc(model, ce_last, tokens, targets, settings)
    split = estimate_llc(model, ce_last, tokens, targets, settings, max_rows=max_rows)
    for field in ("llc_per_chain", "loss_trace", "init_loss", "init_loss_se", "acceptance", "llc_mean", "llc_se"):
        np.testing.assert_array_equal(getattr(split, field), getattr(whole, field), err_msg=field)
    assert split.warnings == whole.warnings
    np.testing.assert_array_equal(anchor_loss(model, ce_last, tokens, targets, settings, max_rows=max_rows)[0],
                                  whole.init_loss)


def test_llc_groups_and_their_measurement():
    model, tokens, targets = five_instances()
    settings = SGLDSettings(chains=3, draws=4, burnin=0, batch_size=32)
    assert instance_groups(model, ce_last, tokens, targets, settings, 7) == [(0, 2), (2, 4), (4, 5)]
    assert instance_groups(model, ce_last, tokens, targets, settings, None) == [(0, 5)]  # plainly fits
    with pytest.raises(ConfigError, match="max_rows = 2 is fewer than the 3 chains"):
        estimate_llc(model, ce_last, tokens, targets, settings, max_rows=2)
    with pytest.raises(ConfigError, match="max_rows = 0 is invalid"):
        estimate_llc(model, ce_last, tokens, targets, settings, max_rows=0)
    footprint = sampling_footprint(model, ce_last, tokens, targets, settings)
    assert footprint.per_item > 3 * 4 * model.flat.data.shape[1]  # at least the chains' weights


def test_a_study_takes_max_ensemble(tmp_path, capsys):
    from headway.studies.registry import study_class

    cls = study_class("sorting")
    with pytest.raises(ConfigError, match="max_ensemble = 0 is invalid"):
        cls(cls.plan_for("cpu"), tmp_path, max_ensemble=0)
    assert cls(cls.plan_for("cpu"), tmp_path, max_ensemble=4).max_ensemble == 4
    assert main(["study", "sorting", "--out", str(tmp_path / "s"), "--dry-run", "--max-ensemble", "5"]) == 0
    runs = len(cls.plan_for("cpu").runs())
    assert f"{runs} runs in {-(-runs // 5)} ensemble(s)" in capsys.readouterr().out
