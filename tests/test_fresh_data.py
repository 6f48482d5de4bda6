"""Confirmations on fresh data: `--fresh-data` gives each seed of a study (retrieval, sorting, modular) its own
training pool and validation set (data_seed = seed); without it every run draws from data_seed 0, as the committed
results did."""

from __future__ import annotations

import numpy as np
import pytest

from headway.cli.main import main
from headway.runs.config import RunConfig
from headway.studies.registry import study_class

AXES = {"layers": (2,), "hops": (3,), "seeds": (3, 4), "curricula": ("ic",), "conditional_hops": (1,),
        "conditional_layers": (1,), "conditional_seeds": (5,)}
# each study's grid at two seeds (retrieval: two depth runs and one conditional run), and its dry-run arguments
OVERRIDES = {"retrieval": AXES, "sorting": {"seeds": (3, 4)}, "modular": {"seeds": (3, 4)}}
SEEDS = {"retrieval": [3, 4, 5], "sorting": [3, 4], "modular": [3, 4]}  # the seeds those grids train
DRY_RUN = {"retrieval": ["--layers", "2", "--hops", "3", "--seed", "3,4", "--curriculum", "ic", "--conditional-hops",
                         "none"],
           "sorting": ["--seed", "3,4"], "modular": ["--seed", "3,4"]}


def pools(runs: list[RunConfig]) -> list[np.ndarray]:
    """The training tokens of the first two runs with different seeds."""
    second = next(run for run in runs if run.seed != runs[0].seed)
    return [run.task.split(256, 64, run.data_seed)[0].tokens for run in (runs[0], second)]


@pytest.mark.parametrize("study", list(OVERRIDES))
def test_each_seed_draws_its_own_data_only_when_asked(study):
    plan = study_class(study).plan_for("cpu").with_overrides(**OVERRIDES[study])
    shared, fresh = plan.runs(), plan.with_overrides(fresh_data=True).runs()
    assert {run.data_seed for run in shared} == {0}
    assert [run.data_seed for run in fresh] == [run.seed for run in fresh]
    assert sorted({run.seed for run in fresh}) == SEEDS[study]
    assert not {run.run_id for run in shared} & {run.run_id for run in fresh}  # a different run, cached apart
    assert not np.array_equal(*pools(fresh))
    assert np.array_equal(*pools(shared))


@pytest.mark.parametrize("study", list(DRY_RUN))
def test_the_dry_run_says_which_data_the_runs_draw(study, tmp_path, capsys):
    args = ["study", study, "--scale", "cpu", *DRY_RUN[study], "--out", str(tmp_path / "s"), "--dry-run"]
    assert main([*args, "--fresh-data"]) == 0
    assert "data: each seed its own (data_seed = seed)" in capsys.readouterr().out
    assert main(args) == 0
    assert "every run draws from data_seed 0" in capsys.readouterr().out
