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
    "Task": "headway.tasks.base",
    "register_task": "headway.tasks.registry",
    "task_names": "headway.tasks.registry",
    "scale_settings": "headway.tasks.registry",
    "RetrievalConfig": "headway.tasks.retrieval",
    "generate": "headway.tasks.retrieval",
    "SortingConfig": "headway.tasks.sorting",
    "make_pools": "headway.tasks.pools",
    "solve": "headway.tasks.retrieval.solver",
    "ModelConfig": "headway.model.config",
    "EnsembleTransformer": "headway.model.transformer",
    "TrainConfig": "headway.recipe",
    "RunConfig": "headway.runs.config",
    "expand_grid": "headway.runs.config",
    "group_runs": "headway.runs.config",
    "train_runs": "headway.train.sweep",
    "EnsembleTrainer": "headway.train.trainer",
    "load_runs": "headway.runs.store",
    "load_metrics": "headway.runs.store",
    "load_summary": "headway.runs.store",
    "load_model": "headway.runs.store",
    "load_single": "headway.runs.store",
    "SingleModel": "headway.model.single",
    "final_metrics": "headway.runs.store",
    "find_run": "headway.runs.store",
    "SGLDSettings": "headway.analysis.llc",
    "estimate_llc": "headway.analysis.llc",
    "to_transformer_lens": "headway.export.transformer_lens",
    "Study": "headway.studies.base",
    "Verdict": "headway.studies.verdict",
    "register_study": "headway.studies.registry",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'headway' has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
