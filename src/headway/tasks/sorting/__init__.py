"""The list-sorting task (docs/sorting-task.md): its settings and generator. The analyses of its models
(OV/QK circuits, head modes, ablations, direct logit attribution) are `headway.analysis.sorting`."""

from headway.tasks.sorting.task import SortingBatch, SortingConfig, encode, generate

__all__ = ["SortingBatch", "SortingConfig", "encode", "generate"]
