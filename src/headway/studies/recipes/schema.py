"""The recipe sweep's analysis table, declared once: the conditional probes of each run (none for other cells)."""

from __future__ import annotations

from headway.runs.schema import TableSchema

SCHEMAS = {
    "probes": TableSchema.of({"instance": "int", "site": "str", "layer": "int", "label": "str", "accuracy": "float",
                              "majority": "float", "run_id": "str"}),
}
