"""Scoring rules: options by log-likelihood (acc, acc_norm) and replies by parsing."""

from __future__ import annotations

import re
from collections.abc import Sequence

SCORINGS = ("loglik", "generate", "both")  # --scoring: options by log-likelihood, a parsed reply, or both


def pick_option(logliks: Sequence[float], choices: Sequence[str], normalise: bool) -> int:
    """Index of the best option: the highest log-likelihood (`acc`), or the highest per character of
    the option text (`acc_norm`, lm-eval's length normalisation). Ties go to the first option."""
    scores = [ll / len(c) if normalise else ll for ll, c in zip(logliks, choices, strict=True)]
    return max(range(len(scores)), key=scores.__getitem__)


def _normal(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: how replies and options are compared."""
    return " ".join(re.sub(r"[^\w\s-]", " ", text.lower()).split())


def _has_words(text: str, words: str) -> bool:
    """Whether `words` occurs in `text` as whole words ("7" is not in "17")."""
    return re.search(rf"(?<![\w-]){re.escape(words)}(?![\w-])", text) is not None


def parse_reply(reply: str, choices: Sequence[str]) -> int | None:
    """The option a free-text reply names, or None when it names none or several.

    The reply is normalised (case, punctuation); an exact match wins, otherwise the options that
    occur as whole words are collected, keeping only the longest when one contains another
    ("red box" over "box"). Exactly one left: that option; else the reply is unparseable.
    """
    text = _normal(reply)
    options = [_normal(c) for c in choices]
    if text in options:
        return options.index(text)
    found = [i for i, o in enumerate(options) if _has_words(text, o)]
    found = [i for i in found if not any(j != i and _has_words(options[j], options[i]) for j in found)]
    return found[0] if len(found) == 1 else None
