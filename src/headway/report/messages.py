"""Messages said once: diagnostics that repeat with other numbers (one per checkpoint, per instance) merged into
one line that gives the range of each number and how many times it was said."""

from __future__ import annotations

import re
from collections.abc import Iterable

NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[-+]?\d+)?")


def said_once(messages: Iterable[str]) -> list[str]:
    """`messages` with those that differ only in their numbers merged, in order of first appearance: "mean MALA
    acceptance 0.209–0.305 < 0.9: … (5 times)"; a number the same in each stays as it is."""
    groups: dict[str, list[str]] = {}
    for message in messages:
        groups.setdefault(NUMBER.sub("#", message), []).append(message)
    return [_merged(group) for group in groups.values()]


def _merged(group: list[str]) -> str:
    """One message of a group of the same template: each number as its range over the group."""
    if len(group) == 1:
        return group[0]
    text = NUMBER.split(group[0])
    columns = list(zip(*(NUMBER.findall(message) for message in group)))
    parts = [text[0]]
    for values, after in zip(columns, text[1:]):
        numbers = [float(value) for value in values]
        low, high = min(zip(numbers, values)), max(zip(numbers, values))
        parts += [low[1] if low[0] == high[0] else f"{low[1]}–{high[1]}", after]
    return f"{''.join(parts)} ({len(group)} times)"
