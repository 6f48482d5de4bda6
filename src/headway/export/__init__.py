"""Trained runs handed to other interpretability libraries (TransformerLens)."""
