"""The verdict on each claim about grokking modular addition, computed from the study's tables and rules
alone. Each claim is a test set before the tables are judged (docs/study-modular.md, "Verdicts"):

- grokking: the exact one-sided binomial test of the grokked share of the runs with weight decay against
  `null_share`, stated effect `effect_share`;
- weight decay is needed: Fisher's exact one-sided test that runs with weight decay generalise more often
  than the control, the runs without it (stated effect `effect_share` against `control_share`);
- Fourier sparsity and logits: per grokked run a property against its control (the same model at
  initialisation; as many random frequencies), then the exact binomial (sign) test over grokked runs;
- the LLC: per traced grokked run, a z-test that its LLC falls further from its peak than its control's
  (the run of the same train fraction and seed without weight decay), beyond noise and the estimator's
  bias, and that it rose to that peak by its grokking step (development's z-test, Bonferroni-corrected
  over the checkpoints the peak was picked from); every such run must pass (intersection-union).

`judge` then corrects over the claims (Holm) and refutes only with power (headway.studies.verdict). Each
claim declares the columns it reads (`checked_claim`): a missing value in one of them makes it not testable,
except where it is data (a run that never memorised or generalised, a bias not measured). Each is registered
once, with its id, in `CLAIMS`; its statement is a template over the rules, so the id is what names it.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import pandas as pd

from headway.analysis.statistics import (
    binomial_power,
    binomial_tail,
    fisher_greater,
    fisher_power,
    normal_interval,
    normal_power,
    normal_tail,
    wilson_interval,
    z_score,
)
from headway.studies.llc_bias import weighed_bias_text
from headway.studies.modular.llc_fall import stability_points
from headway.studies.modular.rules import ModularRules
from headway.studies.modular.tables import ModularTables
from headway.studies.verdict import (Claim, Finding, StudyClaim, Verdict, checked_claim, intersection_union, judge,
                                     reads, registered_findings, registry)


def verdicts(tables: ModularTables, rules: ModularRules) -> list[Verdict]:
    """Every registered claim judged together, in report order (`CLAIMS`)."""
    return judge(registered_findings(CLAIMS, tables, rules), rules)


def share_finding(claim: Claim, holds: pd.Series, rules: ModularRules, evidence: str) -> Finding:
    """The exact one-sided binomial test that more than `null_share` of the runs in `holds` show a property,
    with its power at `effect_share`; the evidence opens with the count and its 95% Wilson interval."""
    k, n = int(holds.sum()), len(holds)
    low, high = wilson_interval(k, n)
    counted = f"{k} of {n} runs (95% interval {low:.2f}–{high:.2f}); {evidence}"
    return claim.finding(counted, binomial_tail(k, n, rules.null_share),
                         lambda level: binomial_power(n, rules.null_share, rules.effect_share, level))


# Missing values that are data in the runs table: the steps a run never reached.
NEVER = {"memorised_step": "the run never memorised", "generalised_step": "the run never generalised",
         "delay": "the run did not both memorise and generalise"}


def _share_test(what: str, rules: ModularRules) -> str:
    return (f"exact one-sided binomial test of the share of {what}, against the null that at most "
            f"{rules.null_share:.0%} do; stated effect: {rules.effect_share:.0%} do")


def _none_grokked(runs: pd.DataFrame) -> str:
    return f"0 of {len(runs)} runs grokked ({int(runs.generalised_step.notna().sum())} of them generalised)."


def _steps(row) -> str:
    memo = "never" if pd.isna(row.memorised_step) else f"{row.memorised_step:.0f}"
    general = "never" if pd.isna(row.generalised_step) else f"{row.generalised_step:.0f}"
    delay = "" if pd.isna(row.delay) else f" ({row.delay:.1f}×)"
    return f"seed {int(row.seed)} (fraction {row.train_fraction:g}): memorised {memo}, generalised {general}{delay}"


def _groks_claim(rules: ModularRules) -> str:
    return (f"With weight decay the model groks: training accuracy reaches {rules.memorised:.0%} first, test accuracy "
            f"reaches {rules.generalised:.0%} (and stays) at least {rules.delay:g}× later")


@checked_claim(_groks_claim, lambda rules: _share_test("the runs with weight decay that grok", rules),
               runs=reads("weight_decay", "grokked", "seed", "train_fraction", "val_accuracy", *NEVER, nullable=NEVER))
def groks_with_decay(runs: pd.DataFrame, rules: ModularRules, *, claim: Claim) -> Finding:
    """Grokked runs among the runs with weight decay, against `null_share`."""
    decayed = runs[runs.weight_decay > 0]
    if decayed.empty:
        return claim.not_testable("no run with weight decay was trained",
                                  f"{len(runs)} runs, all without weight decay.")
    return share_finding(claim, decayed.grokked, rules,
                         "; ".join(_steps(r) for r in decayed.itertuples()) + f"; final test accuracy "
                         f"{decayed.val_accuracy.min():.3f}–{decayed.val_accuracy.max():.3f}.")


def _decay_claim(rules: ModularRules) -> str:
    return (f"Without weight decay the model does not generalise (test accuracy ≥ {rules.generalised:.0%}) "
            "within the same steps")


def _decay_test(rules: ModularRules) -> str:
    return (f"Fisher's exact one-sided test that runs with weight decay generalise more often than the control, the "
            f"runs without it; stated effect: {rules.effect_share:.0%} against {rules.control_share:.0%}")


@checked_claim(_decay_claim, _decay_test,
               runs=reads("weight_decay", "generalised_step", "val_accuracy", "train_accuracy",
                          nullable={"generalised_step": NEVER["generalised_step"]}))
def decay_is_needed(runs: pd.DataFrame, rules: ModularRules, *, claim: Claim) -> Finding:
    """Runs that generalise, with weight decay against without (the control), by Fisher's exact test."""
    decayed, plain = runs[runs.weight_decay > 0], runs[runs.weight_decay == 0]
    if decayed.empty or plain.empty:
        return claim.not_testable(f"no run {'with' if decayed.empty else 'without'} weight decay was trained",
                                  f"{len(decayed)} runs with weight decay, {len(plain)} without.")
    k1, n1 = int(decayed.generalised_step.notna().sum()), len(decayed)
    k0, n0 = int(plain.generalised_step.notna().sum()), len(plain)
    (l1, h1), (l0, h0) = wilson_interval(k1, n1), wilson_interval(k0, n0)
    evidence = (f"generalised: {k1} of {n1} runs with weight decay (95% interval {l1:.2f}–{h1:.2f}), {k0} of {n0} "
                f"without (95% interval {l0:.2f}–{h0:.2f}); without weight decay final test accuracy "
                f"{plain.val_accuracy.min():.3f}–{plain.val_accuracy.max():.3f}, training-set accuracy "
                f"{plain.train_accuracy.min():.3f}–{plain.train_accuracy.max():.3f}.")
    return claim.finding(evidence, fisher_greater(k1, n1, k0, n0),
                         lambda level: fisher_power(n1, n0, rules.effect_share, rules.control_share, level))


