"""A backend for any OpenAI-compatible HTTP server: llama-cpp-python, vLLM, the llama.cpp server, hosted APIs.

Scoring posts to /completions with echo and logprobs, so the server must return the log-probabilities
of the prompt's own tokens; generation posts to /chat/completions. A few requests run at a time.

Nothing a server sends is taken on trust (docs/llm-eval.md, Backends). A whole request (connecting, sending,
waiting, reading the reply) has a deadline, `timeout` seconds after it starts: a watchdog then shuts the socket
of its connection, so a server that sends a byte a second cannot hold it longer. A reply is read in pieces and
refused beyond `MAX_REPLY_BYTES`, before it is parsed. Every number is checked for its JSON type (`true` is not
a number), finiteness and range, a token's log-probability for lying in [`MIN_TOKEN_LOGPROB`, 0], and tokens and
model names for being text. What may pass when asked again (no connection, the deadline, HTTP 429 and 5xx) is
retried with exponential backoff; a reply that is nonsense is refused at once, one line naming the server, the
field and its value. The HTTP client (httpx2, or httpx with the same API) is imported only when a backend is
made, so the rest of headway works without it.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from types import ModuleType
from typing import Any, TypeVar

from headway.errors import ConfigError
from headway.limits import (MAX_BACKOFF_S, MAX_CONCURRENCY, MAX_MODEL_NAME, MAX_REPLY_BYTES, MAX_REPLY_TOKENS,
                            MAX_RETRIES, MAX_TIMEOUT_S, MIN_TOKEN_LOGPROB)
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

# Bytes of a refusal's reply (HTTP 4xx, 5xx) read for the message it quotes; the rest is left unread.
REFUSAL_PREVIEW_BYTES = 64 * 1024
LOGPROB_RULE = f"a log-probability (a number in [{MIN_TOKEN_LOGPROB:g}, 0])"

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
        # A control character (urlsplit drops tabs and newlines; the HTTP client refuses them) or a host name no
        # DNS query can carry ("a..b", a label over 63 characters) would fail inside the client, not here.
        usable = usable and base_url.isprintable() and bool(parts.hostname.encode("idna"))
    except ValueError:  # e.g. an unclosed [IPv6 bracket, a port that is not a number, a host IDNA refuses
        usable = False
    if not usable:
        raise ConfigError(f"base URL {base_url!r} is invalid; use an http:// or https:// URL, such as {DEFAULT_BASE_URL}")
    return (base_url, check_number("timeout", timeout, 0.0, MAX_TIMEOUT_S, low_open=True),
            check_int("retries", retries, 0, MAX_RETRIES), check_int("concurrency", concurrency, 1, MAX_CONCURRENCY))


def continuation_logprob(reply: Any, start: int, end: int, url: str) -> float:
    """Sum the log-probabilities of the echoed tokens covering characters [start, end) of the prompt.

    `text_offset` gives each token's first character in the echoed text. A token counts when it ends
    after `start` and starts before `end`: a token straddling the context/continuation boundary counts
    toward the continuation, and the one generated token, which starts at `end`, is dropped. Every token
    must be text, every offset a whole number no smaller than the one before and every log-probability given `LOGPROB_RULE`'s number
    (the first token's may be null, as servers send it, unless it is counted).
    """
    try:
        logprobs = reply["choices"][0]["logprobs"]
        tokens, values, offsets = logprobs["tokens"], logprobs["token_logprobs"], logprobs["text_offset"]
    except (KeyError, IndexError, TypeError):
        raise BackendError(f"malformed response from {url}: choices[0].logprobs lacks tokens, token_logprobs or "
                           f"text_offset; {ECHO_HINT}") from None
    where = "choices[0].logprobs"
    for name, items in (("tokens", tokens), ("token_logprobs", values), ("text_offset", offsets)):
        if not isinstance(items, list):
            raise reply_fault(url, f"{where}.{name}", items, "a list")
    if not len(tokens) == len(values) == len(offsets):
        raise BackendError(f"malformed response from {url}: tokens, token_logprobs and text_offset differ in length "
                           f"({len(tokens)}, {len(values)}, {len(offsets)})")
    total, counted, previous = 0.0, 0, 0
    for index, (token, value, offset) in enumerate(zip(tokens, values, offsets, strict=True)):
        if not isinstance(token, str):
            raise reply_fault(url, f"{where}.tokens[{index}]", token, "text")
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < previous:
            # echoed text is read in order: an offset that goes back would count other tokens as the continuation
            raise reply_fault(url, f"{where}.text_offset[{index}]", offset,
                              f"a character offset (a whole number >= {previous}, the one before)")
        previous = offset
        if value is not None:
            value = token_logprob(value, url, f"{where}.token_logprobs[{index}]")
        if offset + len(token) > start and offset < end:
            if value is None:
                raise BackendError(f"malformed response from {url}: continuation token {token!r} has no "
                                   f"log-probability; {ECHO_HINT}")
            total += value
            counted += 1
    if not counted:
        raise BackendError(f"malformed response from {url}: no echoed token covers the continuation; {ECHO_HINT}")
    return total


def token_logprob(value: Any, url: str, field: str) -> float:
    """`value`, read from `field` of `url`'s reply, as a token's log-probability: a JSON number (not true or
    false), finite and in [MIN_TOKEN_LOGPROB, 0]; anything else is the one-line refusal of the reply."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not MIN_TOKEN_LOGPROB <= value <= 0:
        raise reply_fault(url, field, value, LOGPROB_RULE)
    return float(value)


def model_name(value: Any, url: str, field: str) -> str:
    """`value`, read from `field` of `url`'s reply, as a model's name: text of 1 to MAX_MODEL_NAME printable
    characters (it keys the response cache and is printed in reports)."""
    if not (isinstance(value, str) and value.strip() and len(value) <= MAX_MODEL_NAME and value.isprintable()):
        raise reply_fault(url, field, value, f"a model name (text of 1 to {MAX_MODEL_NAME} printable characters)")
    return value


def reply_fault(url: str, field: str, value: Any, expected: str) -> BackendError:
    """The one-line refusal of a reply from `url` whose `field` holds `value` where `expected` belongs; the value
    is quoted as JSON writes it (true, NaN, {...}), cut to 60 characters."""
    try:
        quoted = json.dumps(value)
    except (ValueError, RecursionError):
        quoted = repr(value)
    return BackendError(f"malformed response from {url}: {field} = {_one_line(quoted, 60)} is not {expected}; "
                        "the server is broken or not OpenAI-compatible")


def parse_reply(data: bytes, url: str) -> Any:
    """The JSON value of a reply's body; one that is not JSON (or nests deeper than Python parses, or holds a
    number too long to read) is refused with one line."""
    try:
        return json.loads(data)
    except (ValueError, RecursionError):  # UnicodeDecodeError is a ValueError
        snippet = _one_line(data[:160].decode("utf-8", "replace"), 80)
        raise BackendError(f"malformed response from {url}: not JSON ({snippet!r})") from None


def _server_message(data: bytes, reason: str) -> str:
    """The error message in a server's reply body (OpenAI, vLLM, llama.cpp or FastAPI shape), else its text, else
    the status's reason phrase."""
    try:
        reply = json.loads(data)
    except (ValueError, RecursionError):
        reply = None
    if isinstance(reply, dict):
        error = reply.get("error")
        for found in (error.get("message") if isinstance(error, dict) else error, reply.get("message"),
                      reply.get("detail")):
            if isinstance(found, str) and found.strip():
                return _one_line(found)
    return _one_line(data.decode("utf-8", "replace")) or reason


def _one_line(text: str, limit: int = 200) -> str:
    """`text` on one line, cut to `limit` characters, to quote inside an error message."""
    line = " ".join(text.split())
    return line if len(line) <= limit else line[:limit - 1] + "…"


class PastDeadline(Exception):
    """A request's deadline passed before its reply was read whole."""


class Lane:
    """One of a backend's `concurrency` connections: an HTTP client holding at most one connection (kept alive
    between requests), the socket of that connection (noted through httpcore's trace hook as it is opened), and
    the attempt on it now, whose deadline may shut that socket."""

    def __init__(self, client: Any) -> None:
        """Wrap `client`, an HTTP client limited to one connection."""
        self.client = client
        self.socket: socket.socket | None = None
        self.attempt: object | None = None
        self.expired = False
        self.lock = threading.Lock()

    def trace(self, event: str, info: dict[str, Any]) -> None:
        """httpcore's trace hook: note the socket of each connection opened (TCP, then TLS over it); one opened
        after the attempt's deadline is shut at once."""
        if event.endswith((".connect_tcp.complete", ".start_tls.complete")):
            with self.lock:
                self.socket = info["return_value"].get_extra_info("socket")
                if self.expired:
                    self._shut()

    def begin(self) -> object:
        """Start an attempt on this lane; the token `cut` takes."""
        with self.lock:
            self.attempt, self.expired = object(), False
            return self.attempt

    def cut(self, attempt: object) -> None:
        """The deadline of `attempt` passed: when it is still running, shut the connection's socket, so that a
        read or write blocked on it returns at once (a later attempt on the lane is left alone)."""
        with self.lock:
            if attempt is self.attempt:
                self.expired = True
                self._shut()

    def end(self) -> bool:
        """End the attempt running; whether its deadline passed."""
        with self.lock:
            self.attempt = None
            return self.expired

    def _shut(self) -> None:
        if self.socket is not None:
            with contextlib.suppress(OSError):  # already closed
                self.socket.shutdown(socket.SHUT_RDWR)


def read_body(response: Any, url: str, cap: int, cut_off: bool) -> bytes:
    """The (decoded) body of a streamed `response`, read in pieces: refused once it passes `cap` bytes (or its
    Content-Length says it will), or with `cut_off` only its first `cap` bytes."""
    declared = response.headers.get("content-length", "")
    if not cut_off and declared.isdigit() and int(declared) > cap:
        raise BackendError(f"malformed response from {url}: its reply is {int(declared):,} bytes long, more than "
                           f"the {cap:,} bytes a reply may have (docs/cli.md#limits)")
    chunks, size = [], 0
    for chunk in response.iter_bytes():
        chunks.append(chunk)
        size += len(chunk)
        if size > cap:
            if cut_off:
                break
            raise BackendError(f"malformed response from {url}: its reply passed the {cap:,} bytes a reply may "
                               "have (docs/cli.md#limits)")
    return b"".join(chunks)[:cap]


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
        self._lanes: queue.SimpleQueue[Lane] = queue.SimpleQueue()
        tls = self._httpx.create_ssl_context()  # one for every lane: building one takes a fifth of a second
        self._all_lanes = [Lane(self._httpx.Client(
            verify=tls, timeout=self._httpx.Timeout(timeout),
            headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
            limits=self._httpx.Limits(max_connections=1, max_keepalive_connections=1),
        )) for _ in range(concurrency)]
        for lane in self._all_lanes:
            self._lanes.put(lane)
        try:
            self.model_id = model or os.environ.get("OPENAI_MODEL") or self._discover_model()
        except BaseException:
            self.close()
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
        """Close the HTTP clients and their connections."""
        for lane in self._all_lanes:
            lane.client.close()

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
        try:
            content.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, e.g. "\ud800": valid JSON, but not text any table holds
            raise reply_fault(f"{self.base_url}/chat/completions", "choices[0].message.content", content,
                              "UTF-8 text") from None
        return content

    def _discover_model(self) -> str:
        """The first model the server lists at /models, for when the user names none."""
        reply = self._call("GET", "/models")
        try:
            name = reply["data"][0]["id"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"{self.base_url}/models lists no model; name the model or set OPENAI_MODEL") from None
        return model_name(name, f"{self.base_url}/models", "data[0].id")

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
        """Send one request and return its JSON reply, retrying what may pass (no connection, the deadline, 429,
        5xx); a refusal (other 4xx) or a reply that is not JSON or too large ends at once."""
        httpx = self._httpx
        url = f"{self.base_url}{path}"
        attempts = self.retries + 1
        unreachable, last = False, ""
        for attempt in range(attempts):
            if attempt:
                self._sleep(min(self.backoff * 2 ** (attempt - 1), MAX_BACKOFF_S))
            try:
                status, data, reason = self._exchange(method, url, body)
            except (httpx.ConnectError, httpx.ConnectTimeout) as error:
                unreachable, last = True, _one_line(str(error)) or type(error).__name__
                continue
            except (PastDeadline, httpx.TimeoutException):
                unreachable = False
                last = (f"no complete reply within {self.timeout:g} s (--timeout bounds a whole request; raise it "
                        "if the model is slow)")
                continue
            except httpx.RequestError as error:
                unreachable, last = False, f"{type(error).__name__}: {_one_line(str(error))}"
                continue
            if status == 429 or status >= 500:
                unreachable, last = False, f"HTTP {status}: {_server_message(data, reason)}"
                continue
            if not 200 <= status < 300:
                raise BackendError(f"{method} {url} was refused (HTTP {status}): {_server_message(data, reason)}"
                                   f"{REFUSAL_HINTS.get(status, '')}")
            return parse_reply(data, url)
        if unreachable:
            raise BackendError(f"cannot reach {url} after {attempts} attempts ({last}); is the server running? "
                               "start it or set OPENAI_BASE_URL")
        raise BackendError(f"{method} {url} failed after {attempts} attempts; last error: {last}")

    def _exchange(self, method: str, url: str, body: dict[str, Any] | None) -> tuple[int, bytes, str]:
        """One attempt on a free lane, by its deadline: the reply's status, body (a success's at most
        MAX_REPLY_BYTES, else refused; a refusal's first REFUSAL_PREVIEW_BYTES) and reason phrase. PastDeadline
        when the deadline shut the connection first."""
        lane = self._lanes.get()
        attempt = lane.begin()
        watchdog = threading.Timer(self.timeout, lane.cut, (attempt,))
        watchdog.daemon = True
        watchdog.start()
        try:
            with lane.client.stream(method, url, json=body, extensions={"trace": lane.trace}) as response:
                ok = 200 <= response.status_code < 300
                data = read_body(response, url, MAX_REPLY_BYTES if ok else REFUSAL_PREVIEW_BYTES, cut_off=not ok)
                return response.status_code, data, response.reason_phrase
        except self._httpx.RequestError:
            if lane.end():
                raise PastDeadline from None
            raise
        finally:
            watchdog.cancel()
            lane.end()
            self._lanes.put(lane)
