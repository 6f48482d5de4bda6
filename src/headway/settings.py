"""What the config dataclasses share: value checks with one wording, and dict round-trips.

Every refusal names the setting, the value given and what is allowed, e.g.
"heads = 0 is invalid; use an integer >= 1".
"""

from __future__ import annotations

import math
import types
import typing
from dataclasses import asdict, fields
from numbers import Integral, Real
from typing import Any, ClassVar, TypeVar

import numpy as np

from headway.errors import ConfigError

T = TypeVar("T", bound="Settings")


TRUE = ("true", "yes", "on", "1")
FALSE = ("false", "no", "off", "0")
# Bounds on an integer's spelling, so that `1e999999999` or a 100,000-digit number is refused at once instead of
# being spelt out: its length in characters, and its decimal exponent (a float's largest, the bound integers had
# when they were read as floats; each setting's own range refuses the large values that pass).
MAX_NUMBER_TEXT = 400
MAX_EXPONENT = 308


def parse_setting(flag: str, text: str, kind: type) -> Any:
    """One value of a setting of type `kind` from its text (`flag`: how the setting is named in a refusal): true or
    false, 'none' (None) for a setting other than a string, an exact whole number, a finite float, or the text."""
    text = text.strip()
    if kind is bool:
        if text.lower() in TRUE:
            return True
        if text.lower() in FALSE:
            return False
        raise ConfigError(f"{flag} got {text!r}; use true or false")
    if kind is not str and text.lower() == "none":  # 'none' is a word for choices such as curriculum
        return None
    try:
        if kind is int:
            return whole_number(text)
        value = kind(text)
    except ValueError:
        raise ConfigError(f"{flag} got {text!r}; expected {'an integer' if kind is int else 'a number'}") from None
    if kind is float and not math.isfinite(value):
        raise ConfigError(f"{flag} got {text!r}; expected a finite number")
    return value


def whole_number(text: str) -> int:
    """The integer `text` spells exactly: `2`, `2.0`, `2e4`; ValueError for anything whose decimal value is not a
    whole number (`2.5`, `2.0000000000000001`, which a float would round to 2) or not finite."""
    from decimal import Decimal, InvalidOperation

    if len(text) > MAX_NUMBER_TEXT:
        raise ValueError(text)
    try:
        value = Decimal(text)
    except InvalidOperation:
        raise ValueError(text) from None
    if not value.is_finite() or value.adjusted() > MAX_EXPONENT or value != value.to_integral_value():
        raise ValueError(text)
    return int(value)


def is_integer(value: Any) -> bool:
    """Whether `value` is a whole number: a Python or numpy integer, not a boolean."""
    return isinstance(value, Integral) and not isinstance(value, bool | np.bool_)


def check_int(name: str, value: Any, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number (numpy integers accepted, booleans refused), optionally >= minimum and <= maximum."""
    if not is_integer(value):
        raise ConfigError(f"{name} = {value!r} is not an integer; use a whole number" + _int_range(minimum, maximum))
    if (minimum is not None and value < minimum) or (maximum is not None and value > maximum):
        raise ConfigError(f"{name} = {value!r} is invalid; use an integer{_int_range(minimum, maximum)}")
    return int(value)


def _int_range(minimum: int | None, maximum: int | None) -> str:
    """How the allowed integers are written in a refusal: " >= 1", " <= 9" or " in 1..9"."""
    if maximum is None:
        return "" if minimum is None else f" >= {minimum}"
    return f" <= {maximum}" if minimum is None else f" in {minimum}..{maximum}"


def check_number(name: str, value: Any, low: float, high: float = math.inf, *,
                 low_open: bool = False, high_open: bool = False) -> float:
    """A finite real number between low and high (each end included unless `*_open`); ints become floats.
    Infinities and NaN are refused whatever the bounds: no setting means anything there, and JSON cannot
    store them."""
    left = "(" if low_open else "["
    right = ")" if high_open or high == math.inf else "]"
    allowed = f"use a number in {left}{low:g}, {high:g}{right}"
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ConfigError(f"{name} = {value!r} is not a number; {allowed}")
    try:
        number = float(value)
    except OverflowError:  # an integer beyond every float
        number = math.copysign(math.inf, value)
    if math.isnan(number):
        raise ConfigError(f"{name} = {value!r} is not a number; {allowed}")
    below = number <= low if low_open else number < low
    above = number >= high if high_open else number > high
    if below or above or not math.isfinite(number):
        raise ConfigError(f"{name} = {value!r} is invalid; {allowed}")
    return number


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """One of a fixed set of names."""
    if value not in choices:
        raise ConfigError(f"{name} = {value!r} is unknown; choose one of {', '.join(choices)}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """True or False (numpy booleans accepted, as a DataFrame row holds them)."""
    if not isinstance(value, bool | np.bool_):
        raise ConfigError(f"{name} = {value!r} is not a boolean; use true or false")
    return bool(value)


def field_types(cls: type) -> dict[str, type]:
    """Field name -> value type of a config dataclass (`int` for `int | None`)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields(cls):
        kind = hints[f.name]
        if isinstance(kind, types.UnionType) or typing.get_origin(kind) is typing.Union:
            kind = next(a for a in typing.get_args(kind) if a is not type(None))
        out[f.name] = kind
    return out


class Settings:
    """Mixin for frozen config dataclasses: `normalise` stores checked values, `to_dict` and
    `from_dict` round-trip through plain dictionaries (unknown keys are refused).

    `LATER` names the settings added after runs were first stored, each with the value that keeps
    the older behaviour: `stored_dict` leaves them out while they hold it, so adding a setting never
    changes the id or the stored config of a run that does not use it."""

    LATER: ClassVar[dict[str, Any]] = {}

    def normalise(self, **values: Any) -> None:
        """Store checked (converted) values on this frozen instance."""
        for name, value in values.items():
            object.__setattr__(self, name, value)

    def to_dict(self) -> dict[str, Any]:
        """Every setting."""
        return asdict(self)

    def stored_dict(self) -> dict[str, Any]:
        """Every setting except the LATER ones at their older-behaviour value: what identifies a run."""
        return {k: v for k, v in asdict(self).items() if not (k in self.LATER and v == self.LATER[k])}

    @classmethod
    def from_dict(cls: type[T], data: dict[str, Any]) -> T:
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise ConfigError(f"unknown setting(s) {', '.join(unknown)} for {cls.__name__}; "
                              f"allowed: {', '.join(known)}")
        return cls(**data)
