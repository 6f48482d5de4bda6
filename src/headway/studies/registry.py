"""The study registry: `headway study NAME` for every registered study.

Studies register with the `register_study` class decorator when their package is imported. The
built-in studies are the sub-packages of `headway.studies` (a new study is a folder); other
packages register theirs through the `headway.studies` entry-point group.
"""

from __future__ import annotations

from headway.errors import ConfigError
from headway.plugins import Registry
from headway.studies.base import Plan, Study


def _check_study(cls: type[Study], others: dict[str, type[Study]]) -> None:
    if not issubclass(cls.plan_class, Plan):
        raise ConfigError(f"study {cls.name!r}: plan_class must subclass headway.studies.base.Plan")
    if not cls.scales:
        raise ConfigError(f"study {cls.name!r} declares no scales")


STUDIES: Registry[type[Study]] = Registry("study", Study, "headway.studies", "headway.studies",
                                          required=("summary", "plan_class", "scales", "schemas", "version"),
                                          check=_check_study)
register_study = STUDIES.register
study_class = STUDIES.get
study_names = STUDIES.names
