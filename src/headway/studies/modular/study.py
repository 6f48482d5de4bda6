"""`headway study modular`: grokking modular addition from nothing to its report (docs/study-modular.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from headway.runs.config import RunConfig
from headway.studies.base import TracingStudy, joined
from headway.studies.modular.plan import STUDY_SCALES, ModularPlan
from headway.studies.modular.rules import ModularRules
from headway.studies.modular.schema import SCHEMAS
from headway.studies.registry import register_study

if TYPE_CHECKING:  # the analysis loads when the study runs, not with its --help
    import pandas as pd
    import torch


@register_study
class ModularStudy(TracingStudy):
    """Train/test accuracy over training, the grokking step, Fourier features and the LLC over training,
    with weight decay on and off."""

    name = "modular"
    summary = "Grokking modular addition: memorisation and grokking steps, Fourier features, the LLC over training."
    doc = "docs/study-modular.md"
    plan_class = ModularPlan
    scales = STUDY_SCALES
    schemas = SCHEMAS
    version = 2
    # a version-1 analysis is current without the traced models' stability; the LLC claim then says it was not
    # measured rather than weigh nothing
    added_tables = {2: ("llc_stability",)}
    rules_class = ModularRules
    plan: ModularPlan
    rules: ModularRules

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        from headway.studies.modular.analyse import analyse_members
        from headway.studies.modular.llc_fall import stability_points

        parts = self.tagged_by_task(runs, lambda members: analyse_members(run_dir, runs, members, device,
                                                                          self.rules.coverage))
        chosen = self.llc_settings(run_dir, folder, runs, device)
        parts["llc_curve"] = [self.trace_llc(run_dir, folder, runs, device, chosen)]
        parts["llc_stability"] = [self.measure_stability(run_dir, folder, runs, device, chosen, parts["llc_curve"][0],
                                                         stability_points(self.rules.llc_fall_at))]
        return joined(parts)
