"""Writes the recipe sweep's outputs: `sweep.csv` (one row per run), `table.md` (one row per variant),
`accuracy_vs_steps.png`, `probes.csv` (the conditional probes, averaged over seeds, where any were made) and
`summary.json`; `table.md` is the report."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pandas as pd

from headway.runs import layout
from headway.studies.base import StudyData
from headway.studies.recipes.plan import BASES, VARIANTS, WHY
from headway.studies.recipes.rules import RecipeRules
from headway.studies.recipes.tables import RecipeTables
from headway.studies.variants import described
from headway.studies.verdict import Verdict

FIGURE = "accuracy_vs_steps.png"


def write_outputs(data: StudyData, tables: RecipeTables, verdicts: list[Verdict], out: Path) -> Path:
    """Every output of the sweep into `out`; return the table's path."""
    from headway.plots.recipes import plot_recipes

    plan, rules = data.plan, data.rules
    layout.write_text(out / "sweep.csv", tables.runs.to_csv(index=False))
    if len(tables.probes):
        layout.write_text(out / "probes.csv", tables.probes.to_csv(index=False))
    if len(tables.curves):
        plot_recipes(tables.curves, list(plan.variants), rules.reached, f"{plan.base}: thin = seed, thick = mean", out / FIGURE)
    layout.write_json(out / "summary.json", {
        "study": "recipes", "scale": plan.scale, "base": plan.base, "variants": list(plan.variants),
        "seeds": list(plan.seeds), "settings": plan.settings, "rules": rules.to_dict(),
        "per_variant": [{k: _plain(v) for k, v in row.items()} for row in tables.variants.to_dict("records")],
        "verdicts": [v.to_dict() for v in verdicts], "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware, "ensembles": data.ensembles}, checked=False)  # an output, never read back
    layout.write_text(out / "table.md", markdown(plan.base, tables.variants, rules))
    return out / "table.md"


def markdown(base: str, variants: pd.DataFrame, rules: RecipeRules) -> str:
    """The per-variant table as markdown under a line naming the base cell; accuracies with 3 decimals, steps
    whole, a missing value as '–'."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "–" if math.isnan(value) else (f"{value:.3f}" if value <= 1 else f"{value:.0f}")
        return str(value)

    header = ["variant", "settings changed", "why", "seeds (done)", "steps", "final val acc mean [min, max]", "best",
              f"seeds ≥ {rules.reached:g}", f"median steps to {rules.reached:g}"]
    lines = [f"Base cell `{base}`: {BASES[base][1]}.", "", "| " + " | ".join(header) + " |",
             "|" + "---|" * len(header)]
    for row in variants.to_dict("records"):
        spec = row["variant"]
        why = "; ".join(WHY[part] for part in spec.split("+") if part in WHY) or "–"
        final = f"{cell(row['final_mean'])} [{cell(row['final_min'])}, {cell(row['final_max'])}]"
        lines.append("| " + " | ".join([spec, described(spec, VARIANTS), why, f"{row['seeds']} ({row['complete']})",
                                        str(row["steps"]), final, cell(row["best"]), f"{row['reached']}/{row['seeds']}",
                                        cell(row["median_steps_to_reach"])]) + " |")
    return "\n".join(lines) + "\n"


def _plain(value: Any) -> Any:
    """A table value as JSON holds it: NaN as None, numpy scalars as Python's."""
    if hasattr(value, "item"):
        value = value.item()
    return None if isinstance(value, float) and math.isnan(value) else value
