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

from headway.cli.main import main
from headway.errors import ConfigError
from headway.limits import MAX_BACKOFF_S, MAX_REPLY_BYTES, MAX_RETRIES
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
            if fake.drip is not None:
                self.drip(fake.drip)
                return
            if fake.oversize is not None:
                self.oversize(*fake.oversize)
                return
            if fake.jitter and body is not None:
                time.sleep(0.01 * (len(json.dumps(body)) % 4))
            status, payload = failure if failure else (200, fake.tamper(fake.reply(self.path, body)))
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            with fake.lock:
                fake.in_flight -= 1

    def drip(self, where):
        """Send a byte every 0.1 s: of the status line and headers (`where` "head"), or of a body that never ends
        ("body"), until the client hangs up."""
        self.close_connection = True
        start = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
        if where == "body":
            self.wfile.write(start + b"Content-Length: 1000000\r\n\r\n")
        stream = start + b"X-Slow: " + b"a" * 10_000 if where == "head" else b" " * 1_000_000
        try:
            for byte in stream:
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:  # the client hung up: what the deadline should do
            pass

    def oversize(self, size, declared):
        """A 200 reply of `size` bytes of JSON whitespace, its length declared in Content-Length or not (chunked)."""
        self.close_connection = True
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header(*(("Content-Length", str(size)) if declared else ("Transfer-Encoding", "chunked")))
        self.end_headers()
        piece = b" " * 2**20
        try:
            for start in range(0, size, len(piece)):
                part = piece[:size - start]
                self.wfile.write(part if declared else b"%x\r\n%s\r\n" % (len(part), part))
            if not declared:
                self.wfile.write(b"0\r\n\r\n")
        except OSError:  # the client stopped reading at its cap
            pass


class QuietServer(ThreadingHTTPServer):
    """A threading server whose close does not wait for stalled handlers."""

    block_on_close = False

    def handle_error(self, request, client_address):
        """Say nothing when a client hangs up mid-reply: the hostile servers' clients are meant to."""


class FakeServer:
    """An OpenAI-compatible server on an ephemeral port that records requests and can be told to misbehave."""

    def __init__(self):
        self.lock = threading.Lock()
        self.requests = []
        self.failures = []
        self.stall = 0.0
        self.jitter = False
        self.broken = None
        self.drip = None  # "head" or "body": send that part a byte at a time
        self.oversize = None  # (bytes, declared): a reply that large, its length declared or not
        self.tamper = lambda reply: reply  # what a hostile server does to a well-formed reply (JSON) before sending
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


def test_a_chat_reply_that_is_not_utf8_text_is_refused(connect, server):
    """A lone surrogate ("\\ud800") is valid JSON but no text a table holds: refused in one line naming the field,
    never a traceback when the predictions are written; a cached reply of that kind is refused when it is parsed."""
    from headway.llm.scoring import parse_reply

    server.tamper = lambda reply: b'{"choices": [{"message": {"content": "A\\ud800"}}]}'
    with pytest.raises(BackendError, match=re.escape(f"{server.url}/chat/completions: choices[0].message.content = "
                                                     '"A\\ud800" is not UTF-8 text')):
        connect().generate(["hi"], max_tokens=5)
    for reply in ("A\ud800", 5, None):
        with pytest.raises(ConfigError, match="is not UTF-8 text; the backend's answer is unusable"):
            parse_reply(reply, ["A", "B"])


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
    with pytest.raises(BackendError, match=r"/completions failed after 2 attempts; last error: no complete reply "
                                           r"within 0.3 s \(--timeout bounds a whole request"):
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
    # refused here, not by the HTTP client's InvalidURL or the IDNA codec's UnicodeError on the first request
    ({"base_url": "http://a\nb/v1"}, r"base URL 'http://a\\nb/v1' is invalid"),
    ({"base_url": "http://a\x00b/v1"}, r"base URL 'http://a\\x00b/v1' is invalid"),
    ({"base_url": "http://a..b/v1"}, r"base URL 'http://a\.\.b/v1' is invalid"),
    ({"base_url": f"http://{'a' * 64}/v1"}, "is invalid; use an http:// or https:// URL"),
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


# A hostile server: every number, id and size it sends is checked, a whole request has a deadline, and nonsense is
# refused at once (not asked again) with one line naming the server, the field and the value.