def _sparsity_claim(rules: ModularRules) -> str:
    return (f"A grokked model's embedding uses a handful of key frequencies: it is spread over at most "
            f"1/{rules.sparser:g} of the effective frequencies of the same model at initialisation")


def _sparsity_test(rules: ModularRules) -> str:
    return _share_test(f"grokked runs with at most 1/{rules.sparser:g} of the effective frequencies of their "
                       "initialisation (the control)", rules)


@checked_claim(_sparsity_claim, _sparsity_test,
               runs=reads("grokked", "seed", "weight_decay", "effective_frequencies", "initial_effective_frequencies",
                          "key_frequencies", "generalised_step",
                          nullable={"generalised_step": NEVER["generalised_step"]}))
def fourier_sparsity(runs: pd.DataFrame, rules: ModularRules, *, claim: Claim) -> Finding:
    """Grokked runs whose embedding is `sparser` times sparser than the same model at initialisation."""
    grokked = runs[runs.grokked]
    if grokked.empty:
        return claim.not_testable("no run grokked", _none_grokked(runs))
    parts = [f"seed {int(r.seed)} wd {r.weight_decay:g}: {r.effective_frequencies:.1f} effective frequencies "
             f"(initialisation {r.initial_effective_frequencies:.1f}), key frequencies {r.key_frequencies}"
             for r in grokked.itertuples()]
    sparse = grokked.effective_frequencies * rules.sparser <= grokked.initial_effective_frequencies
    return share_finding(claim, sparse, rules, "; ".join(parts) + ".")


