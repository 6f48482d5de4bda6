"""Modular addition, the classic grokking task (docs/modular-task.md), and the Fourier analysis of
the models trained on it."""

from headway.tasks.modular.task import ModularBatch, ModularConfig

__all__ = ["ModularBatch", "ModularConfig"]
