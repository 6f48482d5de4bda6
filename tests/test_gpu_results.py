"""The GPU results folders say what their files hold: where each ensemble trained, and the curves table rebuilt
from the training metrics alone (results/retrieval-gpu-logdepth stopped before its analysis)."""

import os
import shutil
import sys
from pathlib import Path

import pandas as pd
import pytest

from headway.errors import ConfigError

from headway.runs import layout
from headway.studies.base import trained_on_device

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))

import curves_table  # noqa: E402

LOGDEPTH = ROOT / "results" / "retrieval-gpu-logdepth"


def test_an_ensemble_names_the_device_it_trained_on_and_older_summaries_their_device_type() -> None:
    named = {trained_on_device(d) for d in layout.ensemble_dirs(LOGDEPTH / "runs") if (d / layout.SUMMARY).is_file()}
    assert named == {"cuda: NVIDIA H200 (torch 2.11.0+cu130)", "cuda"}  # the second lease's, the first lease's
    cut = [d for d in layout.ensemble_dirs(LOGDEPTH / "runs") if not (d / layout.SUMMARY).is_file()]
    assert len(cut) == 1 and trained_on_device(cut[0]) == "not recorded"  # stopped at its time limit


def test_the_curves_table_is_rebuilt_from_the_metrics_as_committed() -> None:
    table = curves_table.curves_table(LOGDEPTH)
    committed = pd.read_csv(LOGDEPTH / "curves.csv")
    pd.testing.assert_frame_equal(table.reset_index(drop=True), committed, check_dtype=False)
    whole_chain = table[table.supervision == "whole-chain"]
    assert whole_chain.solved.all() and len(whole_chain) == 24
    assert not table[(table.hops == 5) & (table.supervision != "whole-chain")].solved.any()


def test_the_curves_script_writes_its_table_and_never_writes_over_a_fifo(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    shutil.copytree(LOGDEPTH / "runs", folder / "runs")
    assert curves_table.main([str(folder)]) == 0
    assert (folder / "curves.csv").read_text() == (LOGDEPTH / "curves.csv").read_text()
    (folder / "curves.csv").unlink()
    os.mkfifo(folder / "curves.csv")
    with pytest.raises(ConfigError, match="is a FIFO"):
        curves_table.main([str(folder)])
