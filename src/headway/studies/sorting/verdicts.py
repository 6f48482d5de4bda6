"""The verdict on each claim of the list-sorting paper, computed from the study's tables alone."""

from __future__ import annotations

import pandas as pd

from headway.studies.sorting.tables import LEARNED, SortingTables, run_title
from headway.studies.verdict import Verdict, share_status
from headway.tasks.sorting.modes import MODES

SIGNIFICANT = 0.05  # Fisher's exact test level for "the data decide the mode"


def verdicts(tables: SortingTables) -> list[Verdict]:
    """Every claim the tables can speak to, in report order."""
    final = tables.final
    checks = (learns_to_sort(final), splitting_with_and_without_decay(final, tables.weight_decays),
              simple_modes(final), copy_suppression_found(final), gap_decides_mode(tables.gap_test),
              llc_rises_then_falls(tables))
    return [verdict for verdict in checks if verdict is not None]


def training_text(final: pd.DataFrame) -> str:
    """How many runs learned, with the accuracies behind it (the Training section says the same)."""
    learned = final[final.val_accuracy >= LEARNED]
    return (f"{len(learned)} of {len(final)} runs reach ≥ {LEARNED:.0%} per-token validation accuracy "
            f"(lowest {final.val_accuracy.min():.3f}; whole lists right: median {final.val_list_accuracy.median():.3f}; "
            f"greedy decoding: median per-token {final.ar_token_accuracy.median():.3f}).")


def learns_to_sort(final: pd.DataFrame) -> Verdict:
    learned = final[final.val_accuracy >= LEARNED]
    return Verdict("A one-layer attention-only transformer learns to sort",
                   "reproduced" if len(learned) == len(final) else "partly reproduced", training_text(final))


def splitting_with_and_without_decay(final: pd.DataFrame, weight_decays: tuple[float, ...]) -> Verdict:
    counts = {wd: final[(final.weight_decay == wd) & (final["mode"] == "splitting")].shape[0] for wd in weight_decays}
    both = all(counts.values()) and len(counts) > 1
    return Verdict("Vocabulary-splitting appears with and without weight decay",
                   "reproduced" if both else "not reproduced",
                   "; ".join(f"{'wd ' + format(wd, 'g') if wd else 'no wd'}: {n} splitting model(s)"
                             for wd, n in counts.items()))


def simple_modes(final: pd.DataFrame) -> Verdict:
    simple = final["mode"].isin(["splitting", "copy_suppression"]).mean()
    return Verdict("Heads settle into vocabulary-splitting or copy-suppression rather than overlapping ranges",
                   "reproduced" if simple > 0.5 else "not reproduced",
                   f"{simple:.0%} of models split or copy-suppress; "
                   + ", ".join(f"{m}: {(final['mode'] == m).sum()}" for m in MODES))


def copy_suppression_found(final: pd.DataFrame) -> Verdict:
    pairs = final[final["mode"] == "copy_suppression"]
    return Verdict("Copy-suppression (one head copies, another suppresses) is one of the two main modes",
                   "reproduced" if len(pairs) else "not reproduced",
                   f"{len(pairs)} of {len(final)} models; largest suppressed fraction of any head: "
                   f"{final.filter(like='suppress_fraction').max().max():.2f}")


def gap_decides_mode(test: dict | None) -> Verdict | None:
    if test is None:
        return None
    return Verdict("The gap distribution of the training data decides the final mode",
                   "reproduced" if test["p_value"] < SIGNIFICANT else "not reproduced",
                   f"largest change of a mode's fraction across δ̄: {test['change']:.2f} ({test['mode']}, "
                   f"{'wd ' + format(test['weight_decay'], 'g') if test['weight_decay'] else 'no wd'}: "
                   f"{test['low']} vs {test['high']}; Fisher's exact test p = {test['p_value']:.2f})")


def llc_rises_then_falls(tables: SortingTables) -> Verdict | None:
    if not tables.development:
        return None
    falls = [traced.rises_then_falls for traced in tables.development]
    return Verdict("The LLC rises during initial learning and falls while the heads specialise",
                   share_status(falls),
                   "; ".join(f"{run_title(t)}: peak {t.peak:.1f} at step {t.peak_step}, final {t.final:.1f}"
                             for t in tables.development))
