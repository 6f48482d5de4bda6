"""The search's analysis table, declared once: what `model_modes` writes for each final model."""

from __future__ import annotations

from headway.runs.schema import TableSchema
from headway.studies.sorting.schema import MODE_COLUMNS

SCHEMAS = {
    "modes": TableSchema.of({
        **MODE_COLUMNS, "min_diagonal_score": "float", "cs_at_copy": "float", "accuracy_gap0": "float",
        "accuracy_gap_other": "float", "removed_all": "float", "removed_near": "float", "removed_far": "float",
        "mean_gap": "float", "repeat_share": "float", "run_id": "str"}),
}
