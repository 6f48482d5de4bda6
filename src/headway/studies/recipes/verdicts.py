"""The recipe sweep judges no claim: it compares recipes for a cell, which a later study then tests."""

from __future__ import annotations

from headway.studies.recipes.rules import RecipeRules
from headway.studies.recipes.tables import RecipeTables
from headway.studies.verdict import Verdict


def verdicts(tables: RecipeTables, rules: RecipeRules) -> list[Verdict]:
    """None: the sweep is descriptive."""
    return []
