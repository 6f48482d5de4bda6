"""The retrieval task (docs/retrieval-task.md), its reference solver, its prompted renderings for
language models, and the analyses of the models trained on it: head scores and roles,
interventions, depth probes and the depth bound of Theorem 1."""

from headway.tasks.retrieval.task import CURRICULA, LAYOUTS, ORDERS, RetrievalBatch, RetrievalConfig, generate

__all__ = ["CURRICULA", "LAYOUTS", "ORDERS", "RetrievalBatch", "RetrievalConfig", "generate"]
