"""headway: grow small transformers on algorithmic tasks and measure the circuits they form.

The names most scripts need are importable from here (`from headway import train_runs,
load_metrics`); they load on first use, so `import headway` stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

_EXPORTS = {
    "ConfigError": "headway.errors",
    "RetrievalConfig": "headway.tasks.retrieval",
    "generate": "headway.tasks.retrieval",
    "make_pools": "headway.tasks.pools",
    "solve": "headway.tasks.solver",
    "ModelConfig": "headway.model.config",
    "EnsembleTransformer": "headway.model.transformer",
    "TrainConfig": "headway.train.config",
    "RunConfig": "headway.runs.config",
    "expand_grid": "headway.runs.config",
    "group_runs": "headway.runs.config",
    "train_runs": "headway.train.sweep",
    "EnsembleTrainer": "headway.train.trainer",
    "load_runs": "headway.runs.store",
    "load_metrics": "headway.runs.store",
    "load_summary": "headway.runs.store",
    "load_model": "headway.runs.store",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'headway' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
