"""The stacked-heads study (`headway study retrieval`, docs/study-retrieval.md)."""

from headway.studies.retrieval.study import RetrievalStudy

__all__ = ["RetrievalStudy"]
