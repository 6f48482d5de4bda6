"""How many instances the sampler runs at once: when E·C rows would not fit the device (`max_rows`, or
measured: `instance_groups`), the instances run in groups, each with all its C chains, one group after
another. Every group replays the random streams of the whole run and keeps its own rows of them
(`PoolSampler(keep=...)`, `sgld_step(drawn=...)`), so the numbers are those of the one-batch run (bit
for bit on the CPU; on a GPU the matrix kernels picked for fewer rows may round differently); the price
is drawing every row's minibatch keys and noise once per group (the noise is [E·C, P] floats for one
step, small next to the activations that forced the split)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
from torch import Tensor, nn

from headway.analysis.llc.sampler import sample, seeded_generators
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta
from headway.errors import ConfigError
from headway.execution.memory import Footprint, fit_footprint, memory_budget, peak_bytes
from headway.execution.sizes import balanced_sizes
from headway.settings import check_int

MEASURE_ABOVE = 0.25  # measure the sampler only when a rough estimate of all rows reaches this share of the budget
_footprints: dict[tuple, Footprint] = {}


def instance_groups(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                    max_rows: int | None, mask: Tensor | None = None, precision: str = "fp32") -> list[tuple[int, int]]:
    """The [start, stop) instance ranges sampled one after another: groups of balanced sizes with at most
    `max_rows` rows (instances × chains) each; with `max_rows` None, as many instances as the device is
    measured to hold (`sampling_footprint`, taken only when `rough_bytes` of all rows is not plainly small)."""
    e, chains = model.flat.data.shape[0], settings.chains
    if max_rows is not None:
        max_rows = check_int("max_rows", max_rows, 1)
        if max_rows < chains:
            raise ConfigError(f"max_rows = {max_rows} is fewer than the {chains} chains of one instance; a group "
                              f"samples every chain of its instances, so use max_rows >= {chains}")
        most = max_rows // chains
    else:
        most = e if e == 1 else _instances_that_fit(model, loss_fn, tokens, targets, settings, mask, precision)
    sizes = balanced_sizes(e, most)
    starts = np.cumsum([0, *sizes]).tolist()
    return list(zip(starts[:-1], starts[1:]))


def _instances_that_fit(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                        mask: Tensor | None, precision: str) -> int:
    """How many instances (with all their chains) the device holds at once; all of them when plainly all fit,
    or when the model's activations cannot be estimated and the device is the CPU."""
    e, device = model.flat.data.shape[0], model.flat.data.device
    budget = memory_budget(device)
    rough = rough_bytes(model, settings.batch_size, e * settings.chains)
    if (rough is None and device.type != "cuda") or (rough is not None and rough < MEASURE_ABOVE * budget):
        return e
    footprint = sampling_footprint(model, loss_fn, tokens, targets, settings, mask, precision)
    return min(e, max(1, footprint.capacity(budget)))


def rough_bytes(model: nn.Module, batch_size: int, rows: int) -> int | None:
    """A rough peak of sampling `rows` rows of a headway transformer (None for other models): ten float32
    copies of the weights (weights, anchor, gradient, noise, MALA's) and the activations the backward pass
    keeps per token (as `headway.runs.cost.training_memory` counts them)."""
    cfg, n_ctx, d_out = getattr(model, "cfg", None), getattr(model, "n_ctx", None), getattr(model, "d_out", None)
    if n_ctx is None or d_out is None or not all(hasattr(cfg, name) for name in ("layers", "d_model", "heads",
                                                                                "head_dim", "mlp_dim")):
        return None
    d, h, dh, mlp = cfg.d_model, cfg.heads, cfg.head_dim, cfg.mlp_dim
    kept = cfg.layers * (4 * d + 4 * h * dh + 3 * h * n_ctx + 3 * mlp) + 3 * d_out
    return 4 * rows * (10 * model.flat.data.shape[1] + batch_size * n_ctx * kept)


def sampling_footprint(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                       mask: Tensor | None = None, precision: str = "fp32") -> Footprint:
    """Measured peak bytes of one SGLD step of k instances × C chains, as base + per_instance·k, from k = 1
    and 2 (needs two instances); cached per weight layout, example shape, batch, chains, precision and device."""
    device = model.flat.data.device
    key = (type(model).__name__, tuple(model.flat.names), model.flat.data.shape[1], tuple(tokens.shape[2:]),
           tuple(targets.shape[2:]), settings.batch_size, settings.chains, mask is None, precision, str(device))
    if key not in _footprints:
        probe = replace(settings, burnin=0, draws=1, steps_between_draws=1)
        nbeta = default_nbeta(settings.batch_size) if settings.nbeta is None else settings.nbeta

        def step(k: int) -> None:
            sample(model, loss_fn, tokens[:k], targets[:k], probe, nbeta, mask,
                   seeded_generators(probe.seed, device)[1:], False, "", instances=(0, k))

        _footprints[key] = fit_footprint([1, 2], [peak_bytes(lambda k=k: step(k), device) for k in (1, 2)])
    return _footprints[key]
