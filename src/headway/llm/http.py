"""A backend for any OpenAI-compatible HTTP server: llama-cpp-python, vLLM, the llama.cpp server, hosted APIs.

Scoring posts to /completions with echo and logprobs, so the server must return the log-probabilities
of the prompt's own tokens; generation posts to /chat/completions. A few requests run at a time, each
with a timeout, and connection errors, timeouts, HTTP 429 and 5xx are retried with exponential backoff.
The HTTP client (httpx2, or httpx with the same API) is imported only when a backend is made, so the
rest of headway works without it.
"""

from __future__ import annotations

import importlib
import os
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from types import ModuleType
from typing import Any, TypeVar

from headway.errors import ConfigError
from headway.limits import MAX_BACKOFF_S, MAX_CONCURRENCY, MAX_REPLY_TOKENS, MAX_RETRIES, MAX_TIMEOUT_S
from headway.llm.backend import Backend, BackendError, LoglikRequest, Progress
from headway.settings import check_int, check_number

DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"
ECHO_HINT = "the server must support echo with logprobs, e.g. llama-cpp-python started with logits_all"
# Extra advice for refusals whose usual cause is the user's setup rather than the request.
REFUSAL_HINTS = {
    401: "; check OPENAI_API_KEY",
    403: "; check OPENAI_API_KEY",
    404: "; check the base URL (it usually ends in /v1) and the model name",
}

Item = TypeVar("Item")
Answer = TypeVar("Answer")


def import_httpx() -> ModuleType:
    """The HTTP client library, httpx2 or httpx (same API), or a BackendError saying how to install it."""
    for name in ("httpx2", "httpx"):
        try:
            return importlib.import_module(name)
        except ImportError:
            continue
    raise BackendError("the http backend needs the httpx2 (or httpx) package; pip install 'headway[llm]'")


def check_connection(base_url: str | None, timeout: float, retries: int, concurrency: int
                     ) -> tuple[str, float, int, int]:
    """The server's base URL (None: $OPENAI_BASE_URL, else the default) and the timeout, retries and concurrency
    of its requests, each checked against `headway.limits`; an URL that does not parse is refused."""
    if base_url is not None and not base_url.strip():
        raise ConfigError(f"base URL '' is empty; give an http:// or https:// URL, such as {DEFAULT_BASE_URL}")
    base_url = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
    try:
        parts = urllib.parse.urlsplit(base_url)
        usable = parts.scheme in ("http", "https") and bool(parts.hostname) and (parts.port or 1) > 0
    except ValueError:  # e.g. an unclosed [IPv6 bracket or a port that is not a number
        usable = False
    if not usable:
        raise ConfigError(f"base URL {base_url!r} is invalid; use an http:// or https:// URL, such as {DEFAULT_BASE_URL}")
    return (base_url, check_number("timeout", timeout, 0.0, MAX_TIMEOUT_S, low_open=True),
            check_int("retries", retries, 0, MAX_RETRIES), check_int("concurrency", concurrency, 1, MAX_CONCURRENCY))


def continuation_logprob(reply: Any, start: int, end: int, url: str) -> float:
    """Sum the log-probabilities of the echoed tokens covering characters [start, end) of the prompt.

    `text_offset` gives each token's first character in the echoed text. A token counts when it ends
    after `start` and starts before `end`: a token straddling the context/continuation boundary counts
    toward the continuation, and the one generated token, which starts at `end`, is dropped.
    """
    def malformed(what: str) -> BackendError:
        """The error for a reply that cannot be scored, saying what was wrong with it."""
        return BackendError(f"malformed response from {url}: {what}; {ECHO_HINT}")

    try:
        logprobs = reply["choices"][0]["logprobs"]
        tokens, values, offsets = logprobs["tokens"], logprobs["token_logprobs"], logprobs["text_offset"]
        if not len(tokens) == len(values) == len(offsets):
            raise malformed("tokens, token_logprobs and text_offset differ in length")
        total, counted = 0.0, 0
        for token, value, offset in zip(tokens, values, offsets, strict=True):
            if offset + len(token) > start and offset < end:
                if value is None:
                    raise malformed(f"continuation token {token!r} has no log-probability")
                total += value
                counted += 1
    except (KeyError, IndexError, TypeError):
        raise malformed("choices[0].logprobs lacks tokens, token_logprobs or text_offset") from None
    if not counted:
        raise malformed("no echoed token covers the continuation")
    return total


def _server_message(response: Any) -> str:
    """The error message in a server's reply (OpenAI, vLLM, llama.cpp or FastAPI shape), else its text."""
    try:
        reply = response.json()
    except ValueError:
        reply = None
    if isinstance(reply, dict):
        error = reply.get("error")
        for found in (error.get("message") if isinstance(error, dict) else error, reply.get("message"),
                      reply.get("detail")):
            if found:
                return _one_line(str(found))
    return _one_line(response.text) or response.reason_phrase


def _one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, to quote inside an error message."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


