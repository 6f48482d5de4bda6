"""The search's tables from its gathered data: one row per model (`models`), the mode fractions per condition
and a summary per condition."""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from headway.errors import ConfigError
from headway.studies.base import StudyData
from headway.studies.copy_search.plan import SearchPlan
from headway.studies.copy_search.rules import SearchRules
from headway.studies.sorting.tables import mode_fractions

SETTINGS_SHOWN = ("length", "values", "repeats", "gaps", "weight_decay", "heads", "steps")


@dataclass
class SearchTables:
    """What the verdicts and the report read: one row per model of the plan (its condition, settings, seed,
    accuracies at the step classified, mode and what the rule read, `learned`)."""

    models: pd.DataFrame
    compare_gaps: bool = False  # the conditions differ in their data only: the gap claim is judged over them


def summarise(data: StudyData) -> SearchTables:
    """The models table of the plan's runs (`models_table`), and whether the plan compares its conditions' data."""
    return SearchTables(models_table(data.plan, data.metrics, data.tables["modes"], data.rules),
                        data.plan.compare_gaps)


def models_table(plan: SearchPlan, metrics: pd.DataFrame, modes: pd.DataFrame, rules: SearchRules) -> pd.DataFrame:
    """One row per run of `plan` in condition and seed order: its settings, the accuracies logged at the step its
    model was classified at (the last, or the plan's `classify_step`), its mode, and whether it learned."""
    from headway.runs.store import final_metrics

    step = plan.classify_step
    logged = final_metrics(metrics if step is None else metrics[metrics.step <= step])
    logged = logged[["run_id", "step", "val_accuracy", "val_list_accuracy"]]
    rows = []
    for condition, runs in plan.grids().items():
        for run in runs:
            flat = run.flat()
            rows.append({"condition": condition, "run_id": run.run_id, "seed": run.seed,
                         **{name: flat[name] for name in SETTINGS_SHOWN}})
    table = pd.DataFrame(rows).merge(logged, on="run_id", how="left").merge(
        modes.drop(columns="instance"), on="run_id", how="left")
    missing = table[table["mode"].isna()].run_id.tolist()
    if missing:
        raise ConfigError(f"runs {missing} of the search have no classified model")
    table["learned"] = table.val_accuracy >= rules.learned
    return table


def fractions(models: pd.DataFrame, rules: SearchRules) -> pd.DataFrame:
    """Learned runs per condition in each mode with Wilson 95% intervals (the sorting study's `mode_fractions`,
    the condition in place of its data value)."""
    frame = models.rename(columns={"condition": "data"})
    out = mode_fractions(frame, rules.learned).rename(columns={"data": "condition"})
    order = {name: i for i, name in enumerate(dict.fromkeys(models.condition))}
    return out.sort_values("condition", key=lambda c: c.map(order), kind="stable", ignore_index=True)


# Columns a search classified before suppression was measured against a copier does not have (read as NaN).
SUPPRESSION_COLUMNS = ("suppression", "suppressed_share", "removed_all", "removed_near", "removed_far")


def with_suppression_columns(models: pd.DataFrame) -> pd.DataFrame:
    """`models` with the suppression measures it lacks added as NaN (a folder classified before they existed)."""
    return models.assign(**{name: float("nan") for name in SUPPRESSION_COLUMNS if name not in models})


def condition_summary(models: pd.DataFrame) -> pd.DataFrame:
    """Per condition: realised δ̄ and share of zero gaps of the analysed lists, accuracies, the largest suppressed
    fraction of any head, the largest suppression strength and the median share of the copier's effect removed at
    gaps ≤ 2 and ≥ 3, and how many models turn copy-suppression at some swept copy threshold."""
    models = with_suppression_columns(models)
    suppress = models.filter(like="suppress_fraction_h")
    frame = models.assign(max_suppress=suppress.max(axis=1), cs_any=models.cs_at_copy.notna())
    grouped = frame.groupby("condition", sort=False)
    return pd.DataFrame({
        "step": grouped.step.max(), "mean_gap": grouped.mean_gap.first(), "repeat_share": grouped.repeat_share.first(),
        "min_val_accuracy": grouped.val_accuracy.min(), "median_list_accuracy": grouped.val_list_accuracy.median(),
        "accuracy_gap0": grouped.accuracy_gap0.median(), "accuracy_gap_other": grouped.accuracy_gap_other.median(),
        "max_suppress_fraction": grouped.max_suppress.max(), "min_diagonal_score": grouped.min_diagonal_score.min(),
        "n_suppressor_models": grouped.n_suppressors.apply(lambda s: int((s > 0).sum())),
        "max_suppression": grouped.suppression.max(), "removed_near": grouped.removed_near.median(),
        "removed_far": grouped.removed_far.median(),
        "cs_at_some_copy_threshold": grouped.cs_any.sum().astype(int),
    }).reset_index()


def screen_ranking(models: pd.DataFrame, rules: SearchRules, min_learned: float = 2 / 3) -> pd.DataFrame:
    """The screen's selection rule (docs/study-sorting.md, "The second search"), fixed before its models were
    classified: conditions where at least `min_learned` of the runs learned, ranked by their copy-suppression
    models, then their models with a suppressing pair (whatever its QK), then the largest suppression strength,
    all among learned runs; `rank` 1 is confirmed first (NaN: not eligible)."""
    models = with_suppression_columns(models)
    rows = []
    for name, group in models.groupby("condition", sort=False):
        learned = group[group.val_accuracy >= rules.learned]
        rows.append({"condition": name, "learned": len(learned), "runs": len(group),
                     "copy_suppression": int((learned["mode"] == "copy_suppression").sum()),
                     "suppressing_pair": int((learned.n_suppressors > 0).sum()),
                     "max_suppression": float(learned.suppression.max()) if len(learned) else float("nan"),
                     "eligible": len(learned) >= min_learned * len(group)})
    table = pd.DataFrame(rows)
    keys = ["copy_suppression", "suppressing_pair", "max_suppression"]
    eligible = table[table.eligible].sort_values(keys, ascending=False, kind="stable", na_position="last")
    table["rank"] = pd.Series(range(1, len(eligible) + 1), index=eligible.index, dtype="Int64")
    return table.sort_values("rank", kind="stable", na_position="last", ignore_index=True)
