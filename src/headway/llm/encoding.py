"""Token ids of a log-likelihood request, split the way lm-evaluation-harness splits them."""

from __future__ import annotations

from typing import Any

from headway.llm.backend import BackendError, LoglikRequest


def encode_request(tokenizer: Any, request: LoglikRequest, bos_id: int | None = None) -> tuple[list[int], int]:
    """Ids of context + continuation and how many of them (at the end) belong to the continuation.

    The whole text is encoded once and the continuation is what follows the context's own
    encoding, so a token merged across the boundary counts as continuation (lm-eval's rule).
    `bos_id`, when given, is put first (as servers do for models whose GGUF asks for a BOS token).
    """
    if not request.context:
        raise BackendError("a log-likelihood request needs a non-empty context")
    whole = tokenizer(request.context + request.continuation, add_special_tokens=False)["input_ids"]
    context = tokenizer(request.context, add_special_tokens=False)["input_ids"]
    n_continuation = len(whole) - len(context)
    if n_continuation <= 0:
        raise BackendError(f"continuation {request.continuation!r} adds no tokens to its context")
    return ([bos_id] if bos_id is not None else []) + whole, n_continuation
