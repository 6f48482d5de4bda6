"""scripts/sweep_conditional.py: recipe specs, the grid, resume and the tables on a tiny grid."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "sweep_conditional.py"


@pytest.fixture(scope="module")
def sweep():
    spec = importlib.util.spec_from_file_location("sweep_conditional", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["sweep_conditional"] = module
    spec.loader.exec_module(module)
    return module


def tiny_base(sweep) -> dict:
    return {**sweep.BASE, "vocab": 12, "layers": 1, "heads": 2, "d_model": 16, "batch_size": 32, "steps": 20,
            "train_size": 512, "val_size": 128, "eval_every": 10, "checkpoint_every": 10, "log_checkpoints": 0}


def test_recipe_specs_compose_named_recipes_and_settings(sweep):
    settings = sweep.recipe_settings("ce+bidir+steps=50+lr=0.003")
    assert settings["loss"] == "cross_entropy" and settings["attention"] == "bidirectional"
    assert settings["steps"] == 50 and settings["lr"] == pytest.approx(0.003)
    assert settings["conditional"] is True and settings["hops"] == 1
    assert sweep.changed_settings("classes1") == {"classes": 1}
    assert sweep.recipe_settings("base") == sweep.BASE
    with pytest.raises(KeyError):
        sweep.recipe_settings("no-such-recipe")


def test_grid_is_recipes_times_seeds_and_drops_duplicates(sweep):
    runs = sweep.build_runs(["base", "ce", "base+loss=mse"], [0, 1], tiny_base(sweep))
    assert [(r, run.seed) for r, run in runs] == [("base", 0), ("base", 1), ("ce", 0), ("ce", 1)]
    assert all(run.task.conditional for _, run in runs)
    assert runs[2][1].train.loss == "cross_entropy"


def test_tiny_sweep_trains_tabulates_and_resumes(sweep, tmp_path):
    from headway.train.sweep import training_jobs

    recipe_runs = sweep.build_runs(["base", "ce"], [0, 1], tiny_base(sweep))
    out, results = tmp_path / "runs", tmp_path / "results"
    sweep.train(recipe_runs, out)
    table = sweep.write_results(recipe_runs, out, results)

    runs = __import__("pandas").read_csv(results / sweep.CSV_NAME)
    assert {"recipe", "seed", "run_id", "val_accuracy", "best_val_accuracy", "steps_to_0.9", "complete"} <= set(
        runs.columns)
    assert len(runs) == 4 and runs.complete.all()
    assert np.all((runs.val_accuracy >= 0) & (runs.val_accuracy <= 1))
    assert np.all(runs.best_val_accuracy >= runs.val_accuracy)
    assert list(table.recipe) == ["base", "ce"] and list(table.seeds) == [2, 2]
    text = (results / sweep.TABLE_NAME).read_text()
    assert text.count("\n") == 2 + 2 and "| ce | loss=cross_entropy |" in text
    assert (results / sweep.FIGURE_NAME).stat().st_size > 0

    # rerunning skips the finished runs: no job left, and the run files are not rewritten
    assert training_jobs([run for _, run in recipe_runs], out.resolve(), "cpu", False) == []
    metrics_files = sorted(out.glob("*/metrics.parquet"))
    stamps = [f.stat().st_mtime_ns for f in metrics_files]
    sweep.train(recipe_runs, out)
    assert [f.stat().st_mtime_ns for f in metrics_files] == stamps

    # a new recipe trains only its own runs next to the old ones
    more = sweep.build_runs(["base", "ce", "bidir"], [0, 1], tiny_base(sweep))
    assert len(training_jobs([run for _, run in more], out.resolve(), "cpu", False)) == 1


def test_unfinished_runs_are_tabulated_as_incomplete(sweep, tmp_path):
    recipe_runs = sweep.build_runs(["base"], [0], tiny_base(sweep))
    table = sweep.write_results(recipe_runs, tmp_path / "missing", tmp_path / "results")
    runs = __import__("pandas").read_csv(tmp_path / "results" / sweep.CSV_NAME)
    assert not runs.complete.any() and np.isnan(runs.val_accuracy).all()
    assert table.complete.tolist() == [0]
