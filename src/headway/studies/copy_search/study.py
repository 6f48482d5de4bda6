"""`headway study copy_search`: where, among the sorting task's data features and recipes, a copy/suppress head
pair appears (docs/study-sorting.md, "Searching for copy-suppression").

Every condition is trained with the same seeds through the shared run store, and each final model is classified
by the sorting study's own rule (`headway.analysis.sorting.modes.classify_modes` on its circuits, the rules'
thresholds) on the lists that study analyses (`ANALYSIS_SEED`). No LLC, ablation or DLA: only the mode is searched
for, so the analysis takes seconds where the sorting study's takes minutes.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from headway.runs.config import RunConfig
from headway.studies.base import Study, joined
from headway.studies.copy_search.plan import SCALES, SearchPlan
from headway.studies.copy_search.rules import SearchRules
from headway.studies.copy_search.schema import SCHEMAS
from headway.studies.registry import register_study

if TYPE_CHECKING:  # the analysis loads when the study runs, not with its --help
    import pandas as pd
    import torch

    from headway.tasks.sorting import SortingConfig

SUPPRESSOR = "copy_suppression"


@register_study
class CopySearchStudy(Study):
    """Conditions × seeds over the sorting recipe; each final model's mode; one test per condition."""

    name = "copy_search"
    summary = "Search the sorting task's data features and recipes for copy-suppression head pairs."
    doc = "docs/study-sorting.md"
    plan_class = SearchPlan
    scales = SCALES
    schemas = SCHEMAS
    version = 3
    rules_class = SearchRules
    results_file = "models.csv"
    plan: SearchPlan
    rules: SearchRules

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**super().analysis_stamp(runs, rules), "examples": self.plan.examples,
                "classify_step": self.plan.classify_step}

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        from headway.runs.store import load_model

        def classified(members: list[int]) -> dict[str, pd.DataFrame]:
            model = load_model(run_dir, members, step=self.plan.classify_step, device=device)
            return {"modes": model_modes(model, runs[members[0]].task, self.plan.examples, self.rules)}

        return joined(self.tagged_by_task(runs, classified))


def model_modes(model, task: SortingConfig, examples: int, rules: SearchRules) -> pd.DataFrame:
    """Mode table (`classify_modes`, one row per instance) of an ensemble whose instances all do `task`, its readout
    scale measured on `examples` lists of the sorting study's analysis seed, with the smallest swept copy threshold
    at which the rule calls it copy-suppression (`cs_at_copy`), its most suppressed number's score, its accuracy on
    repeated targets (gap 0) and on the others, and the realised δ̄ and share of zero gaps of those lists."""
    import torch

    from headway.analysis.sorting.effects import ablate_heads, direct_logit_attribution, suppression_by_gap
    from headway.analysis.sorting.modes import threshold_sweep
    from headway.studies.sorting.analyse import ANALYSIS_SEED, circuit_state
    from headway.tasks.sorting.task import generate

    batch = generate(task, examples, np.random.default_rng(ANALYSIS_SEED))
    device = next(model.parameters()).device
    tokens = torch.from_numpy(batch.tokens).to(device).expand(model.n_instances, *batch.tokens.shape)
    thresholds = rules.mode_thresholds()
    ov, qk, scores, modes = circuit_state(model, task, tokens, thresholds)
    modes["min_diagonal_score"] = scores.flatten(1).min(dim=1).values.cpu().numpy()  # most suppressed number, any head
    sweep = threshold_sweep(ov, qk, {"copy": rules.sweeps()["copy"]}, thresholds)
    # descriptive only: the test reads the mode at the rules' thresholds
    modes["cs_at_copy"] = modes.instance.map(sweep[sweep["mode"] == SUPPRESSOR].groupby("instance").value.min())
    # teacher-forced accuracy on targets equal to the number before them (a repeat to write again) and on the
    # others: whether the model handles repeats at all
    bins = ablate_heads(model, batch, task, kinds=(), all_heads=False)
    for column, chosen in (("accuracy_gap0", bins.gap_bin == "0"),
                           ("accuracy_gap_other", ~bins.gap_bin.isin(["0", "all"]))):
        part = bins[chosen].assign(hits=lambda f: f.accuracy * f["count"])
        sums = part.groupby("instance")[["hits", "count"]].sum()
        modes[column] = modes.instance.map(sums.hits / sums["count"]).astype(float)
    removed = suppression_by_gap(direct_logit_attribution(model, batch, task), modes)
    modes = modes.merge(removed, on="instance", how="left")
    modes["mean_gap"] = float(batch.gaps.mean())
    modes["repeat_share"] = float((batch.gaps == 0).mean())
    return modes
