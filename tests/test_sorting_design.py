"""The sorting study's `cpu` scale is sized so that every mode claim it can judge has the power to decide it."""

from dataclasses import replace

import pytest

from headway.studies.sorting.design import SIZED_CLAIMS, design_power, planned_final
from headway.studies.sorting.plan import UNIFORM, study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.verdicts import CLAIMS

RULES = SortingRules()


@pytest.fixture(scope="module")
def cpu_power():
    return design_power(study_plan("cpu"), RULES, len(CLAIMS))


def test_cpu_scale_decides_every_mode_claim_at_the_strictest_holm_level(cpu_power):
    assert set(cpu_power) == set(SIZED_CLAIMS)
    for claim, power in cpu_power.items():
        assert power >= RULES.power, (claim, power)


def test_the_former_three_seed_grid_could_not_decide_the_gap_or_simple_modes():
    former = replace(study_plan("cpu"), data=(UNIFORM, 1.5, 3.0), seeds=(0, 1, 2))
    power = design_power(former, RULES, 5)
    assert power["gap-decides-mode"] < 0.05  # its smallest attainable p is above α/5 (results/sorting-cpu before)
    assert power["simple-modes"] < 0.6 and power["copy-suppression"] < RULES.power
    assert power["learns-to-sort"] > 0.9


def test_planned_final_measures_each_data_values_gap():
    final = planned_final(study_plan("cpu"))
    assert len(final) == 72 and set(final.data) == {UNIFORM, "gap 1.5"}
    gaps = final.groupby("data").mean_gap.first()
    assert gaps["gap 1.5"] == pytest.approx(1.5, abs=0.05)
    assert gaps[UNIFORM] == pytest.approx(52 / 11, abs=0.1)  # distinct 10 of 0…50: E gap (values + 1) / (length + 1)


def test_a_plan_with_one_weight_decay_has_no_power_for_the_splitting_claim():
    power = design_power(replace(study_plan("cpu"), weight_decays=(0.005,)), RULES, len(CLAIMS))
    assert power["splitting"] == 0.0
