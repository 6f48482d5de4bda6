"""`headway llc calibrate`: the SGLD calibration sweep on a trained run's own checkpoints, pool and loss, its table,
CSV and chosen setting, and its one-line refusals of bad options before any run is loaded."""

from __future__ import annotations

import pandas as pd
import pytest

from headway.cli.main import main
from headway.train.sweep import train_runs

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them
# The cheapest sampling that still gives a table: one chain, five draws after five burn-in steps at ε 1e-3.
CHEAP = ["--chains", "1", "--draws", "5", "--burnin", "5", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A folder above one tiny ensemble of two seeds, each with checkpoints at steps 0, 10 and 20."""
    from conftest import tiny_run

    out = tmp_path_factory.mktemp("calibrate")
    runs = [tiny_run(seed=seed, steps=20, train_size=256, val_size=64, eval_every=10, checkpoint_every=10,
                     log_checkpoints=0) for seed in (0, 1)]
    train_runs(runs, out, device="cpu", progress=False)
    return out


def test_sweeps_each_instance_at_the_named_checkpoints_and_writes_the_table(trained, tmp_path, capsys):
    csv = tmp_path / "table.csv"
    status = main(["llc", "calibrate", str(trained), *CHEAP, "--steps", "first,last", "--lr", "2e-3,1e-3",
                   "--batch-size", "32", "--out", str(csv)])
    printed, err = capsys.readouterr()
    assert status == 0, err
    table = pd.read_csv(csv)
    assert len(table) == 2 * 2 * 2  # steps × step sizes × instances
    assert sorted(table.step.unique()) == [0, 20] and sorted(table.instance.unique()) == [0, 1]
    assert sorted(table.seed.unique()) == [0, 1] and table.run_id.nunique() == 2
    assert set(table.draws) == {5, 10}  # ε 1e-3 samples twice the steps of the reference ε 2e-3
    assert table.set_index(["lr", "step", "instance"]).lr_change.loc[1e-3].isna().all()  # no ε/2 in the grid
    assert not table.stable.any()  # no batch neighbour: nothing can be judged stable
    assert "llc_mean" in printed and printed.strip().splitlines()[-1].startswith("no setting is stable")


def test_the_preconditioned_sampler_is_a_base_option(trained, tmp_path, capsys):
    tables = {}
    for preconditioner in ("none", "diagonal"):
        csv = tmp_path / f"{preconditioner}.csv"
        status = main(["llc", "calibrate", str(trained), *CHEAP, "--lr", "0.1", "--batch-size", "32",
                       "--preconditioner", preconditioner, "--out", str(csv)])
        assert status == 0, capsys.readouterr().err
        tables[preconditioner] = pd.read_csv(csv)
    # ε 0.1 in weight units throws plain SGLD's chains out: how far within five draws depends on the CPU's float
    # rounding (λ̂ ~1e26 on one machine; on another one chain went non-finite and the other read 54 with a MALA
    # acceptance of 1e-22), so each plain row is non-finite, huge or all but never accepted; as a tenth of each
    # coordinate's stiffness, the preconditioned chains stay near w*
    plain = tables["none"]
    assert (plain.llc_mean.isna() | (plain.llc_mean.abs() > 1e6) | (plain.acceptance < 1e-6)).all()
    assert tables["diagonal"].llc_mean.notna().all() and tables["diagonal"].llc_mean.abs().max() < 1e3


def test_a_preconditioned_sweep_is_not_timed_against_a_plain_plans_step(trained, tmp_path, capsys):
    """The modular plan's ε 1e-4 is in weight units; a preconditioned ε 0.1 must not run 1e-3 × its steps."""
    csv = tmp_path / "table.csv"
    status = main(["llc", "calibrate", str(trained), *CHEAP, "--study", "modular", "--preconditioner", "diagonal",
                   "--lr", "0.1,0.05", "--batch-size", "32", "--out", str(csv)])
    assert status == 0, capsys.readouterr().err
    table = pd.read_csv(csv)
    assert set(zip(table.lr, table.draws)) == {(0.1, 5), (0.05, 10)}  # the largest ε is the reference


@pytest.mark.parametrize(("args", "fragment"), [
    (["--lr", "-1e-3"], "lr = -0.001 is invalid"),
    (["--lr", "1e-3,1e-3"], "--lr lists 0.001 twice"),
    (["--lr", ""], "--lr got ''; expected a number"),
    (["--batch-size", "16,none"], "--batch-size got 'none'; give whole numbers"),
    (["--batch-size", "0"], "batch_size = 0 is invalid"),
    (["--chains", "1e9"], "--chains 1000000000 is too many"),
    (["--lr", "1e-3,1e-12"], "steps a chain to match the reference"),
    (["--steps", "middle,x"], "--steps got 'x'"),
    (["--steps", "7"], "--steps 7 has no checkpoint"),
    (["--instances", "5"], "--instances 5 is not in"),
    (["--batch-size", "32,512"], "--batch-size 512 is larger than the training pool of 256 examples"),
    (["--scale", "cpu"], "--scale cpu needs --study"),
    (["--study", "retrieval"], "--study retrieval has no SGLD settings; use one of modular, sorting"),
    (["--preconditioner", "adam"], "'adam' is not one of 'none', 'diagonal'"),
])
def test_bad_options_exit_2_with_one_line(trained, capsys, args, fragment):
    status = main(["llc", "calibrate", str(trained), *CHEAP, *args])
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and fragment in err[0], err


def test_a_folder_without_runs_is_refused(tmp_path, capsys):
    assert main(["llc", "calibrate", str(tmp_path)]) == 2
    assert "holds no runs" in capsys.readouterr().err
