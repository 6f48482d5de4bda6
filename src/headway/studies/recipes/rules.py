"""The recipe sweep's one rule: the accuracy a run must reach to count as having learned its cell."""

from __future__ import annotations

from dataclasses import dataclass

from headway.studies.rules import Rules, rule


@dataclass(frozen=True)
class RecipeRules(Rules):
    """What the sweep's tables count; it judges no claim (its verdicts are empty), so α and power go unused."""

    reached: float = rule(0.9, "final validation accuracy at which a run counts as having learned its cell, and the "
                               "level whose first crossing the tables time (the retrieval study's solved accuracy)",
                          low=0.0, high=1.0)
