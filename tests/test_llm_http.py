"""The OpenAI-compatible HTTP backend and the response cache, against a real fake server on 127.0.0.1."""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from conftest import free_port

from headway.errors import ConfigError
from headway.limits import MAX_BACKOFF_S, MAX_RETRIES
from headway.llm.backend import Backend, BackendError, LoglikRequest
from headway.llm.cache import CachedBackend, ResponseCache, request_key
from headway.llm.http import OpenAIBackend

GENERATED = " end"
GENERATED_LOGPROB = -9.0


def echoed_logprobs(text):
    """What the fake server echoes for `text`: words with their leading spaces, then one generated token.

    Each word scores -0.1 per character; the first has no log-probability, as with real servers.
    """
    words = list(re.finditer(r"\s*\S+", text))
    tokens = [word.group() for word in words]
    return {
        "tokens": tokens + [GENERATED],
        "token_logprobs": [None] + [-0.1 * len(token) for token in tokens[1:]] + [GENERATED_LOGPROB],
        "text_offset": [word.start() for word in words] + [len(text)],
    }


class FakeHandler(BaseHTTPRequestHandler):
    """Answers like an OpenAI-compatible server, or misbehaves as its `FakeServer` is told to."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format, *args):
        """Keep the test output quiet."""

    def do_GET(self):
        """Serve /models."""
        self.answer(None)

    def do_POST(self):
        """Serve /completions and /chat/completions."""
        self.answer(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))

    def answer(self, body):
        """Record the request, then reply as the server's current behaviour says."""
        fake = self.server.fake
        with fake.lock:
            fake.requests.append((self.command, self.path, dict(self.headers), body))
            failure = fake.failures.pop(0) if fake.failures else None
            fake.in_flight += 1
            fake.peak = max(fake.peak, fake.in_flight)
        try:
            if fake.stall:
                time.sleep(fake.stall)
                self.close_connection = True
                return
            if fake.jitter and body is not None:
                time.sleep(0.01 * (len(json.dumps(body)) % 4))
            status, payload = failure if failure else (200, fake.reply(self.path, body))
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            with fake.lock:
                fake.in_flight -= 1


class QuietServer(ThreadingHTTPServer):
    """A threading server whose close does not wait for stalled handlers."""

    block_on_close = False


