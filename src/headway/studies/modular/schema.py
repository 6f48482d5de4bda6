"""The modular study's analysis tables, declared once: what `analyse_members` and the LLC trace write for each
ensemble and what a cached table must hold to be read back (`headway.runs.schema`)."""

from __future__ import annotations

from headway.runs.schema import TableSchema
from headway.studies.llc_schema import LLC_STABILITY, LLC_TRACE

_TAGS = {"run_id": "str"}

SCHEMAS = {
    "spectrum": TableSchema.of({"instance": "int", "frequency": "int", "embedding_share": "float",
                                "logit_share": "float", **_TAGS}),
    "fourier": TableSchema.of({
        "instance": "int", "effective_frequencies": "float", "key_frequencies": "str", "n_key": "int",
        "key_embedding_share": "float", "key_logit_share": "float", "logit_share_all": "float", **_TAGS}),
    "fourier_curve": TableSchema.of({"step": "int", "instance": "int", "effective_frequencies": "float",
                                     "key_embedding_share": "float", "key_logit_share": "float", **_TAGS}),
    "llc_curve": LLC_TRACE.plus(_TAGS),
    "llc_stability": LLC_STABILITY.plus(_TAGS),
}
