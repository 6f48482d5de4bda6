"""Confirmations on fresh data: `--fresh-data` gives each seed of a study (retrieval, sorting, modular) its own
training pool and validation set (data_seed = seed); without it every run draws from data_seed 0, as the committed
results did."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from headway.cli.main import main
from headway.studies.retrieval.plan import study_plan

AXES = {"layers": (2,), "hops": (3,), "seeds": (3, 4), "curricula": ("ic",), "conditional_hops": (1,),
        "conditional_layers": (1,), "conditional_seeds": (5,)}


def test_each_seed_draws_its_own_data_only_when_asked():
    shared = study_plan("cpu").with_overrides(**AXES).runs()
    fresh = study_plan("cpu").with_overrides(**AXES, fresh_data=True).runs()
    assert {run.data_seed for run in shared} == {0}
    assert [run.data_seed for run in fresh] == [run.seed for run in fresh] == [3, 4, 5]
    assert not {run.run_id for run in shared} & {run.run_id for run in fresh}  # a different run, cached apart
    pools = [run.task.split(256, 64, run.data_seed)[0].tokens for run in fresh[:2]]
    assert not np.array_equal(*pools)
    same = [run.task.split(256, 64, run.data_seed)[0].tokens for run in shared[:2]]
    assert np.array_equal(*same)


def test_the_dry_run_says_which_data_the_runs_draw(tmp_path, capsys):
    args = ["study", "retrieval", "--scale", "cpu", "--layers", "2", "--hops", "3", "--seed", "3,4", "--curriculum",
            "ic", "--conditional-hops", "none", "--out", str(tmp_path / "s"), "--dry-run"]
    assert main([*args, "--fresh-data"]) == 0
    assert "data: each seed its own (data_seed = seed)" in capsys.readouterr().out
    assert main(args) == 0
    assert "every run draws from data_seed 0" in capsys.readouterr().out


@pytest.mark.parametrize("study", ["sorting", "modular"])
def test_the_llc_studies_offer_fresh_data_too(study, tmp_path, capsys):
    """The sorting and modular studies share the option: a confirmation of their mode or grokking claims on fresh
    seeds can vary the lists (sorting) or the split of the pairs (modular) as well."""
    plan = study_plan_of(study)("cpu").with_overrides(seeds=(3, 4))
    shared, fresh = plan.runs(), plan.with_overrides(fresh_data=True).runs()
    assert {run.data_seed for run in shared} == {0}
    assert [run.data_seed for run in fresh] == [run.seed for run in fresh]
    assert not {run.run_id for run in shared} & {run.run_id for run in fresh}
    first, second = fresh[0], next(run for run in fresh if run.seed != fresh[0].seed)
    pools = [run.task.split(256, 64, run.data_seed)[0].tokens for run in (first, second)]
    assert not np.array_equal(*pools)
    args = ["study", study, "--scale", "cpu", "--seed", "3,4", "--out", str(tmp_path / "s"), "--dry-run"]
    assert main([*args, "--fresh-data"]) == 0
    assert "data: each seed its own (data_seed = seed)" in capsys.readouterr().out
    assert main(args) == 0
    assert "every run draws from data_seed 0" in capsys.readouterr().out


def study_plan_of(study: str):
    """The named study's `study_plan`."""
    return importlib.import_module(f"headway.studies.{study}.plan").study_plan