class FakeServer:
    """An OpenAI-compatible server on an ephemeral port that records requests and can be told to misbehave."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.failures = []
        self.stall = 0.0
        self.jitter = False
        self.broken = None
        self.models = ["fake-model"]
        self.in_flight = self.peak = 0
        self.httpd = QuietServer(("127.0.0.1", 0), FakeHandler)
        self.httpd.fake = self
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    @property
    def url(self):
        """The base URL a backend is given."""
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def fail(self, status, times=1, payload=None):
        """Answer the next `times` requests with `status` instead of a reply."""
        self.failures += [(status, payload or {"error": {"message": f"fake failure {status}"}})] * times

    def count(self, path=None):
        """Requests received so far, for one path or all."""
        return sum(1 for _, seen, _, _ in self.requests if path is None or seen == path)

    def reply(self, path, body):
        """The well-formed (or deliberately broken) answer to a request."""
        if path == "/v1/models":
            return {"object": "list", "data": [{"id": name, "object": "model"} for name in self.models]}
        if path == "/v1/completions":
            if self.broken == "json":
                return b'{"choices": [ not json'
            choice = {"text": GENERATED, "index": 0, "finish_reason": "length"}
            if self.broken != "no-logprobs":
                choice["logprobs"] = echoed_logprobs(body["prompt"])
            return {"object": "text_completion", "model": body["model"], "choices": [choice]}
        if path == "/v1/chat/completions":
            content = None if self.broken == "null-content" else "echo: " + body["messages"][0]["content"]
            return {"object": "chat.completion", "choices": [{"index": 0, "message": {"role": "assistant",
                                                                                      "content": content}}]}
        return {"error": {"message": f"no route {path}"}}

    def stop(self):
        """Stop serving and free the port."""
        self.httpd.shutdown()
        self.httpd.server_close()


class StopsAfter(Backend):
    """Passes `calls` calls through to `inner`, then raises KeyboardInterrupt as a Ctrl-C would."""

    def __init__(self, inner, calls):
        """Wrap `inner`, keeping its kind and model so cache keys match."""
        self.inner, self.calls = inner, calls
        self.kind, self.model_id = inner.kind, inner.model_id

    def loglikelihood(self, requests, progress=None):
        """Score through `inner`, or raise KeyboardInterrupt once the allowed calls are used up."""
        if self.calls == 0:
            raise KeyboardInterrupt
        self.calls -= 1
        return self.inner.loglikelihood(requests, progress)

    def generate(self, prompts, max_tokens, progress=None):
        """Generate through `inner`."""
        return self.inner.generate(prompts, max_tokens, progress)

    def close(self):
        """Close `inner`."""
        self.inner.close()


@pytest.fixture(autouse=True)
def no_openai_env(monkeypatch):
    """Keep the caller's OPENAI_* settings out of every test."""
    for name in ("OPENAI_BASE_URL", "OPENAI_API_KEY", "OPENAI_MODEL"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def server():
    """A fresh fake server per test."""
    fake = FakeServer()
    yield fake
    fake.stop()


@pytest.fixture
def sleeps():
    """The backoff delays a backend asked for; tests inject this list's append instead of time.sleep."""
    return []


@pytest.fixture
def connect(server, sleeps):
    """Make backends on the fake server (closed at the end) that never really sleep between retries."""
    made = []

    def make(**settings):
        """An OpenAIBackend on the fake server; `settings` override the test defaults."""
        settings = {"model": "fake-model", "base_url": server.url, "timeout": 5.0, "retries": 2, "backoff": 0.5,
                    "sleep": sleeps.append, **settings}
        made.append(OpenAIBackend(**settings))
        return made[-1]

    yield make
    for backend in made:
        backend.close()


QUESTIONS = [LoglikRequest(f"Question {i}: the answer is", " " + "x" * (i % 7 + 1)) for i in range(20)]
EXPECTED = [-0.1 * (i % 7 + 2) for i in range(20)]


def test_loglikelihood_sums_the_continuation_tokens(connect, server):
    cases = [
        ("Answer:", " 7", -0.2),  # the boundary: " 7" starts exactly where the context ends
        ("The capital of France is", " Paris", -0.6),
        ("a b", " c d", -0.4),  # two continuation tokens; " b" ends at the boundary and is left out
        ("Answer: 4", "2", -0.3),  # " 42" straddles the boundary and counts toward the continuation
    ]
    scores = connect().loglikelihood([LoglikRequest(context, continuation) for context, continuation, _ in cases])
    assert scores == pytest.approx([expected for _, _, expected in cases])
    assert {(method, path) for method, path, _, _ in server.requests} == {("POST", "/v1/completions")}
    bodies = {body["prompt"]: body for _, _, _, body in server.requests}
    assert bodies["Answer: 7"] == {"model": "fake-model", "prompt": "Answer: 7", "max_tokens": 1, "temperature": 0,
                                   "echo": True, "logprobs": 1}


def test_results_keep_request_order_under_concurrency(connect, server):
    server.jitter = True
    done = []
    scores = connect(concurrency=4).loglikelihood(QUESTIONS, progress=done.append)
    assert scores == pytest.approx(EXPECTED)
    assert done == [1] * 20
    assert server.count("/v1/completions") == 20
    assert 1 < server.peak <= 4


def test_generate_returns_the_chat_content(connect, server):
    backend = connect()
    assert backend.generate(["hi", "who are you?"], max_tokens=5) == ["echo: hi", "echo: who are you?"]
    assert {path for _, path, _, _ in server.requests} == {"/v1/chat/completions"}
    body = next(body for _, _, _, body in server.requests if body["messages"][0]["content"] == "hi")
    assert body == {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 5,
                    "temperature": 0}
    server.broken = "null-content"
    assert backend.generate(["hi"], max_tokens=5) == [""]


def test_unreachable_server_fails_after_the_retries(sleeps):
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend("m", url, timeout=5.0, retries=2, backoff=0.5, sleep=sleeps.append)
    start = time.monotonic()
    with pytest.raises(BackendError, match=rf"cannot reach {re.escape(url)}/completions after 3 attempts.*"
                                           r"is the server running\?"):
        backend.loglikelihood([LoglikRequest("Answer:", " 7")])
    assert time.monotonic() - start < 2.0
    assert sleeps == [0.5, 1.0]
    backend.close()


def test_backoff_doubles_up_to_its_cap(sleeps):
    url = f"http://127.0.0.1:{free_port()}/v1"
    backend = OpenAIBackend("m", url, timeout=5.0, retries=MAX_RETRIES, backoff=1.0, sleep=sleeps.append)
    with pytest.raises(BackendError, match=f"after {MAX_RETRIES + 1} attempts"):
        backend.loglikelihood([LoglikRequest("Answer:", " 7")])
    assert sleeps == [min(2.0**i, MAX_BACKOFF_S) for i in range(MAX_RETRIES)] and max(sleeps) == MAX_BACKOFF_S
    backend.close()


def test_timeout_fails_after_the_retries(connect, server, sleeps):
    server.stall = 1.0
    with pytest.raises(BackendError, match=r"/completions failed after 2 attempts; last error: no reply within 0.3 s"):
        connect(timeout=0.3, retries=1).loglikelihood([LoglikRequest("Answer:", " 7")])
    assert server.count() == 2
    assert sleeps == [0.5]


@pytest.mark.parametrize("status", [500, 503, 429])
def test_server_errors_and_rate_limits_are_retried(connect, server, sleeps, status):
    server.fail(status, times=2)
    assert connect(retries=2).loglikelihood([LoglikRequest("Answer:", " 7")]) == pytest.approx([-0.2])
    assert server.count() == 3
    assert sleeps == [0.5, 1.0]


def test_persistent_server_error_names_the_last_error(connect, server):
    server.fail(500, times=10, payload={"message": "model crashed"})
    with pytest.raises(BackendError, match=r"failed after 3 attempts; last error: HTTP 500: model crashed"):
        connect().generate(["hi"], max_tokens=3)
    assert server.count() == 3


def test_client_error_fails_at_once_with_the_server_message(connect, server, sleeps):
    server.fail(400, payload={"error": {"message": "prompt exceeds the context window", "type": "invalid"}})
    with pytest.raises(BackendError, match=r"refused \(HTTP 400\): prompt exceeds the context window"):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])
    assert server.count() == 1
    assert sleeps == []