def _logits_claim(rules: ModularRules) -> str:
    return ("A grokked model builds its logits from its key frequencies: cos/sin(2πk(a+b−c)/p) at those k carry "
            f"≥ {rules.logits_explained:.0%} of the logits' variance more than as many random frequencies")


def _logits_test(rules: ModularRules) -> str:
    return _share_test(f"grokked runs whose key frequencies carry ≥ {rules.logits_explained:.0%} of the logits' "
                       "variance more than as many random frequencies (the control)", rules)


@checked_claim(_logits_claim, _logits_test,
               runs=reads("grokked", "seed", "weight_decay", "key_logit_share", "random_logit_share", "n_key",
                          "generalised_step", nullable={"generalised_step": NEVER["generalised_step"]}))
def logits_from_keys(runs: pd.DataFrame, rules: ModularRules, *, claim: Claim) -> Finding:
    """Grokked runs whose key frequencies carry `logits_explained` more of the logits' variance than as
    many random frequencies (in expectation: n_key / K of the share on all K frequencies)."""
    grokked = runs[runs.grokked]
    if grokked.empty:
        return claim.not_testable("no run grokked", _none_grokked(runs))
    gap = grokked.key_logit_share - grokked.random_logit_share
    parts = [f"seed {int(r.seed)} wd {r.weight_decay:g}: {r.key_logit_share:.2f} on {int(r.n_key)} key frequencies, "
             f"{r.random_logit_share:.2f} on as many random ones" for r in grokked.itertuples()]
    return share_finding(claim, gap >= rules.logits_explained, rules, "; ".join(parts) + ".")


LLC_CLAIM = ("The LLC rises while the model memorises and falls as it groks, further than in the same run without "
             "weight decay")


def _llc_test(rules: ModularRules) -> str:
    return ("for every traced grokked run with valid estimates from its peak on: its LLC rises to a peak by its "
            "grokking step (one-sided z-test of the rise over the first valid checkpoint, times the checkpoints the "
            "peak was picked from) and falls from it, as a "
            "share of the peak, further than its control's, the run of the same train fraction and seed without "
            "weight decay (one-sided z-test of the difference, standard errors from the chains and the estimator's "
            f"bias: {rules.llc_bias_source_text(stability_points(rules.llc_fall_at))}); p is the largest over the runs "
            "and tests (every run must pass); stated effect: a rise and an "
            f"extra fall of {rules.llc_fall:.0%} of the peak; valid estimates: {rules.llc_reading()}"
            + ("; each fall read at the run's last settled checkpoint: the last valid one after its peak whose "
               "training loss at w* is no higher than at the checkpoint before it (llc_fall_at = settled)"
               if rules.llc_fall_at == "settled" else ""))


# The LLC table's columns the claim reads. A run whose estimates are invalid (`invalid`) has no rise or fall, and
# one that never generalised no grokking step: those are read only of the valid grokked runs and their controls.
LLC_READS = reads("grokked", "weight_decay", "train_fraction", "seed", "invalid", "generalised_step", "peak_step",
                  "peak_candidates", "p_rise", "rise", "rise_se", "peak", "fall", "fall_se", "final_step", "bias",
                  nullable={"bias": "the estimator's bias was not measured (the suite's: weighed as 0; the models' "
                                    "stability: the claim is not testable)"})


@checked_claim(LLC_CLAIM, _llc_test, llc=LLC_READS)
def llc_falls_at_grokking(llc: pd.DataFrame, rules: ModularRules, *, claim: Claim) -> Finding:
    """Each traced grokked run against its control (llc_fall.llc_table rows): see the module docstring. The
    estimator's bias said to be weighed is the one the table's standard errors were computed with."""
    if llc.empty:
        return claim.not_testable("no run was traced", "No run's LLC was traced over training.")
    grokked = llc[llc.grokked & (llc.weight_decay > 0)]
    if grokked.empty:
        return claim.not_testable("no traced run grokked", f"{_llc_rows(llc)}; {_bias_text(llc, rules)}.")
    tests, left_out, used = [], [], []
    for g in grokked.itertuples():
        control = llc[(llc.weight_decay == 0) & (llc.train_fraction == g.train_fraction) & (llc.seed == g.seed)]
        c = next(control.itertuples(), None)
        problem = _unpaired(g, c)
        if problem:
            left_out.append(f"seed {g.seed} (fraction {g.train_fraction:g}) left out: {problem}")
        else:
            tests.append(_pair(g, c, rules.llc_fall))
            used += [g.Index, c.Index]
    if not tests:
        return claim.not_testable("no traced grokked run has valid estimates and a valid control",
                                  f"{'; '.join(left_out)}; {_bias_text(llc, rules)}.")
    if rules.llc_bias_source == "model" and llc.loc[used].bias.isna().any():
        return claim.not_testable("the traced models' own LLC stability, the bias this test weighs "
                                  "(llc_bias_source = model), was not measured on every testable run (an analysis "
                                  "made before the study measured it); analyse the runs again to measure it",
                                  f"{'; '.join(text for _, _, text in tests)}; {_bias_text(llc.loc[used], rules)}.")
    p_value = intersection_union([p for p, _, _ in tests])

    def power(level: float) -> float:
        return math.prod(run_power(level) for _, run_power, _ in tests)

    return claim.finding("; ".join([text for _, _, text in tests] + left_out) + f"; {_bias_text(llc.loc[used], rules)}.",
                         p_value, power)


