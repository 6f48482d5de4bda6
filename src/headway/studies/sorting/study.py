"""`headway study sorting`: the list-sorting study from nothing to its report (docs/study-sorting.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from headway.runs.config import RunConfig
from headway.studies.base import TracingStudy, by_task, joined
from headway.studies.registry import register_study
from headway.studies.sorting.plan import STUDY_SCALES, SortingPlan, data_label
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.schema import SCHEMAS

if TYPE_CHECKING:  # the analysis loads when the study runs, not with its --help
    import pandas as pd
    import torch


@register_study
class SortingStudy(TracingStudy):
    """Head modes and circuits, ablations, the LLC over training, and the effect of the data's gaps."""

    name = "sorting"
    summary = "The list-sorting study: head modes, copy suppression, the LLC over training, data features."
    doc = "docs/study-sorting.md"
    plan_class = SortingPlan
    scales = STUDY_SCALES
    schemas = SCHEMAS
    version = 6
    # a version-5 analysis is current without the LLC's stability on the traced runs (their weights may not be
    # kept); the rise-and-fall claim then says it was not measured rather than weigh nothing
    added_tables = {6: ("llc_stability",)}
    rules_class = SortingRules
    plan: SortingPlan
    rules: SortingRules

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**super().analysis_stamp(runs, rules), "llc_weights": self.plan.llc_weights,
                "examples": self.plan.examples}

    def tag_columns(self, run: RunConfig) -> dict[str, Any]:
        return {"data": data_label(run)}

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        import numpy as np
        import torch

        from headway.errors import TimeLimitReached
        from headway.studies.sorting.analyse import analyse_members, save_circuits

        plan = self.plan
        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.schemas}
        # the trace first: it is saved checkpoint by checkpoint, so a time limit stops it between checkpoints
        # and the next call continues it at once; the final analyses below start only before the deadline
        chosen = self.llc_settings(run_dir, folder, runs, device)  # one setting for the trace and the final LLCs
        parts["llc_curve"] = [self.trace_llc(run_dir, folder, runs, device, chosen, weights=plan.llc_weights)]
        parts["llc_stability"] = [self.measure_stability(run_dir, folder, runs, device, chosen, parts["llc_curve"][0])]
        TimeLimitReached.check(self.deadline, f"before the final analyses of {run_dir.name}")
        circuits: dict[str, list[torch.Tensor]] = {"ov": [], "qk": [], "scores": []}
        order: list[int] = []
        for members in by_task(runs).values():
            tables, arrays = analyse_members(run_dir, runs, members, device, plan.examples, chosen, self.progress,
                                             data_label(runs[members[0]]), self.rules, self.compute.precision,
                                             self.compute.sampler_compile_mode(device))
            for name, frame in tables.items():
                parts[name].append(self.tag(frame, runs, members))
            for name, array in arrays.items():
                circuits[name].append(array)
            order += members
        out = joined(parts)
        inverse = np.argsort(order)
        save_circuits(folder, {name: torch.cat(arrays)[inverse] for name, arrays in circuits.items()}, runs)
        return out

    def cached(self, run_dir: Path) -> dict[str, pd.DataFrame] | None:
        """The cached tables with the ensemble's name, which the report needs to find its circuits."""
        tables = super().cached(run_dir)
        return None if tables is None else {name: frame.assign(ensemble=run_dir.name) for name, frame in tables.items()}
