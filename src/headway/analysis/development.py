"""Development over training, for any task: which checkpoints an LLC trace visits, and each traced
run's stages and LLC peak from its metrics and its LLC trace (`headway.studies.llc_trace` makes
the trace)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from headway.analysis.stages import label_stages, stage_boundaries


def trace_steps(saved: list[int], count: int) -> list[int]:
    """`count` saved steps spread evenly in log(step): the first and last always included."""
    if len(saved) <= count:
        return list(saved)
    grid = np.log10(np.asarray(saved, dtype=float) + 1)
    wanted = np.linspace(grid[0], grid[-1], count)
    picked = sorted({int(np.argmin(np.abs(grid - w))) for w in wanted})
    return [saved[i] for i in picked]


@dataclass
class Development:
    """One traced run over training: its metrics and LLC rows, the stage boundaries and stages the
    stage rule finds, and where the whole-model LLC peaks."""

    run_id: str
    loss: pd.DataFrame  # the run's metrics rows, by step
    llc: pd.DataFrame  # the run's LLC trace rows, every weight group
    boundaries: pd.DataFrame  # stage_boundaries of the validation loss and the whole-model LLC
    stages: pd.DataFrame  # label_stages of the LLC boundaries
    peak_step: int
    peak: float  # largest whole-model LLC of the trace
    final: float  # whole-model LLC at the last traced checkpoint
    rises_then_falls: bool  # the peak is inside the trace and the final LLC is `fall` or more below it
    warnings: list[str]  # distinct SGLD diagnostics of the trace

    def summary(self, title: str) -> dict:
        """The JSON view of summary.json."""
        return {"run_id": self.run_id, "title": title, "boundaries": self.boundaries.to_dict("records"),
                "stages": self.stages.to_dict("records"), "llc_peak_step": self.peak_step,
                "llc_peak": self.peak, "llc_final": self.final}


def development(run_id: str, metrics: pd.DataFrame, trace: pd.DataFrame, fall: float) -> Development:
    """The Development of `run_id` from the gathered metrics and LLC trace tables."""
    loss = metrics[metrics.run_id == run_id].sort_values("step")
    llc = trace[trace.run_id == run_id]
    whole = llc[llc.weights == "all"].sort_values("step")
    boundaries = stage_boundaries(loss.step.to_numpy(), loss.val_loss.to_numpy(), whole.step.to_numpy(),
                                  whole.llc_mean.to_numpy())
    stages = label_stages(boundaries[boundaries.source == "llc"], whole.step.to_numpy(), whole.llc_mean.to_numpy())
    values = whole.llc_mean.to_numpy()
    peak = int(np.nanargmax(values))
    falls = 0 < peak < len(values) - 1 and values[-1] <= (1 - fall) * values[peak]
    return Development(run_id, loss, llc, boundaries, stages, int(whole.step.iloc[peak]), float(values[peak]),
                       float(values[-1]), bool(falls), sorted({w for w in llc.warnings if w}))