def poison(field, index, value):
    """A tamper that puts `value` at choices[0].logprobs.FIELD[INDEX] of every /completions reply."""
    def tamper(reply):
        if "choices" in reply and "logprobs" in reply["choices"][0]:
            reply["choices"][0]["logprobs"][field][index] = value
        return reply
    return tamper


LOGPROB_RULE = "is not a log-probability (a number in [-10000, 0]); the server is broken or not OpenAI-compatible"


@pytest.mark.parametrize("value, shown", [
    (float("nan"), "NaN"), (0.5, "0.5"), (True, "true"), (-1e308, "-1e+308"), (float("-inf"), "-Infinity"),
    (-10000.001, "-10000.001"), ("-0.2", '"-0.2"'), ([-0.2], "[-0.2]"), (-10**400, "-1" + "0" * 57 + "…"),
], ids=["nan", "positive", "true", "-1e308", "-inf", "below-floor", "text", "list", "-1e400"])
@pytest.mark.parametrize("index", [1, 2])  # the continuation's token, and the generated one after it
def test_a_log_probability_that_is_not_one_is_refused_not_summed(connect, server, sleeps, value, shown, index):
    server.tamper = poison("token_logprobs", index, value)
    with pytest.raises(BackendError) as refused:
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])
    assert str(refused.value) == (f"malformed response from {server.url}/completions: "
                                  f"choices[0].logprobs.token_logprobs[{index}] = {shown} {LOGPROB_RULE}")
    assert server.count() == 1 and sleeps == []  # nonsense is not asked again


def test_log_probabilities_at_the_bounds_are_summed(connect, server):
    server.tamper = poison("token_logprobs", 1, -10000)
    assert connect().loglikelihood([LoglikRequest("Answer:", " 7")]) == [-10000.0]
    server.tamper = poison("token_logprobs", 1, 0)
    assert connect().loglikelihood([LoglikRequest("Answer:", " 7")]) == [0.0]


@pytest.mark.parametrize("field, index, value, message", [
    ("tokens", 1, 7, "tokens[1] = 7 is not text"),
    ("text_offset", 1, True, "text_offset[1] = true is not a character offset"),
    ("text_offset", 1, -1, "text_offset[1] = -1 is not a character offset"),
    ("text_offset", 1, 7.5, "text_offset[1] = 7.5 is not a character offset"),
    ("text_offset", 2, 0, "text_offset[2] = 0 is not a character offset (a whole number >= 7, the one before)"),
])
def test_tokens_and_offsets_that_are_not_are_refused(connect, server, sleeps, field, index, value, message):
    server.tamper = poison(field, index, value)
    with pytest.raises(BackendError, match=re.escape(f"{server.url}/completions: choices[0].logprobs.{message}")):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])
    assert sleeps == []


def test_a_logprobs_field_that_is_not_a_list_is_refused(connect, server):
    def tamper(reply):
        reply["choices"][0]["logprobs"]["token_logprobs"] = {"a": -1}
        return reply
    server.tamper = tamper
    with pytest.raises(BackendError, match=re.escape('choices[0].logprobs.token_logprobs = {"a": -1} is not a list')):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])


@pytest.mark.parametrize("name, shown", [
    ({"name": "x"}, '{"name": "x"}'), (7, "7"), (None, "null"), ("", '""'), ("two\nlines", '"two\\nlines"'),
    ("m" * 1025, '"' + "m" * 58 + "…"),
], ids=["object", "number", "null", "empty", "two-lines", "too-long"])
def test_a_model_id_that_is_not_a_name_is_refused(connect, server, name, shown):
    server.models = [name]
    with pytest.raises(BackendError) as refused:
        connect(model=None)
    assert str(refused.value) == (f"malformed response from {server.url}/models: data[0].id = {shown} is not a model "
                                  "name (text of 1 to 1024 printable characters); the server is broken or not "
                                  "OpenAI-compatible")


