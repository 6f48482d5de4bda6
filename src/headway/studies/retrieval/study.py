"""`headway study retrieval`: train the study's grids, analyse every model, write tables, figures,
`summary.json` and an offline HTML report. Everything already in the output folder is reused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from headway.studies.ensembles import ANALYSIS, RUNS, hardware_description, train_and_analyse
from headway.studies.retrieval.analyse import TABLES, analyse_ensemble
from headway.studies.retrieval.plan import StudyPlan


@dataclass
class StudyData:
    """Everything the report is made from: metrics of the plan's runs and the analysis tables."""

    plan: StudyPlan
    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    hardware: dict[str, str]


def run_study(plan: StudyPlan, out: Path | str, device: str = "auto", progress: bool = True) -> Path:
    """Train, analyse and report the study described by `plan` into `out`; return the report's path."""
    from headway.studies.retrieval.report import write_outputs

    out = Path(out)
    grid = train_and_analyse(plan.runs(), out, TABLES, lambda run_dir, target: analyse_ensemble(
        run_dir, out / ANALYSIS, target), device, progress)
    data = StudyData(plan, grid.metrics, grid.tables, grid.seconds, hardware_description(grid.device))
    return write_outputs(data, out, out / RUNS)
