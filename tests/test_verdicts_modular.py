"""The modular-addition study's verdicts on hand-made tables."""

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


def test_grokking_steps_need_a_delay_after_memorisation():
    metrics = pd.concat([curves("grok", 1.0, [0.1, 1, 1, 1, 1, 1], [0.02, 0.03, 0.1, 0.5, 0.97, 0.99]),
                         curves("together", 1.0, [0.1, 1, 1, 1, 1, 1], [0.02, 0.97, 0.98, 0.99, 0.99, 0.99]),
                         curves("never", 0.0, [0.1, 1, 1, 1, 1, 1], [0.02, 0.03, 0.04, 0.05, 0.05, 0.06]),
                         curves("spiky", 1.0, [0.1, 1, 0.9, 1, 1, 1], [0.02, 0.03, 0.1, 0.5, 0.97, 0.9])])
    steps = run_steps(metrics).set_index("run_id")
    assert steps.loc["spiky", "memorised_step"] == 100  # a dip after memorising does not move it
    assert np.isnan(steps.loc["spiky", "generalised_step"])  # test accuracy must stay up to the end
    assert steps.loc["grok", "memorised_step"] == 100 and steps.loc["grok", "generalised_step"] == 800
    assert steps.loc["grok", "grokked"] and not steps.loc["together"].grokked and not steps.loc["never"].grokked
    assert np.isnan(steps.loc["never", "generalised_step"])


def modular_runs(**columns) -> pd.DataFrame:
    base = {"run_id": ["a", "b"], "seed": [0, 1], "train_fraction": [0.4, 0.4], "weight_decay": [1.0, 0.0],
            "memorised_step": [100.0, 100.0], "generalised_step": [800.0, np.nan], "grokked": [True, False],
            "train_accuracy": [1.0, 1.0], "val_accuracy": [0.99, 0.1], "effective_frequencies": [3.0, 12.0],
            "initial_effective_frequencies": [24.0, 24.0], "key_frequencies": ["4 9 17", "1 2 3 4 5 6 7 8"],
            "key_logit_share": [0.8, 0.1], "logit_share_all": [0.9, 0.3]}
    return pd.DataFrame({**base, **columns})


def modular_tables(runs: pd.DataFrame, traced: list[Development] = ()) -> ModularTables:
    return ModularTables(runs=runs, metrics=pd.DataFrame(), spectrum=pd.DataFrame(), fourier_curve=pd.DataFrame(),
                         development=list(traced), weight_decays=(1.0, 0.0))


def test_modular_claims_on_hand_made_runs():
    found = {v.claim.split(":")[0]: v for v in modular.verdicts(modular_tables(modular_runs()))}
    assert found["With weight decay the model groks"].status == "reproduced"
    assert found["Without weight decay the model does not generalise (test accuracy ≥ 95%) within the same steps"
                 ].status == "reproduced"
    assert found["A grokked model's embedding uses a handful of key frequencies"].status == "reproduced"
    assert found["A grokked model builds its logits from its key frequencies"].status == "reproduced"
    dense = modular_runs(effective_frequencies=[15.0, 12.0], key_logit_share=[0.3, 0.1])
    assert modular.fourier_sparsity(dense).status == "not reproduced"
    assert modular.logits_from_keys(dense).status == "not reproduced"
    generalises = modular_runs(generalised_step=[800.0, 900.0])
    assert modular.decay_is_needed(generalises).status == "not reproduced"
    nobody = modular_runs(grokked=[False, False])
    assert modular.groks_with_decay(nobody).status == "not reproduced"
    assert modular.fourier_sparsity(nobody).status == "not testable"


def test_modular_llc_claim_needs_the_peak_by_the_grokking_step():
    runs = modular_runs()
    early = modular_tables(runs, [development("a", True, peak_step=400)])
    late = modular_tables(runs, [development("a", True, peak_step=1600)])
    assert modular.llc_falls_at_grokking(early).status == "reproduced"
    assert modular.llc_falls_at_grokking(late).status == "not reproduced"
    assert modular.llc_falls_at_grokking(modular_tables(runs, [development("b", True)])).status == "not testable"


