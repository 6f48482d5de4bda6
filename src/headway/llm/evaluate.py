"""Ask a backend every question and score the answers: one row per question, then one per cell.

Log-likelihood mode scores every option as a continuation of the prompt (after a space) and keeps
both lm-eval metrics: `acc` (highest total log-probability) and `acc_norm` (highest per character).
Generate mode sends the chat prompt, parses the reply against the options, and counts an
unparseable reply as wrong (it is reported, never dropped).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from headway.analysis.statistics import wilson_interval
from headway.errors import ConfigError
from headway.llm.backend import Backend, LoglikRequest
from headway.llm.scoring import SCORINGS, parse_reply, pick_option
from headway.progress import progress
from headway.tasks.retrieval.prompts.questions import Question

# Metric name of each scoring rule in the results table.
METRICS = {"loglik": ("acc", "acc_norm"), "generate": ("exact_match",)}


def scoring_modes(scoring: str, backend: Backend) -> list[str]:
    """The modes to run ('loglik', 'generate'), refusing one the backend cannot do."""
    if scoring not in SCORINGS:
        raise ConfigError(f"scoring = {scoring!r} is unknown; choose one of {', '.join(SCORINGS)}")
    modes = ["loglik", "generate"] if scoring == "both" else [scoring]
    for mode, able in (("loglik", backend.supports_loglik), ("generate", backend.supports_generate)):
        if mode in modes and not able:
            raise ConfigError(f"the {backend.kind} backend cannot do {mode} scoring; use --scoring "
                              f"{'generate' if mode == 'loglik' else 'loglik'}")
    return modes


def evaluate(questions: Sequence[Question], backend: Backend, scoring: str = "loglik", *, max_tokens: int = 24,
             show_progress: bool = True) -> pd.DataFrame:
    """One row per question: what was predicted under each scoring mode and whether it is right."""
    modes = scoring_modes(scoring, backend)
    requests = [LoglikRequest(q.prompt, " " + c) for q in questions for c in q.choices] if "loglik" in modes else []
    total = len(requests) + (len(questions) if "generate" in modes else 0)
    rows = [
        {"id": q.id, "formulation": q.formulation, "hops": q.hops, "choices": len(q.choices), "chance": q.chance,
         "answer_index": q.answer_index, "answer": q.answer}
        for q in questions
    ]
    with progress(total, f"{backend.kind} {backend.model_id[-40:]}", "request", enabled=show_progress) as bar:
        if requests:
            logliks = backend.loglikelihood(requests, progress=bar.update)
            _add_loglik(rows, questions, logliks)
        if "generate" in modes:
            replies = backend.generate([q.chat_prompt for q in questions], max_tokens, progress=bar.update)
            _add_generate(rows, questions, replies)
    return pd.DataFrame(rows)


def _add_loglik(rows: list[dict], questions: Sequence[Question], logliks: Sequence[float]) -> None:
    """Fill acc / acc_norm predictions from each question's slice of option log-likelihoods."""
    start = 0
    for row, q in zip(rows, questions, strict=True):
        scores = list(logliks[start : start + len(q.choices)])
        start += len(q.choices)
        pred, pred_norm = pick_option(scores, q.choices, False), pick_option(scores, q.choices, True)
        row.update(pred_acc=pred, acc=pred == q.answer_index, pred_acc_norm=pred_norm,
                   acc_norm=pred_norm == q.answer_index, loglik_answer=scores[q.answer_index],
                   loglik_best_wrong=max(s for i, s in enumerate(scores) if i != q.answer_index))


def _add_generate(rows: list[dict], questions: Sequence[Question], replies: Sequence[str]) -> None:
    """Fill the parsed option of each reply; unparseable replies count as wrong."""
    for row, q, reply in zip(rows, questions, replies, strict=True):
        parsed = parse_reply(reply, q.choices)
        row.update(reply=reply, pred_exact_match=-1 if parsed is None else parsed, unparseable=parsed is None,
                   exact_match=parsed == q.answer_index)


def summarise(per_question: pd.DataFrame) -> pd.DataFrame:
    """Per formulation × hops × metric: n, correct, accuracy, Wilson 95% interval, chance, unparseable."""
    out = []
    for (formulation, hops), cell in per_question.groupby(["formulation", "hops"], sort=True):
        out += [{"formulation": formulation, "hops": int(hops), **row} for row in _scores(cell)]
    return pd.DataFrame(out)


def group_scores(per_question: pd.DataFrame) -> pd.DataFrame:
    """lm-evaluation-harness' group scores: per formulation over all its hop counts, and over every question
    ("all"), each question counted once (the exported groups' `weight_by_size`; equal cells make it the mean of
    the cells). Columns: group (the lm-eval group's name), formulation, then `summarise`'s per metric."""
    from headway.tasks.retrieval.prompts.harness import GROUP, task_name

    out = [{"group": task_name(formulation), "formulation": formulation, **row}
           for formulation, questions in per_question.groupby("formulation", sort=True)
           for row in _scores(questions)]
    out += [{"group": GROUP, "formulation": "all", **row} for row in _scores(per_question)]
    return pd.DataFrame(out)


def _scores(questions: pd.DataFrame) -> list[dict]:
    """One row per metric scored in `questions`: n, correct, accuracy, Wilson 95% interval, mean chance and
    unparseable replies (exact_match only)."""
    rows = []
    for metric in (m for ms in METRICS.values() for m in ms if m in questions):
        n, correct = len(questions), int(questions[metric].sum())
        low, high = wilson_interval(correct, n)
        rows.append({"metric": metric, "n": n, "correct": correct, "accuracy": correct / n, "ci_low": low,
                     "ci_high": high, "chance": float(questions["chance"].mean()),
                     "unparseable": int(questions["unparseable"].sum()) if metric == "exact_match" else 0})
    return rows
