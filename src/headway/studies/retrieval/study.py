"""`headway study retrieval`: the stacked-heads study from nothing to its report (docs/study-retrieval.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from headway.runs.config import RunConfig
from headway.studies.base import Study, StudyData, by_task
from headway.studies.registry import register_study
from headway.studies.retrieval.plan import STUDY_SCALES, RetrievalPlan, study_plan
from headway.studies.retrieval.rules import RetrievalRules
from headway.studies.retrieval.schema import SCHEMAS
from headway.studies.rules import Rules
from headway.studies.verdict import Verdict

if TYPE_CHECKING:  # the analysis and report load when the study runs, not with its --help
    import torch

    from headway.studies.retrieval.tables import RetrievalTables


@register_study
class RetrievalStudy(Study):
    """Depth law, head roles and circuits, emergence order, depth probes and conditional retrieval."""

    name = "retrieval"
    summary = "The stacked-heads study: depth law, head roles, emergence, depth probes, conditional retrieval."
    doc = "docs/study-retrieval.md"
    plan_class = RetrievalPlan
    scales = STUDY_SCALES
    run_settings = ("steps", "vocab", "chains", "d_model", "loss")
    schemas = SCHEMAS
    tables = tuple(SCHEMAS)
    version = 6  # 6: probes sized by d_model and vocab, with train accuracy; the composition check
    rules_class = RetrievalRules

    @classmethod
    def plan_for(cls, scale: str) -> RetrievalPlan:
        return study_plan(scale)

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        from headway.studies.retrieval.analyse import analyse_members

        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.tables}
        for members in by_task(runs).values():
            for name, frame in analyse_members(run_dir, runs, members, device, self.rules).items():
                parts[name].append(self.tag(frame, runs, members))
        return {name: pd.concat(frames, ignore_index=True) for name, frames in parts.items()}

    def summarise(self, data: StudyData) -> RetrievalTables:
        from headway.studies.retrieval.tables import summarise

        return summarise(data)

    @staticmethod
    def verdicts(summary: RetrievalTables, rules: Rules) -> list[Verdict]:
        from headway.studies.retrieval.verdicts import verdicts

        return verdicts(summary, rules)

    def report(self, data: StudyData, summary: RetrievalTables, found: list[Verdict]) -> Path:
        from headway.studies.retrieval.report import write_outputs

        return write_outputs(data, summary, found, self.out)
