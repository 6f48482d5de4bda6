"""Named plugin registries (tasks, studies): registration by class decorator, discovery of the
built-in ones (the sub-packages of a package: a new plugin is a folder) and of other packages'
(an entry-point group), and look-ups that list the known names on a miss."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
from collections.abc import Callable
from importlib.metadata import entry_points
from typing import Generic, TypeVar

from headway.errors import ConfigError

T = TypeVar("T", bound=type)


class Registry(Generic[T]):
    """Classes of one kind by their `name` attribute."""

    def __init__(self, kind: str, base: type, package: str, group: str, required: tuple[str, ...],
                 check: Callable[[T, dict[str, T]], None] | None = None) -> None:
        """`kind` names the plugins in messages; registered classes must subclass `base`, set the
        class attributes `required` and pass `check(cls, registered)`; built-ins are the sub-packages
        of `package`, others come from the entry-point `group`."""
        self.kind, self.base, self.package, self.group = kind, base, package, group
        self.required, self.check = ("name", *required), check
        self._classes: dict[str, T] = {}
        self._discovered = False

    def register(self, cls: T) -> T:
        """Class decorator: register `cls` under `cls.name`. Refuses an incomplete class, a name
        another class holds, and whatever `check` refuses. Registering the same class again (a
        module reload) replaces it."""
        where = f"{getattr(cls, '__module__', '?')}.{getattr(cls, '__qualname__', cls)}"
        if not (inspect.isclass(cls) and issubclass(cls, self.base)):
            raise ConfigError(f"{where} cannot be registered as a {self.kind}: subclass "
                              f"{self.base.__module__}.{self.base.__qualname__}")
        missing = [attr for attr in self.required if not hasattr(cls, attr)]
        abstract = sorted(getattr(cls, "__abstractmethods__", ()))
        if missing or abstract:
            needs = [f"set {', '.join(missing)}" if missing else "", f"implement {', '.join(abstract)}" if abstract else ""]
            raise ConfigError(f"{self.kind} class {where} is incomplete: {'; '.join(filter(None, needs))}")
        if not isinstance(cls.name, str) or not cls.name.isidentifier() or cls.name != cls.name.lower():
            raise ConfigError(f"{self.kind} name {cls.name!r} of {where} must be a lower-case identifier")
        known = self._classes.get(cls.name)
        if known is not None and (known.__module__, known.__qualname__) != (cls.__module__, cls.__qualname__):
            raise ConfigError(f"{self.kind} name {cls.name!r} is already registered by "
                              f"{known.__module__}.{known.__qualname__}; {where} must choose another name")
        if self.check is not None:
            self.check(cls, {name: other for name, other in self._classes.items() if name != cls.name})
        self._classes[cls.name] = cls
        return cls

    def get(self, name: str) -> T:
        """The class registered as `name`."""
        self._discover()
        if name not in self._classes:
            raise ConfigError(f"{self.kind} = {name!r} is unknown; choose one of {', '.join(self.names())}")
        return self._classes[name]

    def names(self) -> list[str]:
        """Every registered name, sorted."""
        self._discover()
        return sorted(self._classes)

    def classes(self) -> list[T]:
        """Every registered class, by name."""
        return [self._classes[name] for name in self.names()]

    def _discover(self) -> None:
        """Import the built-in sub-packages and the entry points once, so that they register."""
        if self._discovered:
            return
        self._discovered = True
        package = importlib.import_module(self.package)
        for info in pkgutil.iter_modules(package.__path__):
            if info.ispkg:
                importlib.import_module(f"{self.package}.{info.name}")
        for entry in entry_points(group=self.group):
            entry.load()
