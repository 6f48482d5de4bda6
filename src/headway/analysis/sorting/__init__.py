"""What the one-layer models trained on the sorting task do: OV/QK circuits, head modes, ablations and direct
logit attribution."""
