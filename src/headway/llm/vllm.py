"""In-process vLLM backend: a local model folder or GGUF file on a CUDA GPU, with vLLM's own batching."""

from __future__ import annotations

from collections.abc import Sequence
from types import ModuleType
from typing import Any

from headway.llm.backend import Backend, BackendError, LoglikRequest, Progress
from headway.llm.encoding import encode_request
from headway.llm.models import ModelSource, resolve_model
from headway.settings import check_bool, check_int, check_number

_INSTALL = "pip install 'headway[vllm]'"

# Files whose presence beside a GGUF file means its folder can serve as the tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")


def _import_vllm() -> ModuleType:
    """The vllm module, or a clear message saying where it runs and how to install it."""
    try:
        import vllm
    except ImportError:
        raise BackendError(f"the vllm backend needs vLLM on a machine with a CUDA GPU; run: {_INSTALL}") from None
    return vllm


def _continuation_logprob(entries: Any, ids: list[int], n_continuation: int, label: str) -> float:
    """Sum of the logprobs vLLM gave the last `n_continuation` prompt tokens, looked up by their actual ids."""
    if entries is None or len(entries) != len(ids):
        raise BackendError(f"vLLM returned no prompt log-probabilities aligned with the {len(ids)} prompt "
                           f"tokens of model {label}")
    total = 0.0
    for position in range(len(ids) - n_continuation, len(ids)):
        entry = entries[position]
        if not entry or ids[position] not in entry:
            raise BackendError(f"vLLM returned no log-probability for prompt token {position} of model {label}")
        total += float(entry[ids[position]].logprob)
    return total


class VLLMBackend(Backend):
    """A causal LM served by vLLM in this process. Requests go to vLLM in chunks of `batch_size` (vLLM
    schedules each chunk itself); scoring reads prompt log-probabilities, generation is greedy chat."""

    kind = "vllm"

    def __init__(self, model: str | ModelSource, *, add_bos: bool = False, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, seed: int = 0, batch_size: int = 256) -> None:
        self.source = model if isinstance(model, ModelSource) else resolve_model(model)
        self.add_bos = check_bool("add_bos", add_bos)
        memory = check_number("gpu_memory_utilization", gpu_memory_utilization, 0.0, 1.0, low_open=True)
        length = None if max_model_len is None else check_int("max_model_len", max_model_len, 1)
        seed = check_int("seed", seed, 0)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.model_id = str(self.source.path) + ("+bos" if add_bos else "")
        self.vllm = _import_vllm()
        try:
            self.llm = self.vllm.LLM(**self._model_args(), gpu_memory_utilization=memory, max_model_len=length,
                                     seed=seed)
        except Exception as err:  # noqa: BLE001 - any load failure becomes one clear line
            raise BackendError(f"cannot load model {self.source.path}: {type(err).__name__}: {err}") from None
        self.tokenizer = self.llm.get_tokenizer()
        self.bos_id = self.tokenizer.bos_token_id if self.add_bos else None
        if self.add_bos and self.bos_id is None:
            raise BackendError(f"add_bos is set but the tokenizer of model {self.source.label} has no BOS token")

    def _model_args(self) -> dict[str, str]:
        """vLLM's model (and tokenizer) arguments: a GGUF file borrows its folder's tokenizer when there is one."""
        if not self.source.gguf_file:
            return {"model": str(self.source.folder)}
        if any((self.source.folder / name).is_file() for name in _TOKENIZER_FILES):
            return {"model": str(self.source.path), "tokenizer": str(self.source.folder)}
        return {"model": str(self.source.path)}

    def loglikelihood(self, requests: Sequence[LoglikRequest], progress: Progress | None = None) -> list[float]:
        """Sum of continuation token log-probabilities, read from vLLM's prompt log-probabilities."""
        encoded = [encode_request(self.tokenizer, r, bos_id=self.bos_id) for r in requests]
        params = self.vllm.SamplingParams(max_tokens=1, temperature=0.0, prompt_logprobs=0)
        scores: list[float] = []
        for start in range(0, len(encoded), self.batch_size):
            chunk = encoded[start : start + self.batch_size]
            prompts = [{"prompt_token_ids": ids} for ids, _ in chunk]
            outputs = self._run(self.llm.generate, prompts, params)
            scores += [_continuation_logprob(out.prompt_logprobs, ids, n, self.source.label)
                       for out, (ids, n) in zip(outputs, chunk, strict=True)]
            if progress:
                progress(len(chunk))
        return scores

    def generate(self, prompts: Sequence[str], max_tokens: int, progress: Progress | None = None) -> list[str]:
        """Greedy replies to each prompt as one user message, through the model's chat template."""
        check_int("max_tokens", max_tokens, 1)
        params = self.vllm.SamplingParams(max_tokens=max_tokens, temperature=0.0)
        replies: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            chunk = prompts[start : start + self.batch_size]
            outputs = self._run(self.llm.chat, [[{"role": "user", "content": p}] for p in chunk], params)
            replies += [out.outputs[0].text.strip() for out in outputs]
            if progress:
                progress(len(chunk))
        return replies

    def _run(self, call: Any, batch: list[Any], params: Any) -> list[Any]:
        """One vLLM call on a chunk; a refused input (vLLM raises ValueError, e.g. a prompt too long) is one line."""
        try:
            outputs = call(batch, params, use_tqdm=False)
        except ValueError as err:
            raise BackendError(f"vLLM refused a request to model {self.source.label}: {err}") from None
        if len(outputs) != len(batch):
            raise BackendError(f"vLLM returned {len(outputs)} outputs for {len(batch)} requests")
        return outputs

    def close(self) -> None:
        """Drop the engine so its GPU memory can be freed."""
        self.llm = None
