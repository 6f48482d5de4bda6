"""`headway study recipes`: variant specs over a base cell, the grid, resume, the tables, the figure and the
conditional probes on a tiny grid, and refusals before anything trains."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headway.errors import ConfigError
from headway.runs import layout
from headway.studies.recipes.plan import BASES, VARIANTS, RecipePlan
from headway.studies.recipes.rules import RecipeRules
from headway.studies.recipes.study import RecipesStudy
from headway.studies.recipes.tables import run_table
from headway.studies.variants import variant_settings

TINY = {"vocab": 12, "layers": 1, "heads": 2, "d_model": 16, "batch_size": 32, "steps": 20, "train_size": 512,
        "val_size": 128, "eval_every": 10, "checkpoint_every": 10, "log_checkpoints": 0}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


def test_variant_specs_compose_named_variants_and_typed_settings():
    settings = variant_settings("ce+bidir+steps=50+lr=0.003", VARIANTS)
    assert settings == {"loss": "cross_entropy", "attention": "bidirectional", "steps": 50, "lr": 0.003}
    assert variant_settings("r4c1+classes=2", VARIANTS) == {"relations": 4, "classes": 2}  # a later part wins
    base = BASES["retrieval-conditional"][0]()
    assert base["conditional"] is True and base["hops"] == 1 and base["layers"] == 3
    with pytest.raises(ConfigError, match="'no-such' is neither a key=value setting nor one of base, plain"):
        variant_settings("no-such", VARIANTS)


def test_the_grid_is_variants_times_seeds_and_a_repeated_run_is_refused():
    plan = RecipePlan("cpu", variants=("base", "ce"), seeds=(0, 1), settings=TINY, probe_examples=0)
    runs = plan.grids()
    assert [(spec, run.seed) for spec, group in runs.items() for run in group] == [
        ("base", 0), ("base", 1), ("ce", 0), ("ce", 1)]
    assert all(run.task.conditional and run.task.vocab == 12 for group in runs.values() for run in group)
    assert runs["ce"][0].train.loss == "cross_entropy" and runs["base"][0].train.loss == "mse"
    with pytest.raises(ConfigError, match="two variants give the same runs"):
        RecipePlan("cpu", variants=("base", "base+loss=mse"), seeds=(0,), settings=TINY)
    with pytest.raises(ConfigError, match="unknown setting"):  # the sorting cell has no classes
        RecipePlan("cpu", base="sorting", variants=("classes1",), seeds=(0,))


def test_a_tiny_sweep_trains_tabulates_probes_and_resumes(tmp_path):
    plan = RecipePlan("cpu", variants=("base", "plain", "ce"), seeds=(0, 1), settings=TINY, probe_examples=200)
    table = RecipesStudy(plan, tmp_path, device="cpu", progress=False).run()
    runs = pd.read_csv(tmp_path / "sweep.csv")
    assert runs.variant.tolist() == ["base", "base", "plain", "plain", "ce", "ce"] and runs.complete.all()
    assert runs.val_accuracy.between(0, 1).all() and (runs.best_val_accuracy >= runs.val_accuracy).all()
    assert "steps_to_reach" in runs.columns
    text = table.read_text()
    assert text.startswith("Base cell `retrieval-conditional`") and text.count("\n| ") == 1 + 3
    assert "| ce | loss cross_entropy | cross-entropy instead of MSE" in text
    assert (tmp_path / "accuracy_vs_steps.png").stat().st_size > 0
    probes = pd.read_csv(tmp_path / "probes.csv")
    assert set(probes.variant) == {"base", "ce"}  # the plain task is not probed
    assert set(probes.site) == {"query", "link", "output"} and (probes.runs == 2).all()
    shares = probes[probes.site == "output"].groupby("variant").accuracy.sum()
    assert np.allclose(shares, 1.0)  # answer, decoy and other split every prediction
    assert set(probes.layer) == {0, 1}

    ensembles = layout.ensemble_dirs(tmp_path / "runs")
    stamp = {p: p.stat().st_mtime_ns for d in ensembles for p in d.rglob("*") if p.is_file()}
    RecipesStudy(plan, tmp_path, device="cpu", progress=False).run()  # done: nothing trained or analysed again
    assert {p: p.stat().st_mtime_ns for d in ensembles for p in d.rglob("*") if p.is_file()} == stamp


def test_runs_not_trained_yet_are_tabulated_as_incomplete():
    plan = RecipePlan("cpu", variants=("base",), seeds=(0,), settings=TINY)
    runs = run_table(plan, pd.DataFrame(columns=["run_id", "step", "val_accuracy"]), RecipeRules())
    assert not runs.complete.any() and runs.val_accuracy.isna().all()