@pytest.mark.parametrize("broken, request_, message", [
    ("json", LoglikRequest("Answer:", " 7"), "not JSON"),
    ("no-logprobs", LoglikRequest("Answer:", " 7"), "server must support echo with logprobs"),
    (None, LoglikRequest("", "Paris"), "continuation token 'Paris' has no log-probability"),
])
def test_unusable_replies_are_backend_errors(connect, server, broken, request_, message):
    server.broken = broken
    with pytest.raises(BackendError, match=rf"malformed response from .*/completions: .*{message}"):
        connect().loglikelihood([request_])
    assert server.count() == 1


def test_model_is_discovered_when_none_is_named(connect, server):
    server.models = ["first-model", "second-model"]
    backend = connect(model=None)
    assert backend.model_id == "first-model"
    assert server.requests[0][:2] == ("GET", "/v1/models")
    backend.generate(["hi"], max_tokens=2)
    assert server.requests[-1][3]["model"] == "first-model"
    server.models = []
    with pytest.raises(BackendError, match=r"/models lists no model; name the model or set OPENAI_MODEL"):
        connect(model=None)


def test_settings_come_from_the_environment(server, monkeypatch):
    monkeypatch.setenv("OPENAI_BASE_URL", server.url + "/")
    monkeypatch.setenv("OPENAI_MODEL", "env-model")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    backend = OpenAIBackend()
    assert (backend.kind, backend.model_id, backend.base_url) == ("http", "env-model", server.url)
    backend.generate(["hi"], max_tokens=2)
    backend.close()
    assert server.count("/v1/models") == 0
    assert server.requests[0][2]["Authorization"] == "Bearer sk-env"


def test_api_key_header_only_when_given(connect, server):
    connect(api_key="sk-test").generate(["hi"], max_tokens=2)
    connect().generate(["hi"], max_tokens=2)
    assert server.requests[0][2]["Authorization"] == "Bearer sk-test"
    assert "Authorization" not in server.requests[1][2]


@pytest.mark.parametrize("settings, message", [
    ({"timeout": 0}, r"timeout = 0 is invalid; use a number in \(0, 3600\]"),
    ({"timeout": float("inf")}, "timeout = inf is invalid"),
    ({"timeout": 1e12}, r"timeout = 1000000000000.0 is invalid; use a number in \(0, 3600\]"),
    ({"retries": -1}, "retries = -1 is invalid; use an integer in 0..10"),
    ({"retries": 10**12}, "retries = 1000000000000 is invalid; use an integer in 0..10"),
    ({"retries": 1.5}, "retries = 1.5 is not an integer"),
    ({"backoff": -1.0}, r"backoff = -1.0 is invalid; use a number in \[0, 60\]"),
    ({"concurrency": 0}, "concurrency = 0 is invalid; use an integer in 1..256"),
    ({"base_url": "localhost:8000/v1"}, "base URL 'localhost:8000/v1' is invalid; use an http:// or https:// URL"),
    ({"base_url": "http://[::1"}, r"base URL 'http://\[::1' is invalid"),
    ({"base_url": "http://host:port/v1"}, "base URL 'http://host:port/v1' is invalid"),
])
def test_bad_settings_are_config_errors(settings, message):
    with pytest.raises(ConfigError, match=message):
        OpenAIBackend("m", **settings)


