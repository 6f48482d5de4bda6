"""Chain diagnostics of an LLC estimate, as readable warnings per instance; the thresholds are the
module constants below."""

from __future__ import annotations

import math

import numpy as np

from headway.analysis.llc.settings import SGLDSettings
from headway.analysis.llc.validity import BASIN_FRACTION


# A chain diverges when the mean rise (loss − init_loss) of its last quarter of draws exceeds
# DIVERGE_FACTOR × (a reference rise + the std of its own first-half draws). The reference is the
# smaller positive one of its own whole-trace mean rise and the median over the instance's chains of
# theirs. A settled chain's last quarter stays near both; an exploding chain's last quarter
# dominates its own mean (and the others' when it explodes alone).
DIVERGE_FACTOR = 3.0
# An instance's chains are still climbing when, averaged over chains, the fourth quarter's mean loss
# exceeds the third quarter's by more than TREND_FRACTION × the mean rise AND by more than
# TREND_SIGMAS standard errors of that difference across chains (chains are independent, so their
# spread measures the noise whatever the autocorrelation within a chain).
TREND_FRACTION = 0.1
TREND_SIGMAS = 4.0
MIN_DRAWS_FOR_TREND = 8
# Chains disagree when the between-chain std of the LLC exceeds DISAGREE_FRACTION × |mean LLC| and
# DISAGREE_NOISE_FACTOR × the spread each chain's own draw-to-draw noise explains (its standard
# error from BATCH_MEANS contiguous batch means, which allows for autocorrelation).
DISAGREE_FRACTION = 0.25
DISAGREE_NOISE_FACTOR = 2.0
BATCH_MEANS = 5
# Mean MALA acceptance below which the sampler is not calibrated in devinterp's sense (it calls step
# sizes with acceptance around 0.9-0.95 well calibrated). The energy is the minibatch one, as in
# devinterp, so with nβ ≫ 1 the batch-to-batch noise of nβ·L_B lowers the acceptance at any step size:
# the warning then says the sampler is far from exact, not by how much λ̂ is off; `calibration`
# measures that (on the sorting models no affordable setting reached 0.5; docs/study-sorting.md).
MIN_ACCEPTANCE = 0.9


def diagnose(trace: np.ndarray, init: np.ndarray, per_chain: np.ndarray, mean: np.ndarray, died: np.ndarray,
             acceptance: np.ndarray, basin: np.ndarray, settings: SGLDSettings) -> list[str]:
    """Readable warnings, instance by instance, in the order: non-finite, diverging, climbing,
    disagreeing chains, chains out of the basin (`basin` [E]: `validity.basin_fraction`), low MALA
    acceptance, negative LLC."""
    messages: list[str] = []
    for e in range(trace.shape[0]):
        rise = trace[e] - init[e]
        finite = np.isfinite(per_chain[e])
        messages += _non_finite(e, died[e], settings)
        if finite.any():
            messages += _diverging(e, rise[finite], np.flatnonzero(finite))
            messages += _climbing(e, rise[finite])
            messages += _disagreeing(e, rise[finite], per_chain[e, finite], settings.nbeta)
        if basin[e] >= BASIN_FRACTION:
            messages.append(f"instance {e}: chains left the basin: the mean draw loss went {basin[e]:.0%} of the way "
                            "from L(w*) to the loss of a uniform guess; raise nbeta (a colder posterior) or "
                            "localization, or lower lr")
        if acceptance[e] < MIN_ACCEPTANCE:
            messages.append(f"instance {e}: mean MALA acceptance {acceptance[e]:.3g} < {MIN_ACCEPTANCE:g}: SGLD is not a "
                            "calibrated sampler of the tempered posterior here (too coarse a step or, as nβ "
                            "multiplies it, too much minibatch noise), so λ̂ may be biased; lower lr or raise "
                            "batch_size, and check that λ̂ holds (headway.analysis.llc.calibration)")
        if mean[e] < 0:
            messages.append(f"instance {e}: mean LLC {mean[e]:.4g} < 0: the samples found lower loss than w*; "
                            "w* may not be a local minimum (train longer), or lower lr or raise localization")
    return messages


def _non_finite(e: int, died: np.ndarray, settings: SGLDSettings) -> list[str]:
    out = []
    for chain in np.flatnonzero(died >= 0):
        step = int(died[chain])
        when = (f"draw {(step - settings.burnin) // settings.steps_between_draws} (step {step})"
                if step >= settings.burnin else f"burn-in step {step}")
        out.append(f"instance {e}: chain {chain} loss became non-finite at {when}; the chain was frozen and its "
                   "LLC is NaN; lower lr or raise localization")
    return out


def _quarters(rise: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean rise of the third and of the fourth quarter of each chain's draws."""
    d = rise.shape[1]
    return rise[:, d // 2 : 3 * d // 4].mean(axis=1), rise[:, 3 * d // 4 :].mean(axis=1)


def _diverging(e: int, rise: np.ndarray, chains: np.ndarray) -> list[str]:
    d = rise.shape[1]
    if d < 4:
        return []
    own = rise.mean(axis=1)
    median = float(np.median(own))
    _, last = _quarters(rise)
    spread = rise[:, : d // 2].std(axis=1)
    out = []
    for chain, mine, value, noise in zip(chains, own, last, spread):
        references = [r for r in (mine, median) if r > 0]
        if references and value > DIVERGE_FACTOR * (min(references) + noise):
            out.append(f"instance {e}: chain {chain} diverges: its last-quarter loss rise {value:.4g} is over "
                       f"{DIVERGE_FACTOR:g}× (the typical rise {min(references):.4g} + its early-draw spread "
                       f"{noise:.4g}); lower lr or raise localization")
    return out


def _climbing(e: int, rise: np.ndarray) -> list[str]:
    c, d = rise.shape
    if c < 2 or d < MIN_DRAWS_FOR_TREND:
        return []
    third, fourth = _quarters(rise)
    climb = fourth - third
    noise = climb.std(ddof=1) / math.sqrt(c)
    level = abs(float(rise.mean()))
    if climb.mean() > TREND_FRACTION * level and climb.mean() > TREND_SIGMAS * noise:
        return [(f"instance {e}: draw losses are still climbing over the second half (last quarter "
                 f"{climb.mean():.4g} above the third, mean rise {level:.4g}); use more burnin or draws, "
                 "or lower lr or raise localization")]
    return []


def _batch_means_se(rise: np.ndarray) -> np.ndarray:
    """Standard error of each chain's mean draw from BATCH_MEANS contiguous batch means."""
    batches = min(BATCH_MEANS, rise.shape[1])
    usable = rise.shape[1] // batches * batches
    means = rise[:, :usable].reshape(rise.shape[0], batches, -1).mean(axis=2)
    return means.std(axis=1, ddof=1) / math.sqrt(batches)


def _disagreeing(e: int, rise: np.ndarray, llcs: np.ndarray, nbeta: float) -> list[str]:
    if len(llcs) < 2 or rise.shape[1] < 2:
        return []
    spread = float(llcs.std(ddof=1))
    explained = nbeta * math.sqrt(float(np.mean(_batch_means_se(rise) ** 2)))
    mean = float(llcs.mean())
    if spread > DISAGREE_FRACTION * abs(mean) and spread > DISAGREE_NOISE_FACTOR * explained:
        return [(f"instance {e}: chains disagree: LLC std {spread:.4g} over chains vs mean {mean:.4g}, while "
                 f"each chain's own noise explains {explained:.4g}; use more burnin or draws, or more chains")]
    return []
