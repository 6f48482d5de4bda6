"""The hand-written numbers of results/modular-pooled-cpu/README.md and results/modular-settled-cpu/README.md (each
pair's extra fall and z, which the template cannot compute) are those of the study's own verdict in summary.json."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).resolve().parent.parent / "results" / "modular-pooled-cpu"
PAIR = re.compile(r"seed (\d+) \(fraction [\d.]+\):.*?difference ([+-]\d+)% .*?z = (-?[\d.]+)")


def pairs(folder: Path = FOLDER) -> dict[int, tuple[int, float]]:
    """Each seed's extra fall (percent of the peak) and z as the verdict's evidence states them."""
    verdict = next(v for v in json.loads((folder / "summary.json").read_text())["verdicts"] if v["id"] == "llc-falls")
    return {int(seed): (int(diff), float(z)) for seed, diff, z in PAIR.findall(verdict["evidence"])}


def test_the_readme_quotes_each_pairs_extra_fall_and_z_as_the_verdict_has_them():
    found, readme = pairs(), " ".join((FOLDER / "README.md").read_text().split())
    assert set(found) == {16, 17, 18}
    (d16, z16), (d17, z17), (d18, z18) = found[16], found[17], found[18]
    assert d16 > 0 and d17 > 0 and d18 < 0  # two pairs pass, the third does not: the verdict the README explains
    assert f"extra falls of {d16:+d}% and {d17:+d}%, z = {z16:.1f} and {z17:.1f}" in readme
    assert f"seed 18 does not (−{-d18}%, z = −{-z18:.1f}" in readme


def test_the_settled_readme_quotes_the_two_tested_pairs_as_the_verdict_has_them():
    folder = FOLDER.parent / "modular-settled-cpu"
    found, readme = pairs(folder), " ".join((folder / "README.md").read_text().split())
    assert set(found) == {19, 21}  # seed 20 left out: its settled checkpoint came before it generalised
    (d19, z19), (d21, z21) = found[19], found[21]
    assert f"extra falls of {d19:+d}% and {d21:+d}%, z = {z19:.1f} and {z21:.1f}" in readme
    # read at its last checkpoint (on a spike), seed 20's grokked run would fall no further than its control, so the
    # old rule would have failed the claim, as the README says
    llc = {(row["seed"], row["weight_decay"]): row for row in json.loads((folder / "summary.json").read_text())["llc"]}
    curve = pd.read_csv(folder / "llc_curve.csv")
    last = curve[(curve.run_id == llc[20, 1.0]["run_id"]) & (curve.weights == "all") & (curve.step == 3000)]
    assert 1 - last.llc_mean.item() / llc[20, 1.0]["peak"] - llc[20, 0.0]["fall"] < 0.02
