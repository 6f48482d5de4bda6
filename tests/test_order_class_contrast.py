"""scripts/order_class_contrast.py: per-run accuracy over a class of link orders and the one-sided Fisher test
of a factor, on constructed order tables."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pandas as pd
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))
import order_class_contrast  # noqa: E402

from headway.analysis.statistics import fisher_greater  # noqa: E402

CLASS = ["3214", "4321"]


def table(accuracies: dict[tuple[int, int], dict[str, float]]) -> pd.DataFrame:
    """An order table: per (layers, seed), the accuracy of each named order."""
    return pd.DataFrame([{"run_id": f"r{layers}{seed}", "seed": seed, "layers": layers, "hops": 4,
                          "link_order": order, "accuracy": accuracy}
                         for (layers, seed), orders in accuracies.items() for order, accuracy in orders.items()])


def write(folder: Path, frame: pd.DataFrame) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    frame.to_csv(folder / "order_table.csv", index=False)
    return folder


def test_each_order_weighs_the_same_and_the_counts_give_fishers_p(tmp_path):
    runs = {(4, seed): {"3214": 1.0, "4321": 0.9, "1234": 0.0} for seed in range(3)}
    runs |= {(3, 0): {"3214": 1.0, "4321": 0.79, "1234": 1.0}, (3, 1): {"3214": 0.0, "4321": 0.0, "1234": 1.0},
             (3, 2): {"3214": 0.95, "4321": 0.85, "1234": 1.0}}
    folder = write(tmp_path / "study", table(runs))
    assert order_class_contrast.main([str(folder), "--orders", ",".join(CLASS), "--factor", "layers", "--high", "4",
                                      "--low", "3"]) == 0
    result = json.loads((folder / "class_contrast.json").read_text())
    accuracy = {(run["layers"], run["seed"]): run["class_accuracy"] for run in result["runs"]}
    assert accuracy[(3, 0)] == pytest.approx(0.895) and accuracy[(4, 1)] == pytest.approx(0.95)  # 1234 left out
    assert result["high"] == {"value": "4", "runs": 3, "answer": 3}
    assert result["low"] == {"value": "3", "runs": 3, "answer": 1}  # 0.895 < 0.9 ≤ (0.95 + 0.85) / 2
    assert result["p_one_sided"] == pytest.approx(fisher_greater(3, 3, 1, 3)) and result["level"] == 0.9
    assert result["orders"] == CLASS


def test_a_run_without_an_order_of_the_class_or_an_unknown_factor_is_refused_by_name(tmp_path, capsys):
    runs = {(4, 0): {"3214": 1.0, "4321": 1.0}, (3, 0): {"3214": 1.0}}
    folder = write(tmp_path / "study", table(runs))
    args = [str(folder), "--orders", ",".join(CLASS), "--high", "4", "--low", "3"]
    with pytest.raises(SystemExit):
        order_class_contrast.main([*args, "--factor", "layers"])
    assert "run r30 has no row for order(s) 4321" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        order_class_contrast.main([*args, "--factor", "width"])
    assert "factor 'width' is not a column" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        order_class_contrast.main([str(tmp_path / "nowhere"), "--orders", "1", "--factor", "layers", "--high", "4",
                                   "--low", "3"])
    assert "order_table.csv does not exist" in capsys.readouterr().err
    assert not (folder / "class_contrast.json").exists()


def test_a_missing_accuracy_or_an_output_outside_the_folder_or_on_a_device_is_refused(tmp_path, capsys):
    runs = {(4, 0): {"3214": 1.0, "4321": float("nan")}, (3, 0): {"3214": 0.0, "4321": 0.0}}
    folder = write(tmp_path / "study", table(runs))
    args = [str(folder), "--orders", ",".join(CLASS), "--factor", "layers", "--high", "4", "--low", "3"]
    with pytest.raises(SystemExit):  # a mean over 3214 alone would say the run answers the class
        order_class_contrast.main(args)
    assert "run(s) r40 have no accuracy for an order of the class" in capsys.readouterr().err
    write(folder, table({(4, 0): {"3214": 1.0, "4321": 1.0}, (3, 0): {"3214": 0.0, "4321": 0.0}}))
    for out in ("../other/class_contrast.json", ".."):
        with pytest.raises(SystemExit):
            order_class_contrast.main([*args, "--out", out])
        assert "is not a file name" in capsys.readouterr().err
    os.mkfifo(folder / "pipe")
    with pytest.raises(SystemExit):
        order_class_contrast.main([*args, "--out", "pipe"])
    assert "is a FIFO" in capsys.readouterr().err
    assert not (tmp_path / "other").exists() and not (folder / "class_contrast.json").exists()
