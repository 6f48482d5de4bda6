"""JSON records of retrieval examples: the model's view and the structured view a solver re-solves."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from headway.tasks.retrieval.config import RetrievalConfig
    from headway.tasks.retrieval.generator import RetrievalBatch


def retrieval_records(cfg: RetrievalConfig, batch: RetrievalBatch) -> list[dict[str, Any]]:
    """Token and structured views of retrieval examples; "chain" drops the -1 padding."""
    packed = cfg.layout == "packed"
    tokens = batch.tokens.tolist() if packed else batch.tokens[:, :, 0].tolist()
    positions = list(range(cfg.n_ctx))
    columns = zip(
        tokens,
        batch.targets.tolist(),
        batch.statements.tolist(),
        batch.query.tolist(),
        batch.chain.tolist(),
        batch.answer.tolist(),
        batch.query_hops.tolist(),
        strict=True,
    )
    records = [
        {
            "tokens": tok,
            "positions": positions,
            "readout_position": cfg.n_ctx - 1,
            "targets": targets,
            "statements": statements,
            "query": query,
            "chain": chain[: hops + 1],
            "answer": answer,
            "hops": hops,
        }
        for tok, targets, statements, query, chain, answer, hops in columns
    ]
    if batch.classes is not None and batch.rules is not None:
        for record, classes, rules in zip(records, batch.classes.tolist(), batch.rules.tolist(), strict=True):
            record["classes"] = {str(entity): cls for entity, cls in classes}
            record["rules"] = {str(cls): relation for cls, relation in enumerate(rules)}
    return records
