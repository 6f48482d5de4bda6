"""`headway study sorting`: train the grid, analyse every model, write tables, figures,
`summary.json` and an offline HTML report. Everything already in the output folder is reused."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import torch

from headway.studies.ensembles import ANALYSIS, hardware_description, train_and_analyse
from headway.studies.sorting.analyse import TABLES, analyse_ensemble
from headway.studies.sorting.plan import SortingPlan


@dataclass
class SortingStudyData:
    """What the report is made from: the plan, training metrics, analysis tables and timings."""

    plan: SortingPlan
    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    hardware: dict[str, str]
    ensembles: list[str]


def run_sorting_study(plan: SortingPlan, out: Path | str, device: str = "auto", progress: bool = True) -> Path:
    """Train, analyse and report the sorting study described by `plan` into `out`; return the report's path."""
    from headway.studies.sorting.report import write_outputs

    out = Path(out)
    development = {run.run_id for run in plan.development_runs()}

    def analyse(run_dir: Path, target: torch.device) -> dict[str, pd.DataFrame]:
        tables = analyse_ensemble(run_dir, out / ANALYSIS, plan.sgld, development, plan.llc_checkpoints,
                                  plan.examples, target, progress)
        return {name: frame.assign(ensemble=run_dir.name) for name, frame in tables.items()}

    grid = train_and_analyse(plan.runs(), out, TABLES, analyse, device, progress)
    data = SortingStudyData(plan, grid.metrics, grid.tables, grid.seconds, hardware_description(grid.device),
                            [d.name for d in grid.ensembles])
    return write_outputs(data, out)
