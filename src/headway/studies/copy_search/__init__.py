"""The copy-suppression search (`headway study copy_search`, docs/study-sorting.md, "Searching for
copy-suppression")."""

from headway.studies.copy_search.study import CopySearchStudy

__all__ = ["CopySearchStudy"]