def test_bad_requests_are_config_errors(connect, server):
    backend = connect()
    with pytest.raises(ConfigError, match="empty continuation"):
        backend.loglikelihood([LoglikRequest("Answer:", "")])
    with pytest.raises(ConfigError, match="max_tokens = 0 is invalid"):
        backend.generate(["hi"], max_tokens=0)
    assert server.count() == 0


def test_missing_http_client_says_how_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "httpx2", None)
    monkeypatch.setitem(sys.modules, "httpx", None)
    with pytest.raises(BackendError, match=r"pip install 'headway\[llm\]'"):
        OpenAIBackend("m")


def test_response_cache_stores_and_reopens(tmp_path):
    path = tmp_path / "deep" / "folder" / "cache.sqlite"
    with ResponseCache(path) as cache:
        cache.put_many({"a": -1.25, "b": "text", "c": None})
        cache.put_many({"a": -2.5})
        assert len(cache) == 3
    with ResponseCache(path) as cache:
        assert cache.get_many(["a", "b", "c", "missing"]) == {"a": -2.5, "b": "text", "c": None}
        assert cache.get_many([]) == {}


def test_unusable_cache_file_is_a_config_error(tmp_path):
    path = tmp_path / "cache.sqlite"
    path.write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(ConfigError, match="is not a usable response cache"):
        ResponseCache(path)


def test_request_key_is_canonical_and_tells_requests_apart():
    key = request_key("http", "m", "generate", {"prompt": "hi", "max_tokens": 5})
    assert key == request_key("http", "m", "generate", {"max_tokens": 5, "prompt": "hi"})
    assert re.fullmatch(r"[0-9a-f]{64}", key)
    others = [("hf", "m", "generate", {"prompt": "hi", "max_tokens": 5}),
              ("http", "m2", "generate", {"prompt": "hi", "max_tokens": 5}),
              ("http", "m", "loglikelihood", {"prompt": "hi", "max_tokens": 5}),
              ("http", "m", "generate", {"prompt": "hi", "max_tokens": 6})]
    assert key not in {request_key(*parts) for parts in others}


def test_cached_run_resumes_without_asking_the_server(connect, server, tmp_path):
    path = tmp_path / "cache.sqlite"
    with ResponseCache(path) as cache:
        backend = CachedBackend(connect(), cache, chunk=4)
        first = backend.loglikelihood(QUESTIONS)
        assert (backend.hits, backend.misses, server.count()) == (0, 20, 20)
    with ResponseCache(path) as cache:
        backend = CachedBackend(connect(), cache, chunk=4)
        done = []
        assert backend.loglikelihood(QUESTIONS, progress=done.append) == first
        assert (backend.hits, backend.misses, server.count()) == (20, 0, 20)
        assert sum(done) == 20
    assert first == pytest.approx(EXPECTED)


def test_interrupted_run_keeps_finished_chunks(connect, server, tmp_path):
    path = tmp_path / "cache.sqlite"
    with ResponseCache(path) as cache:
        with pytest.raises(KeyboardInterrupt):
            CachedBackend(StopsAfter(connect(), calls=1), cache, chunk=8).loglikelihood(QUESTIONS)
        assert len(cache) == 8
    assert server.count() == 8
    with ResponseCache(path) as cache:
        backend = CachedBackend(connect(), cache, chunk=8)
        done = []
        assert backend.loglikelihood(QUESTIONS, progress=done.append) == pytest.approx(EXPECTED)
        assert (backend.hits, backend.misses) == (8, 12)
        assert sum(done) == 20
    assert server.count() == 20
    assert {body["prompt"] for _, _, _, body in server.requests[8:]} == {q.context + q.continuation
                                                                          for q in QUESTIONS[8:]}


def test_cached_backend_asks_each_distinct_request_once(connect, server, tmp_path):
    with ResponseCache(tmp_path / "cache.sqlite") as cache:
        inner = connect()
        backend = CachedBackend(inner, cache, chunk=2)
        assert (backend.kind, backend.model_id, backend.supports_generate) == ("http", "fake-model", True)
        done = []
        replies = backend.generate(["a", "b", "a", "a", "c"], max_tokens=4, progress=done.append)
        assert replies == ["echo: a", "echo: b", "echo: a", "echo: a", "echo: c"]
        assert (backend.hits, backend.misses, server.count(), sum(done)) == (2, 3, 3, 5)
        backend.generate(["a"], max_tokens=9)
        assert server.count() == 4
        backend.close()
        assert len(cache) == 4


def test_cached_backend_checks_its_chunk(connect, tmp_path):
    with ResponseCache(tmp_path / "cache.sqlite") as cache, pytest.raises(ConfigError, match="chunk = 0 is invalid"):
        CachedBackend(connect(), cache, chunk=0)