class OpenAIBackend(Backend):
    """A model served by an OpenAI-compatible server, scored via /completions and asked via /chat/completions.

    Unset arguments come from OPENAI_MODEL, OPENAI_BASE_URL and OPENAI_API_KEY; with no model named
    anywhere the server's first listed model is used. `model_id` is the model name, so answers cached
    for one server are reused for another serving the same name.
    """

    kind = "http"

    def __init__(
        self,
        model: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout: float = 60.0,
        retries: int = 3,
        backoff: float = 1.0,
        concurrency: int = 4,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """Check the settings, open the HTTP client and settle the model (asking the server if none is named)."""
        base_url, timeout, retries, concurrency = check_connection(base_url, timeout, retries, concurrency)
        backoff = check_number("backoff", backoff, 0.0, MAX_BACKOFF_S)
        api_key = os.environ.get("OPENAI_API_KEY") if api_key is None else api_key
        self.base_url = base_url
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.concurrency = concurrency
        self._sleep = sleep
        self._httpx = import_httpx()
        self._client = self._httpx.Client(
            timeout=self._httpx.Timeout(timeout),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            limits=self._httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
        )
        try:
            self.model_id = model or os.environ.get("OPENAI_MODEL") or self._discover_model()
        except BaseException:
            self._client.close()
            raise

    def loglikelihood(self, requests: Sequence[LoglikRequest], progress: Progress | None = None) -> list[float]:
        """Sum of the continuation's token log-probabilities for each request, in request order.

        A token counts when it overlaps the continuation's characters, so one straddling the
        context/continuation boundary counts toward the continuation (see `continuation_logprob`).
        """
        for request in requests:
            if not request.continuation:
                raise ConfigError(f"the request with context {_one_line(request.context, 60)!r} has an empty "
                                  "continuation; every continuation needs at least one character")
        return self._map(self._score, requests, progress)

    def generate(self, prompts: Sequence[str], max_tokens: int, progress: Progress | None = None) -> list[str]:
        """Greedy chat reply to each prompt, in prompt order ("" when the server sends no content)."""
        check_int("max_tokens", max_tokens, 1, MAX_REPLY_TOKENS)
        return self._map(lambda prompt: self._reply(prompt, max_tokens), prompts, progress)

    def close(self) -> None:
        """Close the HTTP client and its connections."""
        self._client.close()

    def _score(self, request: LoglikRequest) -> float:
        """Ask the server to echo context + continuation with logprobs and sum the continuation's."""
        prompt = request.context + request.continuation
        body = {"model": self.model_id, "prompt": prompt, "max_tokens": 1, "temperature": 0, "echo": True,
                "logprobs": 1}
        reply = self._call("POST", "/completions", body)
        return continuation_logprob(reply, len(request.context), len(prompt), f"{self.base_url}/completions")

    def _reply(self, prompt: str, max_tokens: int) -> str:
        """Send `prompt` as one user chat message and return the reply's text."""
        body = {"model": self.model_id, "messages": [{"role": "user", "content": prompt}], "max_tokens": max_tokens,
                "temperature": 0}
        reply = self._call("POST", "/chat/completions", body)
        malformed = BackendError(f"malformed response from {self.base_url}/chat/completions: no choices[0].message"
                                 ".content text; the server must serve OpenAI-style chat completions")
        try:
            content = reply["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise malformed from None
        if content is None:
            return ""
        if not isinstance(content, str):
            raise malformed
        return content

    def _discover_model(self) -> str:
        """The first model the server lists at /models, for when the user names none."""
        reply = self._call("GET", "/models")
        try:
            return str(reply["data"][0]["id"])
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.base_url}/models lists no model; name the model or set OPENAI_MODEL") from None

    def _map(self, ask: Callable[[Item], Answer], items: Sequence[Item], progress: Progress | None) -> list[Answer]:
        """`ask` each item with at most `concurrency` in flight; answers in item order, progress as each ends.

        On an error or Ctrl-C the queued requests are dropped at once instead of being sent.
        """
        if not items:
            return []
        answers: list[Any] = [None] * len(items)
        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(items)), thread_name_prefix="headway-http")
        try:
            futures = {pool.submit(ask, item): index for index, item in enumerate(items)}
            for future in as_completed(futures):
                answers[futures[future]] = future.result()
                if progress is not None:
                    progress(1)
        finally:
            pool.shutdown(wait=False, cancel_futures=True)
        return answers

    def _call(self, method: str, path: str, body: dict[str, Any] | None = None) -> Any:
        """Send one request and return its JSON reply, retrying what may pass (no connection, timeout, 429, 5xx)."""
        httpx = self._httpx
        url = f"{self.base_url}{path}"
        attempts = self.retries + 1
        unreachable, last = False, ""
        for attempt in range(attempts):
            if attempt:
                self._sleep(min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                response = self._client.request(method, url, json=body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as error:
                unreachable, last = True, _one_line(str(error)) or type(error).__name__
                continue
            except httpx.TimeoutException:
                unreachable = False
                last = f"no reply within {self.timeout:g} s (raise the timeout if the model is slow)"
                continue
            except httpx.RequestError as error:
                unreachable, last = False, f"{type(error).__name__}: {_one_line(str(error))}"
                continue
            status = response.status_code
            if status == 429 or status >= 500:
                unreachable, last = False, f"HTTP {status}: {_server_message(response)}"
                continue
            if not 200 <= status < 300:
                raise BackendError(f"{method} {url} was refused (HTTP {status}): {_server_message(response)}"
                                   f"{REFUSAL_HINTS.get(status, '')}")
            try:
                return response.json()
            except ValueError:
                snippet = _one_line(response.text, 80)
                raise BackendError(f"malformed response from {url}: not JSON ({snippet!r})") from None
        if unreachable:
            raise BackendError(f"cannot reach {url} after {attempts} attempts ({last}); is the server running? "
                               "start it or set OPENAI_BASE_URL")
        raise BackendError(f"{method} {url} failed after {attempts} attempts; last error: {last}")
