"""An analysis stopped and run again reports the seconds of all its legs: each stopped leg counts from its start to
the newest part it saved."""

from __future__ import annotations

import os
import time

import pytest

from headway.errors import ConfigError
from headway.runs import layout
from headway.studies.analysis_time import LEGS, begin_leg, end_legs


def saved(path, mtime: float) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("part")
    os.utime(path, (mtime, mtime))


def test_a_first_leg_counts_nothing_earlier_and_notes_its_start(tmp_path):
    before = time.time()
    assert begin_leg(tmp_path) == 0.0
    legs = layout.read_json(tmp_path / LEGS)
    assert legs["before"] == 0.0 and before <= legs["started"] <= time.time()


def test_a_stopped_leg_counts_to_its_newest_saved_part(tmp_path):
    now = time.time()
    layout.write_json(tmp_path / LEGS, {"started": now - 100, "before": 5.0})
    saved(tmp_path / "llc_trace" / "pool-from-0" / "step_0000010.parquet", now - 80)
    saved(tmp_path / "llc_trace" / "pool-from-0" / "step_0000020.parquet", now - 60)  # the newest: 40 s in
    assert begin_leg(tmp_path) == pytest.approx(45.0, abs=0.01)
    assert layout.read_json(tmp_path / LEGS)["before"] == pytest.approx(45.0, abs=0.01)
    # a leg stopped before it saved anything adds nothing; the legs before it stay counted
    layout.write_json(tmp_path / LEGS, {"started": now - 30, "before": 45.0})
    assert begin_leg(tmp_path) == pytest.approx(45.0, abs=0.01)


def test_a_finished_analysis_starts_the_next_one_afresh(tmp_path):
    layout.write_json(tmp_path / LEGS, {"started": time.time() - 100, "before": 50.0})
    end_legs(tmp_path)
    assert not (tmp_path / LEGS).exists() and begin_leg(tmp_path) == 0.0
    end_legs(tmp_path)
    end_legs(tmp_path)  # nothing to remove is no error


@pytest.mark.parametrize("bad", [-1.0, "soon", True])
def test_a_damaged_record_is_refused_by_name(tmp_path, bad):
    layout.write_json(tmp_path / LEGS, {"started": time.time(), "before": bad})
    with pytest.raises(ConfigError, match=rf"{LEGS}.*before = {bad!r}"):
        begin_leg(tmp_path)
