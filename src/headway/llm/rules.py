"""The rules of the prompted-LLM evaluation (`headway llm-eval`): each cell of a run (formulation × metric ×
hop count) carries the claim that the model answers above chance there, judged like every study's claims
by `headway.studies.verdict.judge` (Holm's correction over the run's tested cells, those with a p-value, at
`alpha`; a null result a refutation only with `power` to detect the stated `effect`)."""

from __future__ import annotations

from dataclasses import dataclass

from headway.studies.rules import Rules, rule


@dataclass(frozen=True)
class LLMRules(Rules):
    """The llm-eval's rules: the common α and power, and the stated effect of 'above chance'."""

    effect: float = rule(0.3, "stated effect of 'above chance': a true accuracy this far above the cell's chance "
                              "level (absolute; at most 1); a cell not above chance refutes it only with power to "
                              "detect it, else it is not testable", low=0.0, high=1.0)


RULES = LLMRules()  # the rules a run is judged by
