"""Every threshold a study judges by, in one frozen object set before its tables are judged (not before its
runs were first seen: docs/verdicts.md, "What was fixed before which data"): one `Rules` subclass per
study, each field a threshold, level, power requirement or minimum effect with its reason and the values
its sensitivity sweep tries in the field's metadata (`rule(...)`).

The object is the one source of a study's numbers: analysis, summary, verdicts and report all read it; the
fields marked `stage="analysis"` are part of the analysis cache's stamp, so changing one re-analyses what
it affects rather than reusing stale tables; the threshold-sensitivity tables sweep the `sweep` values; and
the report's Methods section prints every field with its reason (`rules_rows`).

Common to every study: `alpha`, the family-wise error rate of all its claims together (Holm's correction,
`headway.studies.verdict.judge`), and `power`, the power a design needs before a null result may count as a
refutation.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from typing import Any

from headway.errors import ConfigError
from headway.settings import Settings

STAGES = ("analysis", "summary")  # when a rule is read: while analysing a model, or when judging the tables


def rule(default: Any, reason: str, sweep: tuple = (), stage: str = "summary", low: float | None = None,
         high: float | None = None, was: Any = None) -> Any:
    """A Rules field: its default, a one-line reason, the values a sensitivity sweep tries (empty: not
    swept), when it is read (`stage`, one of STAGES) and the closed range [low, high] it must lie in. `was`:
    for an analysis rule that was a fixed value of the code before it became a rule, that value: an analysis
    cache stamped before then was computed with it, so it stays valid while the rule holds that value."""
    if stage not in STAGES:
        raise ConfigError(f"rule stage {stage!r} is unknown; choose one of {', '.join(STAGES)}")
    if not reason:
        raise ConfigError("a rule needs its reason")
    return field(default=default, metadata={"reason": reason, "sweep": tuple(sweep), "stage": stage,
                                            "low": low, "high": high, "was": was})


@dataclass(frozen=True)
class Rules(Settings):
    """The rules every study shares; a study's subclass adds its own fields with `rule(...)`."""

    alpha: float = rule(0.05, "family-wise error rate of all the study's claims together (Holm's correction)",
                        low=0.0, high=1.0)
    power: float = rule(0.8, "power a design must have to detect a claim's stated effect before a null result "
                             "counts as a refutation; below it the claim is not testable", low=0.0, high=1.0)

    def __post_init__(self) -> None:
        """Refuse a value outside its field's range, naming the rule and what is allowed."""
        for f in dataclasses.fields(self):
            value, low, high = getattr(self, f.name), f.metadata.get("low"), f.metadata.get("high")
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            if value != value or (low is not None and value < low) or (high is not None and value > high):
                allowed = f"[{'-inf' if low is None else f'{low:g}'}, {'inf' if high is None else f'{high:g}'}]"
                raise ConfigError(f"rule {f.name} = {value!r} is invalid; use a number in {allowed}")

    def stamp(self, stage: str = "analysis") -> dict[str, Any]:
        """The rules read at `stage`, by name, with the values their sweep tries where it has one (an analysis
        that computes a sensitivity sweep depends on those too): what a cached analysis depends on."""
        return {f.name: [getattr(self, f.name), list(f.metadata["sweep"])] if f.metadata["sweep"]
                else getattr(self, f.name) for f in dataclasses.fields(self) if f.metadata["stage"] == stage}

    def stamps(self, stage: str = "analysis") -> list[dict[str, Any]]:
        """Every stamp a cache computed under these rules may carry: today's (`stamp`), then those written
        before some of the rules that were fixed values of the code (`rule(was=...)`) became rules, each of those
        holding the value it had then (rules became rules at different times, so any of them may be absent)."""
        now = self.stamp(stage)
        at_was = [f.name for f in dataclasses.fields(self) if f.name in now and f.metadata["was"] is not None
                  and getattr(self, f.name) == f.metadata["was"]]
        return [{name: value for name, value in now.items() if name not in absent}
                for size in range(len(at_was) + 1) for absent in itertools.combinations(at_was, size)]

    def sweeps(self) -> dict[str, tuple]:
        """Rule name → the values its sensitivity sweep tries (swept rules only), in field order."""
        return {f.name: f.metadata["sweep"] for f in dataclasses.fields(self) if f.metadata["sweep"]}

    def rows(self) -> list[dict[str, Any]]:
        """One row per rule: name, value, stage, reason and sweep, for the report's Methods section."""
        return [{"rule": f.name, "value": getattr(self, f.name), "stage": f.metadata["stage"],
                 "reason": f.metadata["reason"], "sweep": ", ".join(f"{v:g}" if isinstance(v, float) else str(v)
                                                                    for v in f.metadata["sweep"])}
                for f in dataclasses.fields(self)]

    def changed_from(self, other: Rules) -> dict[str, Any]:
        """The rules whose value differs from `other`'s, name → this value (in field order)."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)}

    def changed(self, **values: Any) -> Rules:
        """A copy with some rules changed (unknown names refused)."""
        known = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"unknown rule(s) {', '.join(unknown)}; the rules are {', '.join(sorted(known))}")
        return dataclasses.replace(self, **values)
