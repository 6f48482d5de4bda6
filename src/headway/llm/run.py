"""One prompted evaluation end to end: questions → backend (cached) → scores → tables, figure, report.

Everything lands in one output folder; responses are cached there too (`cache.sqlite`), so running
the same command again after an interruption asks the model only what it has not answered yet.
`rewrite_outputs` writes a folder's tables and report again from its predictions, without the model.
"""

from __future__ import annotations

import io
import json
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import pandas as pd

from headway.errors import ConfigError
from headway.execution.devices import resolve_device
from headway.limits import MAX_JSON_BYTES, MAX_LLM_BATCH
from headway.llm.backend import BACKENDS, Backend
from headway.llm.cache import CachedBackend, ResponseCache
from headway.llm.evaluate import METRICS, evaluate, group_scores, scoring_modes, summarise
from headway.llm.http import check_connection
from headway.runs import layout
from headway.runs.owner import LLM_EVAL, claim
from headway.settings import check_int
from headway.tasks.retrieval.prompts.harness import write_harness
from headway.tasks.retrieval.prompts.questions import (
    Question,
    QuestionSet,
    check_renderable,
    make_questions,
    write_questions,
)

PREDICTIONS, RESULTS, SUMMARY = "predictions.csv", "results.csv", "summary.json"  # the outputs read back
GROUPS = "groups.csv"  # per formulation and overall: lm-eval's group scores


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
        """Refuse an unknown backend, a local backend without a model, and a setting out of its bounds
        (`headway.limits`) or a device this machine lacks, before anything loads."""
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend = {self.backend!r} is unknown; choose one of {', '.join(BACKENDS)}")
        if self.backend != "http" and not self.model:
            raise ConfigError(f"the {self.backend} backend needs --model (a model folder, a .gguf file or "
                              f"an alias such as smollm2-135m)")
        if self.model is not None and not self.model.strip():
            raise ConfigError("--model is empty; name a model, or leave it out to take the server's first")
        check_int("batch_size", self.batch_size, 1, MAX_LLM_BATCH)
        if self.backend == "http":
            check_connection(self.base_url, self.timeout, self.retries, self.concurrency)
        if self.backend == "hf":
            resolve_device(self.device)


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
    """What an evaluation produced: per-question rows, the per-cell table, the per-formulation and overall
    scores (lm-eval's groups) and the run's metadata."""

    per_question: pd.DataFrame
    results: pd.DataFrame
    groups: pd.DataFrame
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
        claim(out, LLM_EVAL)  # refused when another kind of command wrote `out`
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
    meta = {"model": backend.model_id, "backend": settings.backend, "scoring": modes, **_spec_meta(spec),
            "max_tokens": max_tokens, "questions": len(questions), "cache_hits": cached.hits,
            "cache_misses": cached.misses, "seconds": round(time.perf_counter() - started, 1)}
    checked = layout.write_text(out / PREDICTIONS, per_question.to_csv(index=False))
    return _write_outputs(out, per_question, questions, meta, checked)


def rewrite_outputs(out: str | Path, adopt_unchecked: bool = False) -> EvalResult:
    """Rewrite an llm-eval folder's results.csv, summary.json and report.html from its predictions.csv, asking no
    model; the questions are redrawn from its summary.json, and predictions that are not theirs are refused.
    predictions.csv must match the checksum summary.json holds for it; `adopt_unchecked` instead takes a folder
    written before those checksums as it is (the migration docs/llm-eval.md describes) and checksums it."""
    out = Path(out)
    lacking = [name for name in (PREDICTIONS, SUMMARY) if not (out / name).is_file()]
    if lacking:
        raise ConfigError(f"{out} holds no llm-eval output to rewrite: {' and '.join(lacking)} missing")
    summary, predictions = out / SUMMARY, out / PREDICTIONS
    if adopt_unchecked:
        meta = _unchecked_meta(summary)
        try:
            text = predictions.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise _unreadable(predictions, err) from None
    else:
        data = _checked_summary(summary, out)
        meta, expected = data.get("meta"), data.get("checksums", {})
        if not isinstance(meta, dict) or not isinstance(expected, dict) or PREDICTIONS not in expected:
            raise layout.damaged(summary, f"no meta or no checksum of {PREDICTIONS} in it")
        text = layout.read_text(predictions, expected[PREDICTIONS])
    try:  # as written: answers and replies stay text ("7", "", "None")
        per_question = pd.read_csv(io.StringIO(text), keep_default_na=False,
                                   dtype={"id": str, "formulation": str, "answer": str, "reply": str})
    except ValueError as err:  # empty, ragged or not text
        raise _unreadable(predictions, err) from None
    questions = make_questions(_spec_of(meta, summary))
    _check_predictions(per_question, questions, meta, predictions)
    return _write_outputs(out, per_question, questions, meta, layout.digest(text.encode("utf-8")))


def _checked_summary(summary: Path, out: Path) -> dict[str, Any]:
    """summary.json read through its checksum; one written before llm-eval checksummed its outputs is refused
    with the command that adopts it."""
    try:
        return layout.read_json(summary)
    except ConfigError:
        try:
            data = _plain_json(summary)
        except (ValueError, RecursionError):  # not JSON, or beyond what headway writes: damaged, as read_json says
            data = None
        unchecked = isinstance(data, dict) and layout.DIGEST_KEY not in data
        if unchecked:
            raise ConfigError(f"{summary} has no checksum: written by a headway from before llm-eval checksummed "
                              "its outputs, or altered; if its predictions.csv is as that run wrote it, adopt the "
                              f"folder with: headway llm-eval --rewrite-report --adopt-unchecked --out {out}") from None
        raise


