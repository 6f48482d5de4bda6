"""The list-sorting task (docs/sorting-task.md) and the analyses of its one-layer models: OV/QK circuits,
head modes, ablations and direct logit attribution."""

from headway.tasks.sorting.task import SortingBatch, SortingConfig, encode, generate

__all__ = ["SortingBatch", "SortingConfig", "encode", "generate"]
