"""In-process Hugging Face `transformers` backend: a local model folder or GGUF file, CPU or GPU, batched."""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from headway.llm.backend import Backend, BackendError, LoglikRequest, Progress
from headway.llm.encoding import encode_request
from headway.llm.models import ModelSource, resolve_model
from headway.settings import check_int

_INSTALL = "pip install 'headway[llm]'"


def _import_transformers() -> tuple[Any, Any, Any]:
    """torch, AutoModelForCausalLM and AutoTokenizer, or a clear message naming the extra to install."""
    try:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ImportError as err:
        raise BackendError(f"the hf backend needs transformers ({err}); run: {_INSTALL}") from None
    return torch, AutoModelForCausalLM, AutoTokenizer


@contextlib.contextmanager
def _quiet_loading() -> Iterator[None]:
    """Silence transformers' per-tensor progress bars and warnings while a model loads."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        hf_logging.set_verbosity(level)
        hf_logging.enable_progress_bar()


class HFBackend(Backend):
    """A causal LM loaded in this process. Scores options in length-sorted, left-padded batches of
    `batch_size` sequences (1 turns batching off); generation is greedy through the chat template.
    `add_bos` puts the tokenizer's BOS token before every scored text (off by default, as lm-eval)."""

    kind = "hf"

    def __init__(self, model: str | ModelSource, *, device: str = "cpu", batch_size: int = 8,
                 dtype: str = "float32", add_bos: bool = False) -> None:
        self.source = model if isinstance(model, ModelSource) else resolve_model(model)
        self.batch_size = check_int("batch_size", batch_size, 1)
        self.model_id = str(self.source.path) + ("+bos" if add_bos else "")
        self.torch, auto_model, auto_tokenizer = _import_transformers()
        try:
            self.device = self.torch.device(device)
            torch_dtype = getattr(self.torch, dtype)
        except (RuntimeError, AttributeError):
            raise BackendError(f"device {device!r} or dtype {dtype!r} is not available to torch") from None
        kwargs = {"gguf_file": self.source.gguf_file} if self.source.gguf_file else {}
        try:
            with _quiet_loading():
                self.tokenizer = auto_tokenizer.from_pretrained(self.source.folder, **kwargs)
                self.model = auto_model.from_pretrained(self.source.folder, dtype=torch_dtype, **kwargs)
            self.model.to(self.device).eval()
        except Exception as err:  # noqa: BLE001 - any load failure becomes one clear line
            raise BackendError(f"cannot load model {self.source.path}: {type(err).__name__}: {err}") from None
        logging.getLogger("transformers").setLevel(logging.ERROR)
        self.pad_id = self.tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = self.tokenizer.eos_token_id or 0
        self.bos_id = self.tokenizer.bos_token_id if add_bos else None
        if add_bos and self.bos_id is None:
            raise BackendError(f"model {self.source.label} has no BOS token; leave add_bos off")
        self.max_length = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)

    def loglikelihood(self, requests: Sequence[LoglikRequest], progress: Progress | None = None) -> list[float]:
        """Sum of continuation token log-probabilities, computed only at the continuation positions."""
        encoded = [encode_request(self.tokenizer, r, self.bos_id) for r in requests]
        self._check_lengths(len(ids) for ids, _ in encoded)
        scores = [0.0] * len(encoded)
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i][0]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            for i, score in zip(rows, self._score_batch([encoded[i] for i in rows]), strict=True):
                scores[i] = score
            if progress:
                progress(len(rows))
        return scores

    def _score_batch(self, batch: list[tuple[list[int], int]]) -> list[float]:
        """Left-pad a batch, run it once, and sum log p of each row's last n continuation tokens."""
        torch = self.torch
        ids, mask = self._left_pad([row for row, _ in batch])
        keep = max(n for _, n in batch) + 1
        with torch.inference_mode():
            out = self.model(input_ids=ids, attention_mask=mask, position_ids=(mask.cumsum(1) - 1).clamp(min=0),
                             logits_to_keep=keep)
            logprobs = torch.log_softmax(out.logits[:, :-1].float(), dim=-1)
            targets = ids[:, -keep + 1 :]
            picked = logprobs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        return [float(picked[r, picked.shape[1] - n :].sum()) for r, (_, n) in enumerate(batch)]

    def _left_pad(self, rows: list[list[int]]) -> tuple[Any, Any]:
        """Token ids and attention mask tensors with every row ending at the last column."""
        torch = self.torch
        width = max(len(r) for r in rows)
        ids = torch.full((len(rows), width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((len(rows), width), dtype=torch.long)
        for i, row in enumerate(rows):
            ids[i, width - len(row) :] = torch.tensor(row)
            mask[i, width - len(row) :] = 1
        return ids.to(self.device), mask.to(self.device)

    def _check_lengths(self, lengths: Iterator[int] | Sequence[int]) -> None:
        """Refuse sequences longer than the model's context window, naming both lengths."""
        longest = max(lengths, default=0)
        if self.max_length and longest > self.max_length:
            raise BackendError(f"a prompt has {longest} tokens but the model reads at most {self.max_length}; "
                               f"use fewer hops or chains")

    def generate(self, prompts: Sequence[str], max_tokens: int, progress: Progress | None = None) -> list[str]:
        """Greedy replies to each prompt as one user message (the model's chat template when it has one)."""
        texts = [self._chat_text(p) for p in prompts]
        encoded = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        self._check_lengths([len(e) + max_tokens for e in encoded])
        replies = [""] * len(encoded)
        order = sorted(range(len(encoded)), key=lambda i: -len(encoded[i]))
        for start in range(0, len(order), self.batch_size):
            rows = order[start : start + self.batch_size]
            ids, mask = self._left_pad([encoded[i] for i in rows])
            with self.torch.inference_mode():
                out = self.model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_tokens,
                                          do_sample=False, pad_token_id=self.pad_id)
            for i, row in zip(rows, out[:, ids.shape[1] :], strict=True):
                replies[i] = self.tokenizer.decode(row, skip_special_tokens=True).strip()
            if progress:
                progress(len(rows))
        return replies

    def _chat_text(self, prompt: str) -> str:
        """The prompt wrapped as one user turn, ready for the assistant's reply."""
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": prompt}]
            return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        return prompt

    def close(self) -> None:
        """Drop the model so its memory can be freed."""
        self.model = None