@pytest.mark.parametrize("where", ["head", "body"])
def test_a_server_that_drips_its_reply_is_cut_at_the_deadline(connect, server, sleeps, where):
    server.drip = where  # a byte every 0.1 s: no read ever waits 0.5 s, so only a deadline ends it
    start = time.monotonic()
    with pytest.raises(BackendError, match=r"/completions failed after 2 attempts; last error: no complete reply "
                                           r"within 0.5 s"):
        connect(timeout=0.5, retries=1).loglikelihood([LoglikRequest("Answer:", " 7")])
    assert 1.0 <= time.monotonic() - start < 3.0  # two attempts, each ended at its deadline
    assert server.count() == 2 and sleeps == [0.5]  # past the deadline is retried, as a timeout was


@pytest.mark.parametrize("declared", [True, False])
def test_a_reply_past_the_size_cap_is_refused_before_it_is_parsed(connect, server, sleeps, declared):
    server.oversize = (MAX_REPLY_BYTES + 2**20, declared)
    said = "its reply is 17,825,792 bytes long, more than" if declared else "its reply passed"
    with pytest.raises(BackendError, match=f"malformed response from {re.escape(server.url)}/completions: {said} "
                                           r"the 16,777,216 bytes a reply may have"):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])
    assert server.count() == 1 and sleeps == []


def test_a_reply_at_the_size_cap_is_read(connect, server):
    server.oversize = (MAX_REPLY_BYTES, False)  # all of it whitespace: read whole, then refused as not JSON
    with pytest.raises(BackendError, match=r"/completions: not JSON \(''\)"):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])


@pytest.mark.parametrize("body", [b"[" * 100_000 + b"]" * 100_000, b'{"choices": ' + b"1" * 5000 + b"}"])
def test_json_python_cannot_read_is_refused_in_one_line(connect, server, body):
    server.tamper = lambda reply: body
    with pytest.raises(BackendError, match=r"/completions: not JSON"):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])


def test_a_huge_refusal_is_quoted_from_its_start(connect, server, sleeps):
    server.fail(400, payload=b"x" * (MAX_REPLY_BYTES * 2))
    with pytest.raises(BackendError, match=r"refused \(HTTP 400\): x{199}…$"):
        connect().loglikelihood([LoglikRequest("Answer:", " 7")])
    assert sleeps == []


OUTPUTS = ("predictions.csv", "results.csv", "groups.csv", "summary.json", "report.html")


@pytest.mark.parametrize("hostile, options, said", [
    ({"tamper": poison("token_logprobs", -2, float("nan"))}, [],
     r"completions: choices\[0\]\.logprobs\.token_logprobs\[\d+\] = NaN is not a log-probability"),
    ({"tamper": poison("token_logprobs", -2, 3.5)}, [], r"token_logprobs\[\d+\] = 3\.5 is not a log-probability"),
    ({"tamper": poison("token_logprobs", -2, True)}, [], r"token_logprobs\[\d+\] = true is not a log-probability"),
    ({"tamper": poison("token_logprobs", -2, -1e308)}, [], r"token_logprobs\[\d+\] = -1e\+308 is not a log-prob"),
    ({"models": [{"id": "m"}]}, [], r"/models: data\[0\]\.id = \{\"id\": \"m\"\} is not a model name"),
    ({"drip": "body"}, ["--model", "m", "--timeout", "0.5", "--retries", "0"],
     r"completions failed after 1 attempts; last error: no complete reply within 0\.5 s"),
    ({"oversize": (MAX_REPLY_BYTES + 1, True)}, ["--model", "m"], r"more than the 16,777,216 bytes a reply may have"),
])
def test_llm_eval_refuses_a_hostile_server_in_one_line_and_writes_no_results(server, tmp_path, capsys, hostile,
                                                                             options, said):
    for name, value in hostile.items():
        setattr(server, name, value)
    out = tmp_path / "run"
    model = [] if "--model" in options or "models" in hostile else ["--model", "fake-model"]
    start = time.monotonic()
    status = main(["llm-eval", "--backend", "http", "--base-url", server.url, "-f", "F1", "--max-hops", "1",
                   "--questions", "2", "--out", str(out), "--no-progress", *model, *options])
    captured = capsys.readouterr()
    assert status == 2 and time.monotonic() - start < 20  # a drip unchecked would take 28 hours
    assert captured.err.startswith(f"headway: error: malformed response from {server.url}/") or \
        captured.err.startswith(f"headway: error: POST {server.url}/")
    assert captured.err.count("\n") == 1 and re.search(said, captured.err), captured.err
    assert captured.out == ""
    assert not [name for name in OUTPUTS if (out / name).exists()]
