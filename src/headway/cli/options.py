"""Command-line options generated from the config dataclasses, so every setting can be set or swept."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

import click

from headway.errors import ConfigError

TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")


def _base_type(annotation: Any) -> type:
    """int for `int | None`, etc.: the one non-None type of a resolved field annotation."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        return next(a for a in typing.get_args(annotation) if a is not type(None))
    return annotation


def parse_value(name: str, text: str, kind: type) -> Any:
    """One value of setting `name` from the command line."""
    text = text.strip()
    if kind is bool:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise ConfigError(f"--{name} got {text!r}; use true or false")
    if kind is not str and text.lower() == "none":  # 'none' is a word for choices such as curriculum
        return None
    try:
        if kind is int:
            value = float(text)  # accept 2e4 and 1024 alike, but only whole numbers
            if not value.is_integer():
                raise ValueError
            return int(value)
        return kind(text)
    except ValueError:
        raise ConfigError(f"--{name} got {text!r}; expected {'an integer' if kind is int else 'a number'}") from None


def parse_values(name: str, text: str, kind: type) -> list[Any]:
    """A comma-separated list of values; integers also accept an inclusive range `A..B`."""
    values: list[Any] = []
    for part in text.split(","):
        if kind is int and ".." in part:
            lo, hi = (parse_value(name, p, int) for p in part.split("..", 1))
            if hi < lo:
                raise ConfigError(f"--{name} range {part!r} is empty; write LOW..HIGH")
            values.extend(range(lo, hi + 1))
        else:
            values.append(parse_value(name, part, kind))
    return values


def setting_fields(*classes: type) -> dict[str, type]:
    """Field name -> value type over the given config dataclasses."""
    out: dict[str, type] = {}
    for cls in classes:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            out[f.name] = _base_type(hints[f.name])
    return out


def sweep_options(settings: dict[str, type], help_for: Callable[[str], str]) -> Callable:
    """Decorator adding `--name VALUES` for every setting (comma lists sweep)."""

    def decorate(func: Callable) -> Callable:
        for name in reversed(list(settings)):
            flag = "--" + name.replace("_", "-")
            func = click.option(flag, name, default=None, metavar="V[,V…]", help=help_for(name))(func)
        return func

    return decorate
