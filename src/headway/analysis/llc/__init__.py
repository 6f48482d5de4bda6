"""Local learning coefficient (LLC) of every instance of an ensemble, or of any `nn.Module`, estimated by
SGLD in one batched run: λ̂(w*) = nβ·(E_w[L(w)] − L(w*)), w sampled from the localised tempered posterior
∝ exp(−nβ·L(w) − γ/2·|w − w*|²) (Lau et al. 2023; devinterp 1.x semantics).

One module per job, as devinterp splits its sampler:

- `settings`: `SGLDSettings` and devinterp's `default_nbeta`;
- `replicate`: the flat weight buffer the sampler moves, and an ensemble's instances copied once per chain;
- `masks`: restricted LLCs by parameter name, attention head or weight group;
- `prepare`: checked inputs (the pool's shapes, a plain module wrapped as an ensemble, the loss's precision);
- `sampler`: minibatches, the SGLD step, the batched sampling loop and its MALA acceptance;
- `memory`: how many instances run at once, measured or capped, with the numbers of one batch;
- `diagnostics`: readable warnings on the chains (diverging, climbing, disagreeing, low acceptance);
- `estimate`: `estimate_llc` → `LLCResult`, and `anchor_loss` (L(w*) and its standard error);
- `validity`: the sampler checks that make an estimate invalid (chains out of the basin);
- `known_answers`: models whose learning coefficient is known, and the estimator's bias on them.

Any other `nn.Module` is sampled the same way as a headway ensemble: its chains become rows of a
`ModuleEnsemble`, which runs the copies in one batched call with torch.func; the loss then is devinterp's
kind, `loss_fn(model, inputs, targets) -> scalar`, on a pool [N, ...].
"""

from headway.analysis.llc.diagnostics import (
    BATCH_MEANS,
    DISAGREE_FRACTION,
    DISAGREE_NOISE_FACTOR,
    DIVERGE_FACTOR,
    MIN_ACCEPTANCE,
    MIN_DRAWS_FOR_TREND,
    TREND_FRACTION,
    TREND_SIGMAS,
)
from headway.analysis.llc.estimate import LLCResult, anchor_loss, estimate_llc
from headway.analysis.llc.known_answers import SuiteBias, suite_bias
from headway.analysis.llc.masks import WEIGHT_GROUPS, head_mask, parameter_mask, weight_masks
from headway.analysis.llc.memory import MEASURE_ABOVE, instance_groups, rough_bytes, sampling_footprint
from headway.analysis.llc.replicate import is_ensemble, layout_of, replicate
from headway.analysis.llc.sampler import MalaScore, PoolSampler, sgld_step
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta
from headway.analysis.llc.validity import invalid_reasons

__all__ = [
    "BATCH_MEANS", "DISAGREE_FRACTION", "DISAGREE_NOISE_FACTOR", "DIVERGE_FACTOR", "MEASURE_ABOVE", "MIN_ACCEPTANCE",
    "MIN_DRAWS_FOR_TREND", "TREND_FRACTION", "TREND_SIGMAS", "WEIGHT_GROUPS", "LLCResult", "LossFn", "MalaScore",
    "PoolSampler", "SGLDSettings", "SuiteBias", "anchor_loss", "default_nbeta", "estimate_llc", "head_mask",
    "instance_groups", "invalid_reasons", "is_ensemble", "layout_of", "parameter_mask", "replicate", "rough_bytes",
    "sampling_footprint", "sgld_step", "suite_bias", "weight_masks",
]
