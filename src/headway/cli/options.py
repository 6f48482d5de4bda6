"""Command-line options generated from the config dataclasses, so every setting can be set or swept."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Any

import click

from headway.errors import ConfigError
from headway.tasks.formulations import parse_formulations
from headway.tasks.questions import QuestionSet

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


def question_options(command: click.Command) -> click.Command:
    """The options that choose the questions, shared by `llm-eval` and `data prompts`."""
    options = [
        click.option("--formulations", "-f", default="all", show_default=True,
                     help="F1 assign, F2 code, F3 boxes, F4 wizards, F5 relatives: keys or names, comma list."),
        click.option("--max-hops", type=int, default=QuestionSet.max_hops, show_default=True,
                     help="Ask about 1..MAX_HOPS hops."),
        click.option("--questions", "-n", type=int, default=QuestionSet.questions, show_default=True,
                     help="Questions per formulation and hop count."),
        click.option("--chains", type=int, default=QuestionSet.chains, show_default=True,
                     help="Chains per question (the queried one plus distractors)."),
        click.option("--options", "n_options", type=int, default=QuestionSet.options, show_default=True,
                     help="Options per multiple-choice question (F1-F4)."),
        click.option("--seed", type=int, default=QuestionSet.seed, show_default=True),
    ]
    for option in reversed(options):
        command = option(command)
    return command


def question_set(formulations: str, max_hops: int, questions: int, chains: int, n_options: int,
                 seed: int) -> QuestionSet:
    """The QuestionSet the shared options describe."""
    keys = tuple(f.key for f in parse_formulations(formulations))
    return QuestionSet(formulations=keys, max_hops=max_hops, questions=questions, chains=chains, options=n_options,
                       seed=seed)
