"""One prompted evaluation end to end: questions → backend (cached) → scores → tables, figure, report.

Everything lands in one output folder; responses are cached there too (`cache.sqlite`), so running
the same command again after an interruption asks the model only what it has not answered yet.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from headway.errors import ConfigError
from headway.llm.backend import Backend
from headway.llm.cache import CachedBackend, ResponseCache
from headway.llm.evaluate import evaluate, scoring_modes, summarise
from headway.tasks.retrieval.prompts.harness import write_harness
from headway.tasks.retrieval.prompts.questions import QuestionSet, check_renderable, make_questions, write_questions

BACKENDS = ("hf", "http", "vllm")


@dataclass(frozen=True)
class BackendSettings:
    """Which backend serves which model, and how it is reached."""

    backend: str = "hf"
    model: str | None = None
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    device: str = "cpu"
    batch_size: int = 8
    add_bos: bool = False
    timeout: float = 60.0
    retries: int = 3
    concurrency: int = 4

    def __post_init__(self) -> None:
        """Refuse an unknown backend, or a local backend without a model, before anything loads."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend = {self.backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
        if self.backend != "http" and not self.model:
            raise ConfigError(f"the {self.backend} backend needs --model (a model folder, a .gguf file or "
                              f"an alias such as smollm2-135m)")


def open_backend(settings: BackendSettings) -> Backend:
    """The backend the settings describe (heavy libraries are imported here, only when needed)."""
    if settings.backend == "hf":
        from headway.llm.hf import HFBackend

        return HFBackend(settings.model or "", device=settings.device, batch_size=settings.batch_size,
                         add_bos=settings.add_bos)
    if settings.backend == "vllm":
        from headway.llm.vllm import VLLMBackend

        return VLLMBackend(settings.model or "", add_bos=settings.add_bos)
    from headway.llm.http import OpenAIBackend

    return OpenAIBackend(settings.model, settings.base_url, settings.api_key, timeout=settings.timeout,
                         retries=settings.retries, concurrency=settings.concurrency)


@dataclass
class EvalResult:
    """What an evaluation produced: per-question rows, the per-cell table and the run's metadata."""

    per_question: pd.DataFrame
    results: pd.DataFrame
    meta: dict[str, Any]
    out: Path


def run_llm_eval(spec: QuestionSet, settings: BackendSettings, out: str | Path, *, scoring: str = "loglik",
                 max_tokens: int = 24, show_progress: bool = True, backend: Backend | None = None) -> EvalResult:
    """Draw the questions, export them, ask the backend through the on-disk cache, and write every output.

    A `backend` passed in (e.g. a model already loaded in a notebook) is used and left open; otherwise
    one is opened from `settings` and closed at the end.
    """
    out = Path(out)
    started = time.perf_counter()
    check_renderable(spec)
    owned = backend is None
    backend = open_backend(settings) if backend is None else backend  # first, so a bad model fails fast
    cache = None
    try:
        questions = make_questions(spec)
        out.mkdir(parents=True, exist_ok=True)
        write_questions(out / "questions.jsonl", questions)
        write_harness(out / "harness", questions)
        cache = ResponseCache(out / "cache.sqlite")
        cached = CachedBackend(backend, cache)
        modes = scoring_modes(scoring, cached)
        per_question = evaluate(questions, cached, scoring, max_tokens=max_tokens, show_progress=show_progress)
    finally:
        if owned:
            backend.close()
        if cache is not None:
            cache.close()
    results = summarise(per_question)
    meta = {"model": backend.model_id, "backend": settings.backend, "scoring": modes, **_spec_meta(spec),
            "max_tokens": max_tokens, "questions": len(questions), "cache_hits": cached.hits,
            "cache_misses": cached.misses, "seconds": round(time.perf_counter() - started, 1)}
    _write_tables(out, per_question, results, meta)
    from headway.llm.report import write_report

    write_report(out, results, per_question, questions, meta)
    return EvalResult(per_question, results, meta, out)


def _spec_meta(spec: QuestionSet) -> dict[str, Any]:
    """The question settings as report metadata."""
    meta = asdict(spec)
    meta["formulations"] = list(spec.formulations)
    meta["questions_per_cell"] = meta.pop("questions")
    return meta


def _write_tables(out: Path, per_question: pd.DataFrame, results: pd.DataFrame, meta: dict[str, Any]) -> None:
    """predictions.csv (one row per question), results.csv (one per cell and metric) and summary.json."""
    per_question.to_csv(out / "predictions.csv", index=False)
    results.to_csv(out / "results.csv", index=False)
    summary = {"meta": meta, "results": results.to_dict(orient="records")}
    (out / "summary.json").write_text(json.dumps(summary, indent=2) + "\n", encoding="utf-8")
