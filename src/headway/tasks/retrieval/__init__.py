"""The retrieval task (docs/retrieval-task.md): its settings, generator, reference solver, where things sit in
an example, the information flow Theorem 1 allows and its prompted renderings for language models. The analyses
of the models trained on it are `headway.analysis.retrieval`."""

from headway.tasks.retrieval.config import CURRICULA, LAYOUTS, ORDERS, RetrievalConfig
from headway.tasks.retrieval.generator import RetrievalBatch, generate

__all__ = ["CURRICULA", "LAYOUTS", "ORDERS", "RetrievalBatch", "RetrievalConfig", "generate"]
