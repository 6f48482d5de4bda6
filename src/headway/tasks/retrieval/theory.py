"""Theorem 1's depth bound: the fewest layers whose reach 3^t covers both ends of D hops."""

from __future__ import annotations


def min_layers(hops: int) -> int:
    """Smallest t with 3^t >= 2·hops (Theorem 1's bound ⌈log₃(2D)⌉, in exact integer arithmetic)."""
    if hops < 1:
        raise ValueError(f"hops = {hops} must be >= 1")
    layers, reach = 0, 1
    while reach < 2 * hops:
        layers, reach = layers + 1, reach * 3
    return layers
