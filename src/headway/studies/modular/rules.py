"""Every threshold, level and stated effect the modular-addition study judges by (docs/study-modular.md,
"Verdicts"), in one frozen object set before the tables are judged."""

from __future__ import annotations

from dataclasses import dataclass

from headway.settings import check_choice
from headway.studies.llc_rules import LLCRules
from headway.studies.rules import rule

FALL_READINGS = ("last", "settled")  # where the LLC claim reads a run's fall (rule llc_fall_at)


@dataclass(frozen=True)
class ModularRules(LLCRules):
    """The modular study's rules: what counts as memorised, generalised and grokked, the per-run properties
    of a grokked model, and each claim's null and stated effect (the effect its test must detect); the LLC
    validity limits are `LLCRules`'."""

    coverage: float = rule(0.8, "key frequencies: the fewest holding this share of the embedding's norm "
                                "(grokked CPU models hold ~93% on 3, untrained ones need 23 of 29)",
                           stage="analysis", low=0.0, high=1.0)
    memorised: float = rule(0.99, "training-set accuracy a run first reaches at its memorisation step",
                            low=0.0, high=1.0)
    generalised: float = rule(0.95, "test accuracy a run keeps from its generalisation step to the end",
                              sweep=(0.9, 0.95, 0.99), low=0.0, high=1.0)
    delay: float = rule(2.0, "grokking, not plain learning: the generalisation step is at least this multiple of "
                             "the memorisation step", sweep=(1.5, 2.0, 4.0), low=1.0)
    sparser: float = rule(2.0, "a grokked embedding is spread over at most 1/this of the effective frequencies of "
                               "the same model at initialisation (the control)", sweep=(1.5, 2.0, 4.0), low=1.0)
    logits_explained: float = rule(0.5, "a grokked model's key frequencies carry at least this share of the logits' "
                                        "variance more than as many random frequencies do (the control)",
                                   sweep=(0.3, 0.5, 0.7), low=0.0, high=1.0)
    null_share: float = rule(0.5, "null of the claims about runs (grokking, sparsity, logits): at most this share "
                                  "of the runs concerned shows the property (0.5: a sign test)",
                             sweep=(0.2, 0.5), low=0.0, high=1.0)
    effect_share: float = rule(0.95, "stated effect of those claims and of weight decay's: this share of the runs "
                                     "concerned shows the property", sweep=(0.9, 0.95), low=0.0, high=1.0)
    control_share: float = rule(0.05, "stated effect of 'weight decay is needed': runs without it generalise this "
                                      "often (those with it: effect_share)", sweep=(0.05, 0.2), low=0.0, high=1.0)
    llc_fall: float = rule(0.1, "stated effect of the LLC claim: a grokked run's LLC rises this share of its peak, "
                                "and ends this share of its peak further below it than its control's; also the "
                                "rise and fall of each run's descriptive rises-then-falls flag",
                           sweep=(0.05, 0.1, 0.2), low=0.0, high=1.0)
    llc_significant: float = rule(2.0, "each run's descriptive rises-then-falls flag: both changes beyond this many "
                                       "standard errors (the verdict weighs p-values at α instead)", low=0.0)
    llc_fall_at: str = rule("last", "where the LLC claim reads each run's fall, and measures its stability: 'last', "
                                    "the last valid traced checkpoint, or 'settled', the last valid one after the "
                                    "peak whose training loss at w* is no higher than at the checkpoint before it "
                                    "(not mid-spike; docs/study-modular.md)", stage="analysis", was="last")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_choice("rule llc_fall_at", self.llc_fall_at, FALL_READINGS)
