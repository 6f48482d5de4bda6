"""JSON Lines export: each example's token view and structured view, for independent checking."""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from headway.tasks.retrieval import RetrievalBatch, RetrievalConfig
from headway.tasks.sorting import SortingBatch, SortingConfig

# Examples converted to records at a time while writing, so memory stays bounded for big batches.
_WRITE_CHUNK = 4096


def to_records(cfg: RetrievalConfig | SortingConfig, batch: RetrievalBatch | SortingBatch) -> list[dict[str, Any]]:
    """One JSON-serialisable dict per example, plain Python ints only."""
    if isinstance(cfg, SortingConfig):
        return _sorting_records(cfg, batch)
    return _retrieval_records(cfg, batch)


def _sorting_records(cfg: SortingConfig, batch: SortingBatch) -> list[dict[str, Any]]:
    """The list, its sort, the gaps, and the model's tokens and targets with their positions."""
    readout = list(range(cfg.length, 2 * cfg.length))
    columns = zip(batch.lists.tolist(), batch.sorted.tolist(), batch.gaps.tolist(), batch.tokens.tolist(),
                  batch.targets.tolist(), strict=True)
    return [{"list": values, "sorted": ordered, "gaps": gaps, "tokens": tokens, "sep": cfg.sep,
             "readout_positions": readout, "targets": targets}
            for values, ordered, gaps, tokens, targets in columns]


def _retrieval_records(cfg: RetrievalConfig, batch: RetrievalBatch) -> list[dict[str, Any]]:
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


def write_jsonl(path_or_file: str | Path | IO[str], cfg: RetrievalConfig | SortingConfig,
                batch: RetrievalBatch | SortingBatch) -> int:
    """Write one compact JSON record per line to a path or an open text file; return the count."""
    if isinstance(path_or_file, (str, Path)):
        with open(path_or_file, "w", encoding="utf-8") as file:
            return write_jsonl(file, cfg, batch)
    for start in range(0, len(batch), _WRITE_CHUNK):
        records = to_records(cfg, batch.subset(slice(start, start + _WRITE_CHUNK)))
        path_or_file.write("".join(json.dumps(record, separators=(",", ":")) + "\n" for record in records))
    return len(batch)
