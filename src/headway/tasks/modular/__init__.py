"""Modular addition, the classic grokking task (docs/modular-task.md). The Fourier analysis of the models
trained on it is `headway.analysis.modular`."""

from headway.tasks.modular.task import ModularBatch, ModularConfig

__all__ = ["ModularBatch", "ModularConfig"]
