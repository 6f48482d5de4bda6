"""Study-level tables of the modular-addition study (`summarise`): one row per run with its
memorisation and grokking steps and Fourier measures, the spectra, each traced run's development,
and the machine-readable summary."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.development import Development, development
from headway.analysis.emergence import stays_above_from
from headway.runs.store import final_metrics, plain_value
from headway.studies.base import StudyData
from headway.studies.verdict import Verdict

MEMORISED = 0.99  # training-set accuracy a run first reaches at its memorisation step
GENERALISED = 0.95  # test accuracy a run keeps from its grokking step to the end
DELAY = 2.0  # grokking, not plain learning: the grokking step is at least this multiple of the memorisation step
LLC_FALL = 0.1  # the final LLC must sit this fraction of the peak below it for "rises, then falls"


@dataclass
class ModularTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    runs: pd.DataFrame  # one row per run: grid coordinates, accuracies, memorisation/grokking steps, Fourier
    metrics: pd.DataFrame  # training curves of the plan's runs
    spectrum: pd.DataFrame  # final embedding and logit shares per run and frequency
    fourier_curve: pd.DataFrame  # Fourier measures per run and checkpoint
    development: list[Development]  # the traced runs, in trace order
    weight_decays: tuple[float, ...]  # the plan's weight decays


def summarise(data: StudyData) -> ModularTables:
    """The study's tables from the gathered metrics and analysis tables."""
    metrics = data.metrics
    final = final_metrics(metrics)[["run_id", "train_fraction", "modulus", "weight_decay", "seed", "step",
                                     "train_accuracy", "val_accuracy", "val_loss"]]
    steps = run_steps(metrics)
    curve = data.tables["fourier_curve"]
    initial = curve[curve.step == 0].set_index("run_id").effective_frequencies.rename("initial_effective_frequencies")
    fourier = data.tables["fourier"].drop(columns=["instance", "ensemble"], errors="ignore")
    runs = (final.merge(steps, on="run_id").merge(fourier, on="run_id", how="left")
            .merge(initial, left_on="run_id", right_index=True, how="left")
            .sort_values(["train_fraction", "weight_decay", "seed"], ascending=[True, False, True], ignore_index=True))
    trace = data.tables["llc_curve"]
    traced = [development(run_id, metrics, trace, LLC_FALL) for run_id in trace.run_id.unique()] if len(trace) else []
    return ModularTables(runs=runs, metrics=metrics, spectrum=data.tables["spectrum"], fourier_curve=curve,
                         development=traced, weight_decays=tuple(data.plan.weight_decays))


def run_steps(metrics: pd.DataFrame, memorised: float = MEMORISED, generalised: float = GENERALISED,
              delay: float = DELAY) -> pd.DataFrame:
    """Per run: memorised_step (the first step with training-set accuracy ≥ `memorised`; it need not
    stay there: full-batch runs spike after memorising), generalised_step (test accuracy ≥ `generalised`
    from there on to the end; NaN if never), and grokked: both, the second at least `delay` times the
    first."""
    rows = []
    for run_id, frame in metrics.sort_values("step").groupby("run_id", sort=False):
        reached = frame.step[frame.train_accuracy >= memorised]
        memo = float(reached.iloc[0]) if len(reached) else float("nan")
        general = stays_above_from(frame.step, frame.val_accuracy, generalised)
        grokked = bool(np.isfinite(memo) and np.isfinite(general) and general >= delay * max(memo, 1.0))
        rows.append({"run_id": run_id, "memorised_step": memo, "generalised_step": general, "grokked": grokked,
                     "delay": general / max(memo, 1.0) if np.isfinite(memo) and np.isfinite(general) else np.nan})
    return pd.DataFrame(rows)


def grokking_sensitivity(metrics: pd.DataFrame, weight_decay: float) -> pd.DataFrame:
    """How many runs at `weight_decay` count as grokked as the thresholds move around their defaults."""
    runs = metrics[metrics.weight_decay == weight_decay]
    rows = []
    for generalised in (0.9, GENERALISED, 0.99):
        for delay in (1.5, DELAY, 4.0):
            steps = run_steps(runs, MEMORISED, generalised, delay)
            rows.append({"test_accuracy_level": generalised, "delay_factor": delay,
                         "grokked": int(steps.grokked.sum()), "runs": len(steps)})
    return pd.DataFrame(rows)


def run_title(runs: pd.DataFrame, run_id: str) -> str:
    """How a run is named in captions: its train fraction, weight decay and seed."""
    row = runs.set_index("run_id").loc[run_id]
    return f"fraction {row.train_fraction:g}, wd {row.weight_decay:g}, seed {int(row.seed)}"


def summary_json(data: StudyData, tables: ModularTables, verdicts: list[Verdict]) -> dict[str, Any]:
    """Machine-readable results: the grid, per-run steps and Fourier measures, developments, verdicts, timings."""
    plan = data.plan
    records = [{k: plain_value(v) for k, v in row.items()} for row in tables.runs.to_dict("records")]
    return {
        "study": "modular", "scale": plan.scale, "runs": len(tables.runs),
        "grid": {"train_fractions": list(plan.train_fractions), "weight_decays": list(plan.weight_decays),
                 "seeds": list(plan.seeds)},
        "thresholds": {"memorised": MEMORISED, "generalised": GENERALISED, "delay": DELAY, "llc_fall": LLC_FALL},
        "per_run": records,
        "development": [traced.summary(run_title(tables.runs, traced.run_id)) for traced in tables.development],
        "sgld": plan.sgld.to_dict(),
        "verdicts": [v.to_dict() for v in verdicts],
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
    }
