"""`headway study recipes`: named variants of one cell's recipe trained side by side, how far and how fast each
learns, and for the conditional retrieval cell which lookup forms (docs/study-retrieval.md, "Recipes over one
cell"). A sweep for choosing a recipe, not a test of a claim: it judges none."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from headway.runs.config import RunConfig
from headway.studies.base import Study, joined
from headway.studies.recipes.plan import SCALES, RecipePlan
from headway.studies.recipes.rules import RecipeRules
from headway.studies.recipes.schema import SCHEMAS
from headway.studies.registry import register_study

if TYPE_CHECKING:  # the analysis loads when the study runs, not with its --help
    import pandas as pd
    import torch

PROBE_SEED = 12345  # the fresh examples every run is probed on


@register_study
class RecipesStudy(Study):
    """Variants × seeds over one base cell; accuracy over training per variant; conditional probes."""

    name = "recipes"
    summary = "Train named recipe variants of one cell side by side: how far and how fast each learns."
    doc = "docs/study-retrieval.md"
    plan_class = RecipePlan
    scales = SCALES
    schemas = SCHEMAS
    version = 1
    rules_class = RecipeRules
    results_file = "sweep.csv"
    plan: RecipePlan
    rules: RecipeRules

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        return {**super().analysis_stamp(runs, rules), "probe_examples": self.plan.probe_examples}

    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        """The conditional probes of every D = 1 conditional run, one run at a time (each holds its residual
        streams); nothing for other runs."""
        from headway.analysis.retrieval.conditional import conditional_probes
        from headway.runs.store import load_model

        parts: dict[str, list[pd.DataFrame]] = {"probes": []}
        if self.plan.probe_examples:
            for i, run in enumerate(runs):
                if run.task_name == "retrieval" and run.task.conditional and run.task.hops == 1:
                    model = load_model(run_dir, [i], device=device)
                    probes = conditional_probes(model, run.task, self.plan.probe_examples, PROBE_SEED)
                    parts["probes"].append(self.tag(probes, runs, [i]))
        return joined(parts)
