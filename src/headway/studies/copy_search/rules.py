"""The search's rules (`SearchRules`): the sorting study's rules (what counts as learned, the mode rule's
thresholds) and the search's own test, written before the committed search trained (its correction across
conditions became Holm's afterwards).

Per condition, the claim "copy-suppression is a main mode here" is an exact one-sided binomial test of k
copy-suppression models among the n learned runs against a copy-suppression rate of `null_rate` (at most rare),
with the power to detect a rate of `effect_rate` (half the models: "one of the two main modes"). The conditions
are judged together like every study's claims (`headway.studies.verdict.judge`: Holm over the tested
conditions at family-wise α; a condition without copy-suppression is "not reproduced" only with the power
required, else "not testable").
"""

from __future__ import annotations

from dataclasses import dataclass

from headway.studies.rules import rule
from headway.studies.sorting.rules import SortingRules


@dataclass(frozen=True)
class SearchRules(SortingRules):
    """The sorting study's rules and the search's test (module docstring)."""

    null_rate: float = rule(0.05, "copy-suppression rate under the null: at most rare in a condition", low=0.0, high=1.0)
    effect_rate: float = rule(0.5, "rate the power is computed at: copy-suppression in half the models, one of the "
                                   "two main modes", low=0.0, high=1.0)
