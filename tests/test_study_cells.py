"""`headway study NAME` with a run setting given as a list runs one study per value (per combination of the
listed settings), each in a folder named by its settings, and gathers their per-run tables and verdicts."""

from __future__ import annotations

import pandas as pd
import pytest

from headway.cli.main import main
from headway.runs.owner import folder_kind
from headway.studies.cells import cell_name, setting_cells, write_cell_tables
from headway.studies.retrieval.plan import study_plan

pytestmark = pytest.mark.usefixtures("one_thread")


def test_cells_are_every_combination_of_the_swept_settings_named_as_variant_specs():
    cells = setting_cells({"vocab": [48, 96], "loss": ["mse", "cross_entropy"]})
    assert [cell_name(cell) for cell in cells] == ["vocab=48+loss=mse", "vocab=48+loss=cross_entropy",
                                                   "vocab=96+loss=mse", "vocab=96+loss=cross_entropy"]
    assert setting_cells({}) == [{}]


def test_the_retrieval_study_sets_the_heads_of_every_run_in_both_grids():
    """`headway study retrieval --heads 8` is a run setting like --d-model: every run of every grid gets 8 heads."""
    plan = study_plan("cpu").with_overrides(layers=(2,), hops=(3,), seeds=(3,), curricula=("ic",),
                                            conditional_hops=(1,), conditional_layers=(1,), conditional_seeds=(5,))
    runs = plan.with_settings(heads=8).runs()
    assert {run.model.heads for run in runs} == {8} and sorted(run.seed for run in runs) == [3, 5]  # both grids
    assert {run.model.heads for run in plan.runs()} == {4}


def test_a_listed_run_setting_runs_one_study_per_value_and_gathers_them(tmp_path, capsys):
    out = tmp_path / "sweep"
    args = ["study", "recipes", "--out", str(out), "--variant", "base,ce", "--seed", "0", "--steps", "20,30",
            "--probe-examples", "0", "--no-progress", "--device", "cpu"]
    assert main([*args, "--dry-run"]) == 0
    planned = capsys.readouterr().out
    assert "cell steps=20:" in planned and "cell steps=30:" in planned and not out.exists()
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert f"cells: {out / 'cells.csv'}" in printed
    assert folder_kind(out) == folder_kind(out / "steps=20") == "study recipes"
    cells = pd.read_csv(out / "cells.csv")
    assert list(cells.columns[:2]) == ["steps", "variant"] and cells.steps.tolist() == [20, 20, 30, 30]
    assert cells.step_reached.tolist() == [20, 20, 30, 30] and cells.variant.tolist() == ["base", "ce"] * 2
    for steps in (20, 30):
        assert pd.read_csv(out / f"steps={steps}" / "sweep.csv").step_reached.eq(steps).all()
    assert pd.read_csv(out / "cell_verdicts.csv").empty  # the recipe sweep judges no claim
    assert main(args) == 0  # a re-run finds every cell done


def test_the_cell_tables_put_the_swept_settings_first_and_skip_unfinished_cells(tmp_path):
    for cell, rows in (({"vocab": 48}, [0.5, 0.9]), ({"vocab": 96}, None)):
        folder = tmp_path / cell_name(cell)
        folder.mkdir()
        if rows:
            pd.DataFrame({"vocab": [24, 24], "val_accuracy": rows}).to_csv(folder / "results.csv", index=False)
            (folder / "summary.json").write_text('{"verdicts": [{"id": "depth-law", "status": "not testable", '
                                                  '"claim": "c", "evidence": "e"}]}')
    written = write_cell_tables(tmp_path, [{"vocab": 48}, {"vocab": 96}], "results.csv")
    assert [path.name for path in written] == ["cells.csv", "cell_verdicts.csv"]
    table = pd.read_csv(tmp_path / "cells.csv")
    assert table.vocab.tolist() == [48, 48] and table.val_accuracy.tolist() == [0.5, 0.9]
    verdicts = pd.read_csv(tmp_path / "cell_verdicts.csv")
    assert verdicts.columns.tolist() == ["vocab", "id", "status", "p_value", "alpha", "power", "claim"]
    assert verdicts.status.tolist() == ["not testable"]