def _unchecked_meta(summary: Path) -> dict[str, Any]:
    """The meta of a summary.json written before checksums (plain JSON, no checksum): what adopting reads."""
    try:
        data = _plain_json(summary)
        meta = data["meta"]
    except (ValueError, RecursionError, KeyError, TypeError) as err:  # not JSON, or no "meta" in it
        raise _unreadable(summary, err) from None
    if layout.DIGEST_KEY in data or not isinstance(meta, dict):
        raise ConfigError(f"{summary} is not an unchecked summary to adopt; drop --adopt-unchecked")
    return meta


def _plain_json(path: Path) -> Any:
    """The JSON value of a summary.json written without a checksum. A file larger than headway writes raises a
    ValueError before it is read, one nested too deep a RecursionError (Python's parser stops at its limit), text
    that is not JSON or holds an integer of more than 4300 digits a ValueError."""
    size = path.stat().st_size
    if size > MAX_JSON_BYTES:
        raise ValueError(f"{size} bytes, more than the {MAX_JSON_BYTES} headway writes")
    return json.loads(path.read_text(encoding="utf-8"))


def _unreadable(path: Path, err: Exception) -> ConfigError:
    """The one-line refusal of an output file that cannot be read."""
    detail = (str(err).strip().splitlines() or [""])[0]
    return ConfigError(f"{path} cannot be read as llm-eval output ({type(err).__name__}: {detail})")


def _write_outputs(out: Path, per_question: pd.DataFrame, questions: list[Question],
                   meta: dict[str, Any], predictions: str) -> EvalResult:
    """results.csv (one row per cell and metric), groups.csv (per formulation and overall), summary.json and
    report.html from the per-question rows, each written atomically; summary.json (checked) holds the checksums
    of the CSV files (`predictions`: that of predictions.csv), which are how `rewrite_outputs` knows them intact,
    and every cell's test against chance (Holm over the run's cells)."""
    from headway.llm.report import chance_tests, write_report

    results, groups = summarise(per_question), group_scores(per_question)
    checksums = {PREDICTIONS: predictions, RESULTS: layout.write_text(out / RESULTS, results.to_csv(index=False)),
                 GROUPS: layout.write_text(out / GROUPS, groups.to_csv(index=False))}
    tests = chance_tests(results)[["formulation", "hops", "metric", "p_chance", "above", "detectable"]]
    layout.write_json(out / SUMMARY, {"meta": meta, "results": results.to_dict(orient="records"),
                                      "groups": groups.to_dict(orient="records"),
                                      "chance_tests": tests.to_dict(orient="records"), "checksums": checksums})

    write_report(out, results, groups, per_question, questions, meta)
    return EvalResult(per_question, results, groups, meta, out)


# The meta key of each QuestionSet field whose key differs from the field's name.
META_KEYS = {"questions": "questions_per_cell"}


def _spec_meta(spec: QuestionSet) -> dict[str, Any]:
    """The question settings as report metadata."""
    meta = asdict(spec)
    meta["formulations"] = list(spec.formulations)
    for name, key in META_KEYS.items():
        meta[key] = meta.pop(name)
    return meta


def _spec_of(meta: dict[str, Any], source: Path) -> QuestionSet:
    """The question settings `_spec_meta` stored in `meta` (read from `source`), as a QuestionSet again."""
    names = [field.name for field in fields(QuestionSet)]
    lacking = [META_KEYS.get(name, name) for name in names if META_KEYS.get(name, name) not in meta]
    if lacking:
        raise ConfigError(f"{source} does not say which questions were asked: no {', '.join(lacking)} in its meta")
    values = {name: meta[META_KEYS.get(name, name)] for name in names}
    return QuestionSet(**{**values, "formulations": tuple(values["formulations"])})


def _check_predictions(per_question: pd.DataFrame, questions: list[Question], meta: dict[str, Any],
                       source: Path) -> None:
    """Refuse predictions that lack a column the run's scoring modes write, hold a value of the wrong kind, or
    are not one row per redrawn question (the same ids and answers, in order)."""
    scored = [metric for mode in meta.get("scoring", ()) for metric in METRICS.get(mode, ())]
    flags = [*scored, *(["unparseable"] if "exact_match" in scored else [])]
    kinds = {"id": None, "formulation": None, "answer": None, "hops": "i", "answer_index": "i", "chance": "f",
             **dict.fromkeys(flags, "b")}
    lacking = [column for column in kinds if column not in per_question]
    if lacking:
        raise ConfigError(f"{source} lacks the column(s) {', '.join(lacking)}; it is not this run's predictions")
    wrong = [column for column, kind in kinds.items()
             if kind is not None and per_question[column].dtype.kind != kind]
    if wrong:
        raise ConfigError(f"{source} is damaged: column(s) {', '.join(wrong)} hold values of the wrong kind")
    drawn = [(q.id, q.answer_index, q.answer) for q in questions]
    read = list(zip(*(per_question[column].tolist() for column in ("id", "answer_index", "answer"))))
    if read != drawn:
        common = min(len(read), len(drawn))
        at = next((i for i, pair in enumerate(zip(read, drawn)) if pair[0] != pair[1]), common)
        where = (f"line {at + 2} holds {read[at]} where the questions give {drawn[at]}" if at < common
                 else f"{len(read)} rows for {len(drawn)} questions")
        raise ConfigError(f"{source} does not match the questions its summary.json describes ({where}); "
                          f"only that run's predictions can be rewritten")
