"""The sorting study's analysis tables, declared once: what `analyse_members` and the LLC trace write for each
ensemble and what a cached table must hold to be read back (`headway.runs.schema`)."""

from __future__ import annotations

from headway.runs.schema import TableSchema
from headway.studies.llc_schema import LLC, LLC_STABILITY, LLC_TRACE

_TAGS = {"run_id": "str", "data": "str"}  # every row: its run, and the data it was trained on (`data_label`)
# An instance's mode and what it rests on (`headway.analysis.sorting.modes.classify_modes`), in every study
# that classifies sorting models.
MODE_COLUMNS = {"instance": "int", "mode": "str", "copy_fraction_h{n}": "float", "suppress_fraction_h{n}": "float",
                "n_copiers": "int", "n_suppressors": "int", "overlap": "float", "coverage": "float",
                "qk_similarity": "float", "suppressed_share": "float", "suppression": "float", "copier": "int",
                "suppressor": "int"}

SCHEMAS = {
    "final": TableSchema.of({**MODE_COLUMNS, "ar_token_accuracy": "float", "ar_list_accuracy": "float",
                             "mean_gap": "float", **_TAGS}),
    "ablation": TableSchema.of({
        "instance": "int", "head": "int", "ablation": "str", "gap_bin": "str", "loss": "float", "accuracy": "float",
        "entropy": "float", "count": "int", "d_loss": "float", "d_accuracy": "float", "d_entropy": "float", **_TAGS}),
    "dla": TableSchema.of({"instance": "int", "head": "int", "gap_bin": "str", "dla_correct": "float",
                           "dla_current": "float", "count": "int", **_TAGS}),
    "mode_curve": TableSchema.of({"step": "int", **MODE_COLUMNS, **_TAGS}),
    "llc_final": LLC.plus(_TAGS),
    "mode_sweep": TableSchema.of({"instance": "int", "threshold": "str", "value": "float", "mode": "str", **_TAGS}),
    "llc_curve": LLC_TRACE.plus(_TAGS),
    "llc_stability": LLC_STABILITY.plus(_TAGS),
}
