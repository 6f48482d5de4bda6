"""The verdict on each claim about grokking modular addition, computed from the study's tables alone.

Each claim says in advance what would refute it (docs/study-modular.md):
- grokking: a run with weight decay that never keeps ≥ 95% test accuracy, or reaches it less than
  DELAY times later than it memorised its training set (plain learning, not grokking);
- weight decay is needed: a run without weight decay that reaches 95% test accuracy in the budget;
- Fourier sparsity: a grokked run whose embedding is spread over more than half as many
  frequencies as the same model at initialisation (the null: a random embedding);
- Fourier logits: a grokked run whose key frequencies explain less than half the logits' variance;
- LLC: a traced grokked run whose LLC does not fall by LLC_FALL from a peak reached by its grokking step.
"""

from __future__ import annotations

import pandas as pd

from headway.studies.modular.tables import DELAY, GENERALISED, LLC_FALL, MEMORISED, ModularTables, run_title
from headway.studies.verdict import Verdict, share_status

SPARSER = 2.0  # a grokked embedding is spread over at most 1/SPARSER of the frequencies it had at step 0
LOGITS_EXPLAINED = 0.5  # the key frequencies carry at least this share of the logits' variance


def verdicts(tables: ModularTables) -> list[Verdict]:
    """Every claim the tables can speak to, in report order."""
    runs = tables.runs
    checks = (groks_with_decay(runs), decay_is_needed(runs), fourier_sparsity(runs), logits_from_keys(runs),
              llc_falls_at_grokking(tables))
    return [verdict for verdict in checks if verdict is not None]


def _steps(row) -> str:
    memo = "never" if pd.isna(row.memorised_step) else f"{row.memorised_step:.0f}"
    general = "never" if pd.isna(row.generalised_step) else f"{row.generalised_step:.0f}"
    return f"seed {int(row.seed)} (fraction {row.train_fraction:g}): memorised {memo}, test ≥ {GENERALISED:.0%} {general}"


def groks_with_decay(runs: pd.DataFrame) -> Verdict | None:
    decayed = runs[runs.weight_decay > 0]
    if decayed.empty:
        return None
    grokked = int(decayed.grokked.sum())
    status = share_status(decayed.grokked)
    return Verdict(f"With weight decay the model groks: train accuracy reaches {MEMORISED:.0%} first, test accuracy "
                   f"reaches {GENERALISED:.0%} at least {DELAY:g}× later",
                   status, f"{grokked} of {len(decayed)} runs; " + "; ".join(_steps(r) for r in decayed.itertuples())
                   + f"; final test accuracy {decayed.val_accuracy.min():.3f}–{decayed.val_accuracy.max():.3f}.")


def decay_is_needed(runs: pd.DataFrame) -> Verdict | None:
    plain = runs[runs.weight_decay == 0]
    if plain.empty:
        return None
    general = int(plain.generalised_step.notna().sum())
    return Verdict(f"Without weight decay the model does not generalise (test accuracy ≥ {GENERALISED:.0%}) "
                   "within the same steps", "reproduced" if general == 0 else "not reproduced",
                   f"{general} of {len(plain)} runs without weight decay generalise; final test accuracy "
                   f"{plain.val_accuracy.min():.3f}–{plain.val_accuracy.max():.3f}, training-set accuracy "
                   f"{plain.train_accuracy.min():.3f}–{plain.train_accuracy.max():.3f}.")


def fourier_sparsity(runs: pd.DataFrame) -> Verdict:
    claim = (f"A grokked model's embedding uses a handful of key frequencies: it is spread over at most 1/{SPARSER:g} "
             "of the frequencies it was spread over at initialisation")
    grokked = runs[runs.grokked]
    if grokked.empty:
        return Verdict(claim, "not testable", "no run grokked.")
    sparse = grokked.effective_frequencies * SPARSER <= grokked.initial_effective_frequencies
    parts = [f"seed {int(r.seed)} wd {r.weight_decay:g}: {r.effective_frequencies:.1f} effective frequencies "
             f"(initialisation {r.initial_effective_frequencies:.1f}), key frequencies {r.key_frequencies}"
             for r in grokked.itertuples()]
    return Verdict(claim, share_status(sparse),
                   f"{int(sparse.sum())} of {len(grokked)} grokked runs; " + "; ".join(parts) + ".")


def logits_from_keys(runs: pd.DataFrame) -> Verdict:
    claim = (f"A grokked model builds its logits from its key frequencies: cos/sin(2πk(a+b−c)/p) at those k carry "
             f"≥ {LOGITS_EXPLAINED:.0%} of the logits' variance")
    grokked = runs[runs.grokked]
    if grokked.empty:
        return Verdict(claim, "not testable", "no run grokked.")
    explained = grokked.key_logit_share >= LOGITS_EXPLAINED
    return Verdict(claim, share_status(explained),
                   f"{int(explained.sum())} of {len(grokked)} grokked runs; share on the key frequencies "
                   f"{grokked.key_logit_share.min():.2f}–{grokked.key_logit_share.max():.2f} (all frequencies "
                   f"{grokked.logit_share_all.min():.2f}–{grokked.logit_share_all.max():.2f}).")


def llc_falls_at_grokking(tables: ModularTables) -> Verdict | None:
    if not tables.development:
        return None
    claim = ("The LLC rises while the model memorises and falls as it groks (peak by the grokking step, final "
             f"≥ {LLC_FALL:.0%} below it)")
    runs = tables.runs.set_index("run_id")

    def describe(t) -> str:
        grokked = f"grokked at {runs.loc[t.run_id].generalised_step:.0f}" if runs.loc[t.run_id].grokked else "not grokked"
        return (f"{run_title(tables.runs, t.run_id)} ({grokked}): peak {t.peak:.1f} at step {t.peak_step}, final "
                f"{t.final:.1f} ({t.final / t.peak - 1:+.0%})")

    grokked = [t for t in tables.development if runs.loc[t.run_id].grokked]
    evidence = "; ".join(describe(t) for t in tables.development) + "."
    if not grokked:
        return Verdict(claim, "not testable", "no traced run grokked; " + evidence)
    holds = [t.rises_then_falls and t.peak_step <= runs.loc[t.run_id].generalised_step for t in grokked]
    return Verdict(claim, share_status(holds),
                   f"{sum(holds)} of {len(grokked)} traced grokked runs; " + evidence)
