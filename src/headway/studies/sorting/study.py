"""`headway study sorting`: the list-sorting study from nothing to its report (docs/study-sorting.md)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from headway.runs.config import RunConfig
from headway.studies.base import Study, StudyData, by_task
from headway.studies.registry import register_study
from headway.studies.sorting.plan import STUDY_SCALES, SortingPlan, data_label, study_plan
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.schema import SCHEMAS
from headway.studies.verdict import Verdict

if TYPE_CHECKING:  # the analysis and report load when the study runs, not with its --help
    import torch

    from headway.studies.sorting.tables import SortingTables


@register_study
class SortingStudy(Study):
    """Head modes and circuits, ablations, the LLC over training, and the effect of the data's gaps."""

    name = "sorting"
    summary = "The list-sorting study: head modes, copy suppression, the LLC over training, data features."
    doc = "docs/study-sorting.md"
    plan_class = SortingPlan
    scales = STUDY_SCALES
    schemas = SCHEMAS
    tables = tuple(SCHEMAS)
    version = 4
    rules_class = SortingRules
    plan: SortingPlan
    rules: SortingRules

    @classmethod
    def plan_for(cls, scale: str) -> SortingPlan:
        return study_plan(scale)

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        plan = self.plan
        return {**super().analysis_stamp(runs, rules), "sgld": plan.sgld.to_dict(),  # the rules' stamp holds their sweeps
                "development": self._development(runs), "llc_checkpoints": plan.llc_checkpoints,
                "llc_weights": plan.llc_weights,
                "examples": plan.examples}

    def tag_columns(self, run: RunConfig) -> dict[str, Any]:
        return {"data": data_label(run)}

    def _development(self, runs: list[RunConfig]) -> list[str]:
        """Ids of the runs of `runs` whose LLC is traced over training."""
        return sorted({run.run_id for run in self.plan.development_runs()} & {run.run_id for run in runs})

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        import numpy as np
        import torch

        from headway.analysis.llc.trace import llc_trace
        from headway.studies.sorting.analyse import LLC_TRACE, analyse_members, save_circuits

        from headway.errors import TimeLimitReached

        plan = self.plan
        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.tables}
        traced = [i for i, run in enumerate(runs) if run.run_id in self._development(runs)]
        # the trace first: it is saved checkpoint by checkpoint, so a time limit stops it between checkpoints
        # and the next call continues it at once; the final analyses below start only before the deadline
        parts["llc_curve"] = [llc_trace(run_dir, folder / LLC_TRACE, runs, traced, plan.sgld, plan.llc_checkpoints,
                                        device, self.progress, self.schemas["llc_curve"], self.rules.llc_validity(),
                                        weights=plan.llc_weights,
                                        tag=lambda frame: self.tag(frame, runs, traced),
                                        stamp={"version": self.version, **self.precision_stamp()},
                                        precision=self.compute.precision, deadline=self.deadline)]
        TimeLimitReached.check(self.deadline, f"before the final analyses of {run_dir.name}")
        circuits: dict[str, list[torch.Tensor]] = {"ov": [], "qk": [], "scores": []}
        order: list[int] = []
        for members in by_task(runs).values():
            tables, arrays = analyse_members(run_dir, runs, members, device, plan.examples, plan.sgld, self.progress,
                                             data_label(runs[members[0]]), self.rules, self.compute.precision)
            for name, frame in tables.items():
                parts[name].append(self.tag(frame, runs, members))
            for name, array in arrays.items():
                circuits[name].append(array)
            order += members
        out = {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame() for name, frames in parts.items()}
        inverse = np.argsort(order)
        save_circuits(folder, {name: torch.cat(arrays)[inverse] for name, arrays in circuits.items()}, runs)
        return out

    def cached(self, run_dir: Path) -> dict[str, pd.DataFrame] | None:
        """The cached tables with the ensemble's name, which the report needs to find its circuits."""
        tables = super().cached(run_dir)
        return None if tables is None else {name: frame.assign(ensemble=run_dir.name) for name, frame in tables.items()}

    def summarise(self, data: StudyData) -> SortingTables:
        from headway.analysis.llc.trace import estimator_bias
        from headway.studies.sorting.tables import summarise

        traced = len(data.tables["llc_curve"]) > 0
        return summarise(data, estimator_bias(self.plan.sgld) if traced else math.nan)

    @staticmethod
    def verdicts(summary: SortingTables, rules: SortingRules) -> list[Verdict]:
        from headway.studies.sorting.verdicts import verdicts

        return verdicts(summary, rules)

    def report(self, data: StudyData, summary: SortingTables, found: list[Verdict]) -> Path:
        from headway.studies.sorting.report import write_outputs

        return write_outputs(data, summary, found, self.out)
