"""Study-level tables of the modular-addition study (`summarise`): one row per run with its
memorisation and grokking steps and Fourier measures, the spectra, each traced run's development and
LLC rise and fall, the tables under other rules for the threshold sensitivity (`tables_at`), and the
machine-readable summary. Every threshold comes from the study's rules
(`ModularRules`)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.llc.study_settings import sgld_record
from headway.analysis.development import Development, development
from headway.analysis.llc.stability import ModelStability
from headway.analysis.emergence import stays_above_from
from headway.runs.store import final_metrics, plain_value
from headway.studies.base import StudyData
from headway.studies.modular.llc_fall import fall_steps, llc_table, stability_points
from headway.studies.modular.plan import STUDY_SCALES, ModularPlan, study_plan
from headway.studies.modular.rules import ModularRules
from headway.studies.verdict import Verdict


@dataclass
class ModularTables:
    """Everything the verdicts and the report read, derived from the runs and their analyses."""

    runs: pd.DataFrame  # one row per run: grid coordinates, accuracies, memorisation/grokking steps, Fourier
    metrics: pd.DataFrame  # training curves of the plan's runs
    spectrum: pd.DataFrame  # final embedding and logit shares per run and frequency
    fourier_curve: pd.DataFrame  # Fourier measures per run and checkpoint
    development: list[Development]  # the traced runs, in trace order
    llc: pd.DataFrame  # one row per traced run: rise, fall and their standard errors (llc_fall.llc_table)
    weight_decays: tuple[float, ...]  # the plan's weight decays
    llc_bias: float = math.nan  # the LLC estimator's relative bias the LLC claim weighs (NaN: not measured)
    stability: ModelStability | None = None  # the traced models' own stability (`llc_bias_source` "model"), else None


def summarise(data: StudyData, llc_bias: float = math.nan) -> ModularTables:
    """The study's tables from the gathered metrics and analysis tables, by `data.rules`; `llc_bias` is the
    known-answer suite's relative bias, added to every LLC standard error when the rules' `llc_bias_source` is
    "suite" (NaN: not measured, then taken as 0); with "model" the traced models' own stability is added instead
    (NaN when a testable run lacks it, and the LLC claim is not testable)."""
    metrics, rules = data.metrics, data.rules
    final = final_metrics(metrics)[["run_id", "train_fraction", "modulus", "weight_decay", "seed", "step",
                                     "train_accuracy", "val_accuracy", "val_loss"]]
    steps = run_steps(metrics, rules)
    curve = data.tables["fourier_curve"]
    initial = curve[curve.step == 0].set_index("run_id").effective_frequencies.rename("initial_effective_frequencies")
    fourier = data.tables["fourier"].drop(columns=["instance", "ensemble"], errors="ignore")
    runs = (final.merge(steps, on="run_id").merge(fourier, on="run_id", how="left")
            .merge(initial, left_on="run_id", right_index=True, how="left")
            .sort_values(["train_fraction", "weight_decay", "seed"], ascending=[True, False, True], ignore_index=True))
    runs["random_logit_share"] = runs.n_key / ((runs.modulus - 1) // 2) * runs.logit_share_all
    trace = data.tables["llc_curve"]
    llc_bias, stability = rules.weighed_bias(data.tables.get("llc_stability", pd.DataFrame()), trace, llc_bias,
                                             stability_points(rules.llc_fall_at))
    traced = [development(run_id, metrics, trace, rules.llc_fall, rules.llc_validity(), rules.llc_significant,
                           llc_bias, rules.llc_resolved_only)
              for run_id in trace.run_id.unique()] if len(trace) else []
    return ModularTables(runs=runs, metrics=metrics, spectrum=data.tables["spectrum"], fourier_curve=curve,
                         development=traced,
                         llc=llc_table(traced, runs, fall_steps(trace, rules.llc_fall_at, rules.llc_validity())),
                         weight_decays=tuple(data.plan.weight_decays), llc_bias=llc_bias, stability=stability)


def run_steps(metrics: pd.DataFrame, rules: ModularRules) -> pd.DataFrame:
    """Per run: memorised_step (the first step with training-set accuracy ≥ `rules.memorised`; it need not
    stay there: full-batch runs spike after memorising), generalised_step (test accuracy ≥
    `rules.generalised` from there on to the end; NaN if never), and grokked: both, the second at least
    `rules.delay` times the first (delay: their ratio)."""
    memorised, generalised, delay = rules.memorised, rules.generalised, rules.delay
    rows = []
    for run_id, frame in metrics.sort_values("step").groupby("run_id", sort=False):
        reached = frame.step[frame.train_accuracy >= memorised]
        memo = float(reached.iloc[0]) if len(reached) else float("nan")
        general = stays_above_from(frame.step, frame.val_accuracy, generalised)
        grokked = bool(np.isfinite(memo) and np.isfinite(general) and general >= delay * max(memo, 1.0))
        rows.append({"run_id": run_id, "memorised_step": memo, "generalised_step": general, "grokked": grokked,
                     "delay": general / max(memo, 1.0) if np.isfinite(memo) and np.isfinite(general) else np.nan})
    return pd.DataFrame(rows)


def grokking_sensitivity(metrics: pd.DataFrame, weight_decay: float, rules: ModularRules) -> pd.DataFrame:
    """How many runs at `weight_decay` count as grokked as `generalised` and `delay` move over their sweeps."""
    runs = metrics[metrics.weight_decay == weight_decay]
    sweeps = rules.sweeps()
    rows = []
    for generalised in sweeps["generalised"]:
        for delay in sweeps["delay"]:
            steps = run_steps(runs, rules.changed(generalised=generalised, delay=delay))
            rows.append({"generalised": generalised, "delay": delay, "grokked": int(steps.grokked.sum()),
                         "runs": len(steps)})
    return pd.DataFrame(rows)


def run_title(runs: pd.DataFrame, run_id: str) -> str:
    """How a run is named in captions: its train fraction, weight decay and seed."""
    row = runs.set_index("run_id").loc[run_id]
    return f"fraction {row.train_fraction:g}, wd {row.weight_decay:g}, seed {int(row.seed)}"


def grokking_counts(runs: pd.DataFrame) -> pd.DataFrame:
    """Per weight decay: runs, how many generalised and grokked, and the range of their generalisation
    steps and delays (generalisation step / memorisation step), the numbers a summary quotes."""
    rows = []
    for wd, group in runs.groupby("weight_decay", sort=False):
        general = group[group.generalised_step.notna()]
        rows.append({"weight_decay": wd, "runs": len(group), "generalised": len(general),
                     "grokked": int(group.grokked.sum()),
                     "generalised_step_min": general.generalised_step.min(),
                     "generalised_step_max": general.generalised_step.max(),
                     "delay_min": general.delay.min(), "delay_max": general.delay.max()})
    return pd.DataFrame(rows)


def records(frame: pd.DataFrame) -> list[dict[str, Any]]:
    """A table as JSON records (numpy scalars as Python values, NaN as None)."""
    return [{k: plain_value(v) for k, v in row.items()} for row in frame.to_dict("records")]


def tables_at(data: StudyData, tables: ModularTables, rules: ModularRules) -> ModularTables:
    """The study's tables summarised again under `rules` (the study's with a swept rule moved), with the same
    estimator bias: for the threshold sensitivity (`headway.studies.sensitivity`)."""
    return summarise(dataclasses.replace(data, rules=rules), tables.llc_bias)


def summary_json(data: StudyData, tables: ModularTables, verdicts: list[Verdict],
                 sensitivity: pd.DataFrame) -> dict[str, Any]:
    """Machine-readable results: the grid, the rules, per-run steps and Fourier measures, grokking counts
    and delays, developments and LLC falls (with the estimator's bias), verdicts (with p, α, power), the
    threshold sensitivity (`headway.studies.sensitivity`), timings."""
    plan = data.plan
    return {
        "study": "modular", "scale": plan.scale, "runs": len(tables.runs),
        "grid": {"train_fractions": list(plan.train_fractions), "weight_decays": list(plan.weight_decays),
                 "seeds": list(plan.seeds), "development_seeds": list(plan.development_seeds),
                 "fresh_data": plan.fresh_data, "llc_first_step": plan.llc_first_step, "llc_burnin": plan.llc_burnin,
                 "llc_draws": plan.llc_draws,
                 # the run settings given over the scale's recipe (--steps 3000): what judging it again must rebuild
                 "settings": given_settings(plan)},
        "rules": data.rules.to_dict(),
        "per_run": records(tables.runs),
        "grokking": records(grokking_counts(tables.runs)),
        "development": [traced.summary(run_title(tables.runs, traced.run_id)) for traced in tables.development],
        "llc": records(tables.llc.drop(columns="excluded")),
        "llc_bias": plain_value(tables.llc_bias),
        "llc_bias_source": data.rules.llc_bias_source,
        "llc_stability": None if tables.stability is None else tables.stability.summary(),
        **sgld_record(data.tables["llc_curve"], plan.sgld),
        "verdicts": [v.to_dict() for v in verdicts],
        "threshold_sensitivity": records(sensitivity),
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
    }


def given_settings(plan: ModularPlan) -> dict[str, Any]:
    """The run settings `plan` gives over its scale's recipe (`--steps 3000` → {"steps": 3000}), so a folder judged
    again rebuilds the same runs."""
    recipe = study_plan(plan.scale).settings if plan.scale in STUDY_SCALES else {}
    return {key: value for key, value in plan.settings.items() if recipe.get(key) != value}
