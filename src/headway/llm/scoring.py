"""Scoring rules: options by log-likelihood (acc, acc_norm) and replies by parsing."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from numbers import Real

from headway.errors import ConfigError

SCORINGS = ("loglik", "generate", "both")  # --scoring: options by log-likelihood, a parsed reply, or both


def pick_option(logliks: Sequence[float], choices: Sequence[str], normalise: bool) -> int:
    """Index of the best option: the highest log-likelihood (`acc`), or the highest per character of
    the option text (`acc_norm`, lm-eval's length normalisation). Ties go to the first option. A log-likelihood
    that is not a finite number <= 0 (whatever backend or cache gave it) is refused: it would pick an option."""
    for value, choice in zip(logliks, choices, strict=True):
        if isinstance(value, bool) or not isinstance(value, Real) or not (math.isfinite(value) and value <= 0):
            raise ConfigError(f"the log-likelihood of option {choice!r} is {value!r}, not a finite number <= 0; "
                              "the backend's answer is unusable")
    scores = [ll / len(c) if normalise else ll for ll, c in zip(logliks, choices, strict=True)]
    return max(range(len(scores)), key=scores.__getitem__)


def _utf8(text: str) -> bool:
    """Whether `text` encodes as UTF-8 (it holds no lone surrogate)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


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
    ("red box" over "box"). Exactly one left: that option; else the reply is unparseable. A reply that is not
    UTF-8 text (a number, or a lone surrogate such as JSON's "\\ud800", whatever backend or cache gave it) is
    refused: it cannot be written to the predictions table.
    """
    if not isinstance(reply, str) or not _utf8(reply):
        raise ConfigError(f"the reply {reply!r:.60} is not UTF-8 text; the backend's answer is unusable")
    text = _normal(reply)
    options = [_normal(c) for c in choices]
    if text in options:
        return options.index(text)
    found = [i for i, o in enumerate(options) if _has_words(text, o)]
    found = [i for i in found if not any(j != i and _has_words(options[j], options[i]) for j in found)]
    return found[0] if len(found) == 1 else None