def _bias_text(llc: pd.DataFrame, rules: ModularRules) -> str:
    """The estimator's bias the rows' standard errors were computed with (their `bias`), in words."""
    return weighed_bias_text(((f"seed {row.seed} wd {row.weight_decay:g}", row.bias) for row in llc.itertuples()),
                             rules)


def _unpaired(g, c) -> str:
    """Why grokked run `g` cannot be tested against `c`, its traced control without weight decay of the same
    fraction and seed (None: none was traced), "" when it can."""
    if g.invalid:
        return f"its estimates are invalid: {g.invalid}"
    if g.final_step < g.generalised_step:  # read before grokking (a settled checkpoint can be): not the claimed fall
        return (f"its fall is read at step {g.final_step}, before it generalised at step "
                f"{g.generalised_step:.0f}")
    if c is None:
        return "no control was traced"
    if c.grokked:
        return "its control grokked"
    if c.invalid:
        return f"its control's estimates are invalid: {c.invalid}"
    return ""


def _pair(g, c, effect: float) -> tuple[float, Callable[[float], float], str]:
    """One grokked run against its control: the run's p (the larger of the rise's, corrected for the peak's
    selection, and the difference's; 1 when the peak comes after the grokking step), its power at `effect`
    and the evidence."""
    gap, noise = g.fall - c.fall, math.hypot(g.fall_se, c.fall_se)
    z = z_score(gap, noise)
    on_time = g.peak_step <= g.generalised_step
    picked = max(1, g.peak_candidates)
    p_rise = min(1.0, picked * g.p_rise)
    p_value = intersection_union([p_rise, normal_tail(z)]) if on_time else 1.0
    low, high = normal_interval(gap, noise)
    text = (f"seed {g.seed} (fraction {g.train_fraction:g}): rises {g.rise:.0%} ± {g.rise_se:.0%} (p {p_rise:.2g}, "
            f"peak picked from {picked} checkpoints) "
            f"to {g.peak:.1f} at step {g.peak_step} ({'by' if on_time else 'after'} its grokking step "
            f"{g.generalised_step:.0f}), falls {g.fall:.0%} ± {g.fall_se:.0%} to step {g.final_step}; its control "
            f"falls {c.fall:.0%} ± {c.fall_se:.0%} from {c.peak:.1f} at step {c.peak_step}; difference {gap:+.0%} "
            f"(95% interval {low:+.0%} to {high:+.0%}), z = {z:.2f}, p = {normal_tail(z):.2g}")
    return (p_value, lambda level: normal_power(effect, g.rise_se, level / picked) * normal_power(effect, noise, level),
            text)


def _llc_rows(llc: pd.DataFrame) -> str:
    return "; ".join(f"seed {r.seed} wd {r.weight_decay:g} ({'grokked' if r.grokked else 'not grokked'}): "
                     + (r.invalid or f"falls {r.fall:.0%} ± {r.fall_se:.0%}") for r in llc.itertuples())


# The study's claims, in report order.
CLAIMS = registry(StudyClaim("groks", groks_with_decay), StudyClaim("decay-needed", decay_is_needed),
                  StudyClaim("fourier-sparse", fourier_sparsity), StudyClaim("logits-from-keys", logits_from_keys),
                  StudyClaim("llc-falls", llc_falls_at_grokking))
