"""The sorting study's rules (`SortingRules`): every threshold, level, null rate and stated effect its
analysis and verdicts use, each with its reason and sweep (docs/study-sorting.md, "Claims and verdicts").

The mode rule's thresholds are read while analysing each model (stage "analysis", part of the cache
stamp); they are defined here only, and `SortingRules.mode_thresholds()` hands them to the classifier
(`headway.analysis.sorting.modes.ModeThresholds`, which has no defaults). Why each is what it is:

- ``copy = 3.5``: fixed by noise alone, not tuned on trained models. In randomly initialised models
  of the study's shape (2 heads, 51 numbers; ``headway.studies.sorting.analyse.untrained_scores``,
  2000 seeds) the diagonal scores are close to standard normal (sd 1.00), and 3.5 is the smallest
  half-integer beyond which (±) a model's 2 × 51 scores expect fewer than ``copy_noise`` = 0.05 spurious
  copied or suppressed numbers (`noise_threshold`): 0.02 per model at 3.5, against 0.18 at 3.0 and 4.5 at
  2.0 (a standard normal gives 0.05 at 3.5). It is also half the score of a perfect copier (a one-hot row
  scores sqrt(V - 1), 7.1 for 51 numbers; lower the threshold for much smaller ranges). The value was
  first picked by looking at trained study models (owned numbers score 4.5–6, the flanks of the other
  head's blocks 2–4, and 2 called two of four interleaved-block models overlapping); the noise rule,
  which does not look at them, gives the same value, and the study reports every mode and verdict
  over a sweep of this threshold (`threshold_sweep`) so that what rests on it is visible.
- ``min_fraction = 0.2``: two heads that split the range copy about half of it each; a fifth is far
  above the noise rate yet low enough to count a head that owns only one block of numbers.
- ``qk_similar = 0.5``: a correlation of 0.5 between row-centred QK circuits means the two heads
  mostly prefer the same keys; copy suppression needs both heads to look at the same numbers.
- ``suppress_z = 2.0``: a suppressed number's own score must be below noise, but not below −copy: a
  suppressor that also pushes down the attended number's neighbours (a Gaussian dip of width σ) scores
  only about −sqrt(V / (σ·sqrt(π))) (−4.4 at σ = 1.5, −3.1 at σ = 3 for 51 numbers) before noise, so −3.5
  misses broad suppressors. At −2 a head that does not suppress passes on 2.3% of numbers (standard
  normal scores, as in untrained heads), so the pair's `min_suppressed` share (5 of the 51 numbers,
  all also passing `suppress_share` and copied by the copier) is out of noise's reach.
- ``suppress_share = 0.2``: a suppressor must remove at least a fifth of its copier's lift (in logits)
  of a number: a suppressor at 1% of the copier's strength, or splitting heads that push the other's
  range down by a tenth of their own copying, are no copy/suppress pair; one at −0.3 … −0.5 of its
  copier's OV is.
- ``min_suppressed = 0.1``: the suppressor must act on a tenth of the numbers (5 of 51), like
  `min_fraction` a share of the range: a pair that acts on 5 numbers is part of how the model sorts;
  fewer could be chance under `suppress_z`. First written as a share of the *copier's* numbers, which
  for four-head splitters (copiers of about 15 numbers) let 2–3 numbers at a block border make a pair:
  the second search's screen met exactly that (docs/study-sorting.md), and the rule was brought in
  line with its reason before the confirmation trained.
- ``max_overlap = 0.3``: heads that split the range share at most the numbers at block borders;
  a Jaccard index above 0.3 means a large part of the range is copied twice.
- ``min_coverage = 0.8``: splitting heads should together copy nearly every number; a few numbers
  (typically the ends of the range, which are easy to place) may be left to the direct path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from headway.studies.llc_rules import LLCRules
from headway.studies.rules import rule
from headway.analysis.sorting.modes import ModeThresholds


@dataclass(frozen=True)
class SortingRules(LLCRules):
    """The rules of `headway study sorting`, set before the tables are judged (the LLC validity limits: `LLCRules`)."""

    # --- the mode rule (headway.analysis.sorting.modes), applied to each model's final circuits
    copy: float = rule(3.5, "diagonal score above which a head copies a number (below its negative: suppresses it); "
                            "set by the noise of untrained heads", sweep=(2.0, 2.5, 3.0, 3.5, 4.0, 4.5),
                       stage="analysis", low=0.0)
    min_fraction: float = rule(0.2, "share of the numbers a head must copy (suppress) to be a copier (suppressor)",
                               stage="analysis", low=0.0, high=1.0)
    qk_similar: float = rule(0.5, "correlation of row-centred QK circuits above which a suppressor and a copier "
                                  "attend alike (copy-suppression)", stage="analysis", low=-1.0, high=1.0)
    suppress_z: float = rule(2.0, "diagonal score at or below whose negative a head pushes a number below noise (a "
                                  "suppressed number also needs suppress_share)", sweep=(1.5, 2.0, 2.5, 3.0),
                             stage="analysis", low=0.0)
    suppress_share: float = rule(0.2, "share of a copier's lift of a number (logits) another head must remove to "
                                      "suppress it against that copier", sweep=(0.15, 0.2, 0.25), stage="analysis",
                                 low=0.0)
    min_suppressed: float = rule(0.1, "share of the numbers a head must suppress against a copier to be its "
                                      "suppressor (copy-suppression, with qk_similar)", sweep=(0.05, 0.1, 0.15),
                                 stage="analysis", low=0.0, high=1.0)
    max_overlap: float = rule(0.3, "largest Jaccard overlap of two copiers' sets that still counts as splitting",
                              sweep=(0.2, 0.3, 0.4, 0.5), stage="analysis", low=0.0, high=1.0)
    min_coverage: float = rule(0.8, "share of the numbers splitting copiers must cover together",
                               stage="analysis", low=0.0, high=1.0)
    copy_noise: float = rule(0.05, "spurious copied or suppressed numbers an untrained model of the study's shape may "
                                   "expect beyond the copy threshold (`noise_threshold`): the budget that set copy's "
                                   "default before any trained model was seen; the analysis reads copy itself",
                             low=0.0)

    # --- which runs count
    learned: float = rule(0.95, "per-token validation accuracy a run needs to count as having learned to sort; only "
                          "learned runs have a mode that counts", sweep=(0.9, 0.95, 0.99), low=0.0, high=1.0)

    # --- 'learns to sort'
    learning_null: float = rule(0.5, "share of runs that learn under the null of 'learns to sort': at most half",
                                low=0.0, high=1.0)
    learning_effect: float = rule(0.9, "stated effect of 'learns to sort': nine runs in ten learn", low=0.0, high=1.0)

    # --- 'vocabulary-splitting appears with and without weight decay'
    splitting_noise_rate: float = rule(0.05, "null rate of splitting models at each weight decay: a stated upper "
                                       "bound on how often the mode rule calls a model splitting by noise (0 of 300 "
                                       "untrained models at every swept copy threshold)", low=0.0, high=1.0)
    splitting_effect: float = rule(0.5, "stated effect of the splitting claim: half the learned runs split at every "
                                   "weight decay", low=0.0, high=1.0)

    # --- 'heads settle into splitting or copy-suppression rather than overlapping ranges'
    simple_null: float = rule(0.5, "null share of learned runs in a simple mode (splitting or copy-suppression): "
                              "at most half", low=0.0, high=1.0)
    simple_effect: float = rule(0.8, "stated effect of the simple-modes claim: four learned runs in five settle into "
                                "a simple mode", low=0.0, high=1.0)

    # --- 'the simple modes are simpler (a lower final LLC) than overlapping ranges'
    simpler_effect: float = rule(0.2, "stated effect of the simpler-modes claim: the simple modes' mean final λ̂ "
                                 "this share of the overlapping runs' mean below it", low=0.0, high=1.0)
    simpler_min_runs: int = rule(5, "valid, resolved final λ̂ each group (simple modes, overlapping) needs before "
                                 "their means are compared: 4 and 4 give a permutation p of at best 1/70 = 0.014, "
                                 "above α / 7 for the study's seven claims; 5 and 5 reach 1/252", low=2)
    simpler_permutations: int = rule(9999, "permutations of the mode labels among the usable runs in the simpler-"
                                     "modes test", low=1)
    simpler_within_data: bool = rule(True, "whether the simpler-modes test compares runs within their own data "
                                     "as well as their own weight decay: without decay the default lists' λ̂ is "
                                     "about twice δ̄ = 1.5's and more of their runs overlap, so across data the "
                                     "data's λ̂ reads as the mode's (set after results/sorting-cpu showed it; "
                                     "False: within weight decay only, the test before, which the sensitivity "
                                     "sweep reports beside it; docs/study-sorting.md)", sweep=(True, False))

    # --- 'copy-suppression is one of the two main modes'
    copy_suppression_null: float = rule(0.1, "null share of learned runs in copy-suppression: a minor mode, one model "
                                        "in ten at most", low=0.0, high=1.0)
    copy_suppression_effect: float = rule(0.4, "stated effect of the copy-suppression claim: a main mode, four "
                                          "learned runs in ten", low=0.0, high=1.0)

    # --- 'the gap distribution decides the mode' (the permutation test of mode x data, tables.gap_test)
    gap_permutations: int = rule(9999, "permutations of the data labels per weight decay in the gap test", low=1)
    gap_effect_low: float = rule(0.2, "stated effect of the gap claim: one mode's fraction at the smallest mean gap",
                                 low=0.0, high=1.0)
    gap_effect_high: float = rule(0.8, "... and at the largest, moving linearly in the mean gap between them",
                                  low=0.0, high=1.0)
    gap_power_studies: int = rule(400, "simulated studies behind the gap test's power (binomial s.e. <= 0.025)", low=1)
    gap_power_permutations: int = rule(999, "permutations per weight decay in each simulated study", low=1)

    # --- 'the LLC rises during initial learning and falls while the heads specialise'
    llc_change_z: float = rule(2.0, "z multiple of its uncertainty a traced run's rise to its LLC peak and its fall "
                               "from it must each exceed, after the peak's selection (one-sided level 0.023 per "
                               "run)", low=0.0)
    llc_fall: float = rule(0.1, "stated effect of the LLC claim: a rise to the peak and a fall from it, each this "
                           "fraction of the peak", low=0.0, high=1.0)
    llc_effect_share: float = rule(0.8, "stated effect of the LLC claim: the share of traced runs whose LLC rises "
                                   "and falls by llc_fall", low=0.0, high=1.0)
    def mode_thresholds(self) -> ModeThresholds:
        """The mode rule's thresholds as the classifier (`headway.analysis.sorting.modes`) takes them."""
        return ModeThresholds(**{f.name: getattr(self, f.name) for f in dataclasses.fields(ModeThresholds)})

    def mode_sweeps(self) -> dict[str, tuple]:
        """The swept rules the analysis reads (the mode thresholds) → their values: what `threshold_sweep`
        recomputes each model's mode at."""
        analysis = self.stamp("analysis")
        return {name: values for name, values in self.sweeps().items() if name in analysis}
