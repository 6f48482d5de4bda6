"""The list-sorting study (`headway study sorting`, docs/study-sorting.md)."""

from headway.studies.sorting.study import SortingStudy

__all__ = ["SortingStudy"]
