"""Local learning coefficient (LLC) of every instance of an ensemble, or of any `nn.Module`, estimated by
SGLD in one batched run: λ̂(w*) = nβ·(E_w[L(w)] − L(w*)), w sampled from the localised tempered posterior
∝ exp(−nβ·L(w) − γ/2·|w − w*|²) (Lau et al. 2023; devinterp 1.x semantics).

One module per job, as devinterp splits its sampler:

- `settings`: `SGLDSettings` and devinterp's `default_nbeta`;
- `replication`: the flat weight buffer the sampler moves, and an ensemble's instances copied once per chain;
- `masks`: restricted LLCs by parameter name, attention head or weight group;
- `prepare`: checked inputs (the pool's shapes, a plain module wrapped as an ensemble, the loss's precision);
- `sampler`: minibatches, the SGLD step, the batched sampling loop and its MALA acceptance;
- `memory`: how many instances run at once, measured or capped, with the numbers of one batch;
- `diagnostics`: readable warnings on the chains (diverging, climbing, disagreeing, low acceptance);
- `estimate`: `estimate_llc` → `LLCResult`, and `anchor_loss` (L(w*) and its standard error);
- `validity`: the sampler checks that make an estimate invalid and their limits (`ValidityLimits`);
- `resolution`: what the settings can resolve of the basin, from the Hessian at w* (`Resolution`);
- `precondition`: a fixed diagonal metric for SGLD from the Hessian's diagonal at w*;
- `known_answers`: models whose learning coefficient is known, and the estimator's bias on them.

Any other `nn.Module` is sampled the same way as a headway ensemble: its chains become rows of a
`ModuleEnsemble`, which runs the copies in one batched call with torch.func; the loss then is devinterp's
kind, `loss_fn(model, inputs, targets) -> scalar`, on a pool [N, ...].
"""

from __future__ import annotations

import importlib
from typing import Any

# Each name and the module of the package that defines it; a name loads its module on first use, so a study
# plan can read `SGLDSettings` without importing torch (what `headway study NAME --help` needs).
_EXPORTS = {
    **dict.fromkeys(("BATCH_MEANS", "DISAGREE_FRACTION", "DISAGREE_NOISE_FACTOR", "MIN_ACCEPTANCE",
                     "MIN_DRAWS_FOR_TREND"), "diagnostics"),
    **dict.fromkeys(("LLCResult", "anchor_loss", "estimate_llc"), "estimate"),
    **dict.fromkeys(("SuiteBias", "suite_bias"), "known_answers"),
    **dict.fromkeys(("WEIGHT_GROUPS", "head_mask", "parameter_mask", "weight_masks"), "masks"),
    **dict.fromkeys(("MEASURE_ABOVE", "instance_groups", "rough_bytes", "sampling_footprint"), "memory"),
    **dict.fromkeys(("is_ensemble", "layout_of", "replicate"), "replication"),
    **dict.fromkeys(("diagonal_preconditioner",), "precondition"),
    **dict.fromkeys(("Resolution", "basin_resolution"), "resolution"),
    **dict.fromkeys(("MalaScore", "PoolSampler", "sgld_step"), "sampler"),
    **dict.fromkeys(("LossFn", "SGLDSettings", "default_nbeta"), "settings"),
    **dict.fromkeys(("ValidityLimits", "invalid_reasons"), "validity"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'headway.analysis.llc' has no attribute {name!r}")
    return getattr(importlib.import_module(f"headway.analysis.llc.{_EXPORTS[name]}"), name)
