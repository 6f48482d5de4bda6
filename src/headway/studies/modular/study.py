"""`headway study modular`: grokking modular addition from nothing to its report (docs/study-modular.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headway.runs.config import RunConfig
from headway.studies.base import Study, StudyData, by_task
from headway.studies.modular.plan import STUDY_SCALES, ModularPlan, study_plan
from headway.studies.modular.rules import ModularRules
from headway.studies.modular.schema import SCHEMAS
from headway.studies.registry import register_study
from headway.studies.verdict import Verdict

if TYPE_CHECKING:  # the analysis and report load when the study runs, not with its --help
    import torch

    from headway.studies.modular.tables import ModularTables

LLC_TRACE = "llc_trace"


@register_study
class ModularStudy(Study):
    """Train/test accuracy over training, the grokking step, Fourier features and the LLC over training,
    with weight decay on and off."""

    name = "modular"
    summary = "Grokking modular addition: memorisation and grokking steps, Fourier features, the LLC over training."
    doc = "docs/study-modular.md"
    plan_class = ModularPlan
    scales = STUDY_SCALES
    schemas = SCHEMAS
    tables = tuple(SCHEMAS)
    version = 1
    rules_class = ModularRules
    plan: ModularPlan
    rules: ModularRules

    @classmethod
    def plan_for(cls, scale: str) -> ModularPlan:
        return study_plan(scale)

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**super().analysis_stamp(runs, rules), "sgld": self.plan.sgld.to_dict(),
                "development": self._development(runs), "llc_checkpoints": self.plan.llc_checkpoints}

    def _development(self, runs: list[RunConfig]) -> list[str]:
        """Ids of the runs of `runs` whose LLC is traced over training."""
        return sorted({run.run_id for run in self.plan.development_runs()} & {run.run_id for run in runs})

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        from headway.analysis.llc.trace import llc_trace
        from headway.studies.modular.analyse import analyse_members

        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.tables}
        for members in by_task(runs).values():
            for name, frame in analyse_members(run_dir, runs, members, device, self.rules.coverage).items():
                parts[name].append(self.tag(frame, runs, members))
        traced = [i for i, run in enumerate(runs) if run.run_id in self._development(runs)]
        parts["llc_curve"] = [llc_trace(run_dir, folder / LLC_TRACE, runs, traced, self.plan.sgld,
                                        self.plan.llc_checkpoints, device, self.progress, self.schemas["llc_curve"],
                                        self.rules.llc_validity(), weights="all",
                                        tag=lambda frame: self.tag(frame, runs, traced),
                                        stamp={"version": self.version, **self.precision_stamp()},
                                        precision=self.compute.precision, deadline=self.deadline)]
        return {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame() for name, frames in parts.items()}

    def summarise(self, data: StudyData) -> ModularTables:
        from headway.analysis.llc.trace import estimator_bias
        from headway.studies.modular.tables import summarise

        traced = len(data.tables["llc_curve"]) > 0
        return summarise(data, estimator_bias(self.plan.sgld) if traced else math.nan)

    @staticmethod
    def verdicts(summary: ModularTables, rules: ModularRules) -> list[Verdict]:
        from headway.studies.modular.verdicts import verdicts

        return verdicts(summary, rules)

    def report(self, data: StudyData, summary: ModularTables, found: list[Verdict]) -> Path:
        from headway.studies.modular.report import write_outputs

        return write_outputs(data, summary, found, self.out)
