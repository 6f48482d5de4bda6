"""`headway study retrieval`: the stacked-heads study from nothing to its report (docs/study-retrieval.md)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from headway.runs.config import RunConfig
from headway.studies.base import Study, joined
from headway.studies.registry import register_study
from headway.studies.retrieval.plan import STUDY_SCALES, RetrievalPlan
from headway.studies.retrieval.rules import RetrievalRules
from headway.studies.retrieval.schema import SCHEMAS

if TYPE_CHECKING:  # the analysis loads when the study runs, not with its --help
    import pandas as pd
    import torch


@register_study
class RetrievalStudy(Study):
    """Depth law, head roles and circuits, emergence order, depth probes and conditional retrieval."""

    name = "retrieval"
    summary = "The stacked-heads study: depth law, head roles, emergence, depth probes, conditional retrieval."
    doc = "docs/study-retrieval.md"
    plan_class = RetrievalPlan
    scales = STUDY_SCALES
    run_settings = ("steps", "vocab", "chains", "heads", "d_model", "loss")
    schemas = SCHEMAS
    # 6: probes sized by d_model and vocab, with train accuracy; the composition check; 7: orders; 8: flow-gated
    # link probes (rows of two more sites) and the position control (two optional composition columns); 9: the
    # gated probes read per order class
    version = 9
    # a version-6 analysis is current without its per-order table, a version-7 one without version 8's rows and
    # columns, a version-8 one without the per-class probe reads (its weights may not be kept): the classifier then
    # reads the evidence it has
    added_tables = {7: ("orders",), 8: (), 9: ("probe_orders",)}
    rules_class = RetrievalRules

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        from headway.studies.retrieval.analyse import analyse_members

        return joined(self.tagged_by_task(runs, lambda members: analyse_members(run_dir, runs, members, device,
                                                                                self.rules)))
