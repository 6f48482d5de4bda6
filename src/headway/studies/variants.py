"""Variants: named changes of a study's base recipe, written as specs, the one grammar every study axis of recipes
uses (the copy-suppression search's conditions).

A spec is `+`-joined parts, each a name from the study's table of named variants or a flat run setting
`key=value` (`repeats-dense+weight_decay=0`, `distinct+values=200+length=5`); its settings are the named parts'
and the given values applied in order, so a later part wins. Values are read with the setting's own type
(`headway.runs.config.flat_setting_types`), and a name that is neither refuses with the names allowed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from headway.errors import ConfigError
from headway.runs.config import RunConfig, flat_setting_types
from headway.settings import parse_setting


JOIN = "+"


def variant_settings(spec: str, named: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The flat run settings a spec changes from the base recipe (module docstring), in the order given."""
    kinds = flat_setting_types()
    settings: dict[str, Any] = {}
    parts = [part.strip() for part in spec.split(JOIN)]
    if not spec.strip() or not all(parts):
        raise ConfigError(f"variant {spec!r} has an empty part; join names of {', '.join(named)} or key=value "
                          f"settings with '{JOIN}'")
    for part in parts:
        if "=" in part:
            key, text = (side.strip() for side in part.split("=", 1))
            if key == "seed":
                raise ConfigError(f"variant {spec!r} sets the seed; the study's seeds are its --seed axis")
            if key not in kinds:
                raise ConfigError(f"variant {spec!r}: {key!r} is no run setting; allowed: {', '.join(sorted(kinds))}")
            settings[key] = parse_setting(f"variant {spec!r}: {key}", text, kinds[key])
        elif part in named:
            settings.update(named[part])
        else:
            raise ConfigError(f"variant {spec!r}: {part!r} is neither a key=value setting nor one of "
                              f"{', '.join(named)}")
    return settings


def described(spec: str, named: Mapping[str, Mapping[str, Any]]) -> str:
    """A spec's settings in words, for tables and reports: 'repeats true, weight_decay 0', or 'the base recipe'."""
    return ", ".join(f"{key} {value}" for key, value in variant_settings(spec, named).items()) or "the base recipe"


def variant_grids(base: Mapping[str, Any], specs: Sequence[str], named: Mapping[str, Mapping[str, Any]],
                  seeds: Sequence[int], what: str) -> dict[str, list[RunConfig]]:
    """One grid per spec, its runs over `base` in seed order; every setting checked, and two specs that give the
    same runs refused (`what`: how the study calls a spec, in the refusal)."""
    grids = {spec: [RunConfig.from_flat({**base, **variant_settings(spec, named), "seed": seed}) for seed in seeds]
             for spec in specs}
    ids = [run.run_id for runs in grids.values() for run in runs]
    if len(set(ids)) != len(ids):
        raise ConfigError(f"two {what}s give the same runs; give each {what} different settings")
    return grids


def spec_of(grids: Mapping[str, Sequence[RunConfig]]) -> dict[str, str]:
    """Run id -> the spec of the grid it is in."""
    return {run.run_id: spec for spec, runs in grids.items() for run in runs}
