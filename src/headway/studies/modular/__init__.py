"""The modular-addition (grokking) study (`headway study modular`, docs/study-modular.md)."""

from headway.studies.modular.study import ModularStudy

__all__ = ["ModularStudy"]
