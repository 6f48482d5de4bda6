"""Cutting a number of items into groups of a bounded size (no torch: run planning imports it)."""

from __future__ import annotations

from headway.errors import ConfigError


def balanced_sizes(total: int, most: int) -> list[int]:
    """Split `total` items into the fewest groups of at most `most`, sizes as equal as possible, larger first."""
    if most < 1:
        raise ConfigError(f"a group must hold at least one item, not {most}")
    groups = -(-total // most)
    small, extra = divmod(total, groups) if groups else (0, 0)
    return [small + 1] * extra + [small] * (groups - extra)
