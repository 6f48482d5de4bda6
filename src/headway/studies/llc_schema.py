"""The columns of an LLC table, declared once for the studies that estimate it (sorting, modular): an estimate
per instance, and a trace of estimates over training (`headway.analysis.llc.trace`)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from headway.analysis.llc.diagnostics import drift
from headway.runs.schema import TableSchema

# The columns of `LLCResult.to_frame()` with its resolution (`estimate_llc(resolve=True)`): one row per instance.
_ESTIMATE = {"instance": "int", "llc_mean": "float", "llc_std": "float", "llc_se": "float", "init_loss": "float",
             "init_loss_se": "float", "acceptance": "float", "draw_loss": "float", "chance_loss": "float",
             "basin_fraction": "float", "moving_weights": "int", "settings": "str", "choice": "str",
             "llc_chain{n}": "float", "n_warnings": "int", "warnings": "str", "invalid": "str",
             "quadratic_llc": "float", "quadratic_limit": "float", "unresolved_directions": "float", "negative_directions": "float", "shortfall": "float",
             "spectrum": "str", "limited": "str"}
# Absent from tables written before the ceiling and resolution checks and the settings chosen per model (`settings`,
# and `choice`: why those settings, `headway.analysis.llc.study_settings`): such rows are judged without them.
_LATER = ("moving_weights", "settings", "choice", "quadratic_llc", "quadratic_limit", "unresolved_directions",
          "negative_directions", "shortfall", "spectrum", "limited")
LLC = TableSchema.of(_ESTIMATE, optional=_LATER)  # a study adds its tags (`TableSchema.plus`)
# A trace's rows: the step and weight group, the estimate and each chain's loss trace (then a study's tags).
LLC_TRACE = TableSchema.of({"step": "int", "weights": "str", **_ESTIMATE, "loss_trace": "list<list<float>>"},
                           optional=_LATER)
# The model's own stability at two checkpoints of each traced run (`headway.analysis.llc.stability.llc_stability`).
LLC_STABILITY = TableSchema.of({"step": "int", "checkpoint": "str", "variant": "str", "lr": "float",
                                "batch_size": "int", "burnin": "int", "draws": "int", "instance": "int",
                                "llc_mean": "float", "llc_se": "float", "acceptance": "float", "invalid": "str",
                                "change": "float"})


def curve_csv(curve: pd.DataFrame) -> str:
    """A trace as the reports' `llc_curve.csv`: every estimate without its loss traces, plus `llc_drift` (λ̂ of the
    second half of the draws minus the first's, a share of λ̂: `diagnostics.drift`) where the traces were kept;
    reported beside the estimate, not a validity check (docs/decisions.md)."""
    table = curve.copy()
    if "loss_trace" in table.columns:
        table["llc_drift"] = [drift(np.stack(chains), init) if chains is not None and len(chains) else np.nan
                              for chains, init in zip(table.loss_trace, table.init_loss)]
    return table.drop(columns="loss_trace", errors="ignore").to_csv(index=False)
