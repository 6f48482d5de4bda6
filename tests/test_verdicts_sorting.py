"""The sorting study's verdicts on hand-made tables."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from headway.analysis.development import Development
from headway.errors import ConfigError
from headway.report.html import Report
from headway.studies.modular import verdicts as modular
from headway.studies.modular.tables import ModularTables, run_steps
from headway.studies.retrieval import rules
from headway.studies.retrieval import verdicts as retrieval
from headway.studies.sorting import verdicts as sorting
from headway.studies.sorting.plan import data_label_of, study_plan
from headway.studies.sorting.tables import SIGNIFICANT, SortingTables, gap_power, gap_test, mode_fractions
from headway.studies.verdict import STATUSES, Verdict, verdict_callouts
from headway.tasks.sorting.modes import MODES


def test_sorting_claims_on_hand_made_models():
    final = sorting_final(["splitting", "splitting", "overlapping", "other"], [0.005, 0.0, 0.0, 0.005])
    tables = SortingTables(final=final, fractions=mode_fractions(final), gap_test=None, development=[],
                           weight_decays=(0.005, 0.0), ablation=pd.DataFrame(), dla=pd.DataFrame())
    found = {v.claim: v for v in sorting.verdicts(tables)}
    assert found["Vocabulary-splitting appears with and without weight decay"].status == "reproduced"
    simple = found["Heads settle into vocabulary-splitting or copy-suppression rather than overlapping ranges"]
    assert simple.status == "not reproduced" and simple.evidence.startswith("50% of models")
    assert found["A one-layer attention-only transformer learns to sort"].status == "reproduced"
    assert not any("LLC" in claim for claim in found)  # nothing traced, no claim
    only_decay = sorting_final(["splitting", "overlapping"], [0.005, 0.0])
    assert sorting.splitting_with_and_without_decay(only_decay, (0.005, 0.0)).status == "not reproduced"
    assert sorting.learns_to_sort(sorting_final(["other"], [0.0], accuracy=0.5)).status == "partly reproduced"


def test_mode_fractions_carry_wilson_intervals():
    fractions = mode_fractions(sorting_final(["splitting"] * 3 + ["other"], [0.0] * 4))
    row = fractions.set_index("mode").loc["splitting"]
    assert (row["count"], row.n, row.fraction) == (3, 4, 0.75)
    assert row.ci_low == pytest.approx(0.3006, abs=1e-4) and row.ci_high == pytest.approx(0.9544, abs=1e-4)


def test_the_gap_verdict_states_its_rule_p_value_permutations_and_power():
    data = ["gap 1"] * 6 + ["gap 3"] * 6
    gaps = [1.0] * 6 + [3.0] * 6
    split = sorting_final(["splitting"] * 6 + ["overlapping"] * 6, [0.0] * 12, data).assign(mean_gap=gaps)
    test = gap_test(split, np.random.default_rng(0), permutations=999)
    assert test["p_value"] < 0.01  # exact: 2 / C(12, 6) = 0.0022
    found = sorting.gap_decides_mode(test, mode_fractions(split))
    assert found.status == "reproduced" and found.evidence.startswith("Refuted unless p < 0.05")
    assert "999 permutations" in found.evidence and "no wd: χ² = 12.0 over 12 learned runs" in found.evidence
    assert "0/6 (0.00–0.39) at gap 1 vs 6/6 (0.61–1.00) at gap 3" in found.evidence  # Wilson intervals
    mixed = split.assign(mode=["splitting", "overlapping"] * 6)
    null = gap_test(mixed, np.random.default_rng(0), permutations=999)
    null["power"] = gap_power(mixed, np.random.default_rng(1), studies=50, permutations=199)
    weak = sorting.gap_decides_mode(null, mode_fractions(mixed))
    assert null["p_value"] == 1.0 and null["power"] < 0.8
    assert weak.status == "not testable" and f"from 0.2 to 0.8 at every weight decay: {null['power']:.2f}" in weak.evidence
    assert sorting.gap_decides_mode({**null, "power": 0.9}, mode_fractions(mixed)).status == "not reproduced"
    assert gap_test(split.assign(data="uniform"), np.random.default_rng(0)) is None  # one data value: no test


def gpu_design(rng: np.random.Generator, share: dict[str, float] | None = None) -> pd.DataFrame:
    """A simulated study with the `gpu` plan's grid (every run learned): modes drawn independently of the
    data, or splitting against overlapping with P(splitting) = share[data]."""
    plan = study_plan("gpu")
    cells = [(data_label_of(d), 4.7 if d == "uniform" else float(d), wd, seed)
             for d in plan.data for wd in plan.weight_decays for seed in plan.seeds]
    final = pd.DataFrame(cells, columns=["data", "mean_gap", "weight_decay", "seed"]).assign(val_accuracy=0.99)
    if share is None:
        return final.assign(mode=rng.choice(list(MODES), size=len(final), p=[0.5, 0.2, 0.2, 0.1]))
    return final.assign(mode=np.where(rng.random(len(final)) < final.data.map(share), "splitting", "overlapping"))


def test_the_gap_test_keeps_its_level_under_the_null_at_gpu_scale():
    """Modes independent of δ̄ in the gpu grid (8 data values × 2 weight decays × 24 seeds): the old test
    (largest of many contrasts, uncorrected Fisher test) said "reproduced" in 49–60% of such studies."""
    rng, studies = np.random.default_rng(7), 400
    found = [gap_test(gpu_design(rng), rng, permutations=199)["p_value"] < SIGNIFICANT for _ in range(studies)]
    rate = float(np.mean(found))  # the verdict says "reproduced" exactly when p < SIGNIFICANT
    assert rate <= 0.05 + 2 * np.sqrt(0.05 * 0.95 / studies)
    assert rate < 0.49 / 4


def test_the_gap_test_finds_a_planted_effect_and_its_power_says_so():
    rng = np.random.default_rng(8)
    gaps = {data_label_of(d): (4.7 if d == "uniform" else float(d)) for d in study_plan("gpu").data}
    share = {label: 0.2 + 0.6 * (g - 1.5) / (4.7 - 1.5) for label, g in gaps.items()}  # 0.2 → 0.8 across δ̄
    found = [gap_test(gpu_design(rng, share), rng, permutations=199)["p_value"] < SIGNIFICANT for _ in range(100)]
    assert np.mean(found) >= 0.8
    assert gap_power(gpu_design(rng), rng, studies=100, permutations=199) >= 0.8  # the same effect, by gap_power


def development(run_id: str, falls: bool, peak_step: int = 100) -> Development:
    empty = pd.DataFrame()
    return Development(run_id, pd.DataFrame({"weight_decay": [1.0], "seed": [0]}), pd.DataFrame({"data": ["uniform"]}),
                       empty, empty, peak_step, 50.0, 20.0 if falls else 50.0, falls, [])


def test_llc_claim_counts_the_traced_runs_that_rise_then_fall():
    final = sorting_final(["splitting"], [0.0])
    tables = SortingTables(final=final, fractions=mode_fractions(final), gap_test=None,
                           development=[development("a", True), development("b", False)], weight_decays=(0.0,),
                           ablation=pd.DataFrame(), dla=pd.DataFrame())
    assert sorting.llc_rises_then_falls(tables).status == "partly reproduced"


# --- modular ------------------------------------------------------------------------------------

def curves(run_id: str, wd: float, train: list[float], test: list[float]) -> pd.DataFrame:
    steps = [0, 100, 200, 400, 800, 1600][: len(train)]
    return pd.DataFrame({"run_id": run_id, "weight_decay": wd, "step": steps, "train_accuracy": train,
                         "val_accuracy": test})


