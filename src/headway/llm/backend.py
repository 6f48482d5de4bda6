"""What every language-model backend offers, and the errors a user sees when one cannot serve."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from headway.errors import ConfigError

BACKENDS = ("hf", "http", "vllm")  # --backend: transformers in process, an OpenAI-compatible server, vLLM
# Called with the number of requests just finished, so callers can drive a progress bar.
Progress = Callable[[int], None]


class BackendError(ConfigError):
    """A backend cannot serve: the server is unreachable, the model cannot load, a reply is unusable.

    A ConfigError, so the CLI prints it as one line and exits with status 2.
    """


@dataclass(frozen=True)
class LoglikRequest:
    """Score `continuation` given `context`: the sum of its tokens' log-probabilities."""

    context: str
    continuation: str


class Backend(ABC):
    """A language model that scores continuations and/or generates replies.

    `kind` names the backend ("hf", "http", "vllm") and `model_id` the model it serves; both key
    the response cache, so they must change whenever the answers could.
    """

    kind: str = ""
    model_id: str = ""
    supports_loglik: bool = True
    supports_generate: bool = True

    @abstractmethod
    def loglikelihood(self, requests: Sequence[LoglikRequest], progress: Progress | None = None) -> list[float]:
        """Sum of log p(continuation tokens | context) for each request, in request order."""

    @abstractmethod
    def generate(self, prompts: Sequence[str], max_tokens: int, progress: Progress | None = None) -> list[str]:
        """Greedy reply to each prompt sent as one user chat message, in prompt order."""

    def close(self) -> None:
        """Release what the backend holds (connections, model memory)."""
