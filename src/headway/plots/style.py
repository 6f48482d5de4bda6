"""What every figure shares about where its legend goes."""

from __future__ import annotations

# A legend beside its axes (right of them, from the top), never over the lines it names; the figure needs
# `layout="constrained"` to make room for it.
OUTSIDE = {"loc": "upper left", "bbox_to_anchor": (1.01, 1.0), "fontsize": 8, "frameon": False}
