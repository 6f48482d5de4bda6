"""The LLC estimate: λ̂(w*) = nβ·(E_w[L(w)] − L(w*)), where w is sampled by SGLD from the localised
tempered posterior ∝ exp(−nβ·L(w) − γ/2·|w − w*|²) (Lau et al. 2023; devinterp 1.x semantics).

L(w*) is evaluated on the whole pool (or `init_loss_batches` random batches of it) with its standard
error, and `LLCResult.llc_se` combines that error (nβ·SE(L(w*)), shared by every chain) with the
chains' spread.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn

from headway.analysis.llc.diagnostics import diagnose
from headway.analysis.llc.memory import instance_groups
from headway.analysis.llc.precondition import diagonal_preconditioner
from headway.analysis.llc.prepare import checked_loss, prepared
from headway.analysis.llc.replication import replicate
from headway.analysis.llc.resolution import Resolution, basin_resolution
from headway.analysis.llc.sampler import gather, sample_groups, seeded_generators
from headway.analysis.llc.settings import LossFn, SGLDSettings, default_nbeta
from headway.analysis.llc.validity import ValidityLimits, basin_fraction, invalid_reasons, limited_reasons
from headway.analysis.llc.module_ensemble import ModuleLossFn, module_mode
from headway.errors import ConfigError
from headway.execution.allocator import keep_freed_memory


@dataclass
class LLCResult:
    """LLC estimates of E instances from C chains each; `warnings` start with "instance {e}: "."""

    llc_mean: np.ndarray  # [E] mean over the chains with finite losses
    llc_std: np.ndarray  # [E] std over those chains (ddof=1, like torch .std())
    llc_per_chain: np.ndarray  # [E, C], NaN for a chain whose loss became non-finite
    loss_trace: np.ndarray  # [E, C, draws] minibatch loss of each draw
    init_loss: np.ndarray  # [E] L(w*)
    warnings: list[str]
    settings: dict
    init_loss_se: np.ndarray  # [E] standard error of L(w*) (0 when the whole pool was evaluated)
    llc_se: np.ndarray  # [E] standard error of llc_mean: √(llc_std²/finite chains + (nβ·init_loss_se)²)
    acceptance: np.ndarray  # [E] mean MALA acceptance of the SGLD steps after burn-in, over finite chains
    chance_loss: np.ndarray | None = None  # [E] loss of a uniform guess (NaN: not given); None is read as all NaN
    validity: ValidityLimits = field(default_factory=ValidityLimits)  # the limits `invalid` and the warnings applied
    resolution: Resolution | None = None  # what the settings resolve of the basin (`resolution.basin_resolution`), if asked
    moving_weights: int = 0  # the coordinates the chains moved (mask and trainable): λ̂ can be at most half of them
    refused: str = ""  # why settings chosen per model (`auto.choose_settings`) found none that qualified: invalid

    def __post_init__(self) -> None:
        if self.chance_loss is None:
            self.chance_loss = np.full(len(self.init_loss), np.nan)

    @property
    def draw_loss(self) -> np.ndarray:
        """[E] mean draw loss over the finite chains: L(w*) + λ̂/nβ."""
        return self.init_loss + self.llc_mean / self.settings["nbeta"]

    @property
    def basin_fraction(self) -> np.ndarray:
        """[E] how far the draws went from L(w*) towards the chance loss (`validity.basin_fraction`); NaN
        where no chance loss was given."""
        return basin_fraction(self.init_loss, self.draw_loss, self.chance_loss)

    def instance_warnings(self, index: int) -> list[str]:
        """The diagnostics of one instance, without their "instance e: " prefix."""
        prefix = f"instance {index}: "
        return [w.removeprefix(prefix) for w in self.warnings if w.startswith(prefix)]

    def to_frame(self) -> pd.DataFrame:
        """One row per instance: instance, llc_mean, llc_std, llc_se, init_loss, init_loss_se, acceptance,
        draw_loss, chance_loss, basin_fraction, moving_weights, settings (the SGLD settings used, nβ resolved, as
        JSON), llc_chain{c}, n_warnings, warnings (that instance's diagnostics joined by "; ") and invalid (why λ̂
        is no estimate, "" when valid: `validity.invalid_reasons` at the result's `validity` limits); with a
        `resolution`, its columns (quadratic_llc, quadratic_limit, unresolved_directions, negative_directions,
        shortfall, spectrum) and limited (why the resolution check cannot vouch for λ̂, a lower bound or a basin
        that is not quadratic, "" when it can: `validity.limited_reasons` at the limits' `max_shortfall`)."""
        e, c = self.llc_per_chain.shape
        frame = pd.DataFrame({"instance": np.arange(e), "llc_mean": self.llc_mean, "llc_std": self.llc_std,
                              "llc_se": self.llc_se, "init_loss": self.init_loss, "init_loss_se": self.init_loss_se,
                              "acceptance": self.acceptance, "draw_loss": self.draw_loss,
                              "chance_loss": self.chance_loss, "basin_fraction": self.basin_fraction,
                              "moving_weights": self.moving_weights,
                              "settings": json.dumps(self.settings, sort_keys=True)})
        for chain in range(c):
            frame[f"llc_chain{chain}"] = self.llc_per_chain[:, chain]
        own = [self.instance_warnings(i) for i in range(e)]
        frame["n_warnings"] = [len(messages) for messages in own]
        frame["warnings"] = ["; ".join(messages) for messages in own]
        frame["invalid"] = self.refused or invalid_reasons(frame, self.validity)
        if self.resolution is not None:
            frame = frame.merge(self.resolution.to_frame(), on="instance")
            frame["limited"] = limited_reasons(frame, self.validity)
        return frame


def estimate_llc(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                 settings: SGLDSettings | str, mask: Tensor | None = None, progress: bool = False,
                 desc: str = "LLC", init_loss: tuple[np.ndarray, np.ndarray] | None = None,
                 precision: str = "fp32", max_rows: int | None = None,
                 chance_loss: float | np.ndarray | None = None, train_mode: bool | None = None,
                 validity: ValidityLimits = ValidityLimits(), resolve: bool = False,
                 resolution_rows: int | None = None, compile_mode: str | None = None) -> LLCResult:
    """λ̂ = nβ·(mean draw loss − L(w*)) for every instance of `model` (its weights are w*), from
    `settings.chains` SGLD chains each, all run as one batched E·C ensemble (see `headway.analysis.llc.sampler`).

    For a headway ensemble, `loss_fn(model, tokens, targets)` returns the per-instance mean loss
    [n_instances] of a batch; `tokens`, `targets` [E, N, ...] are each instance's pool, from which every
    chain draws its own shuffled minibatches. Any other `nn.Module` is one instance: `tokens`, `targets`
    are its pool [N, ...] and `loss_fn(model, inputs, targets)` returns a batch's mean loss, a scalar
    (`model` is the module itself, holding its chain's weights while the loss runs, so a loss may use its
    attributes and submodules); devinterp's own `evaluate(model, batch)`
    is taken as well (`module_ensemble.devinterp_loss`). The module's own weights, buffers and mode are never
    changed (the chains read a copy of its buffers), and its parameters with requires_grad=False do not move.
    `train_mode` samples it, L(w*) included, in train mode (True: dropout on and BatchNorm on batch statistics,
    as devinterp always does), in eval mode (False) or in its own mode (None); dropout masks come from torch's
    global generator, seeded with `settings.seed` for the call and restored after. As in devinterp
    1.x, step i computes the minibatch loss at the current weights, then moves (`sgld_step`); its loss is
    draw (i − burnin)/steps_between_draws when i ≥ burnin and (i + 1 − burnin) is a multiple of
    steps_between_draws. With `mask` [P] only the masked coordinates move (a restricted LLC;
    `parameter_mask` builds one by name for either kind). A chain whose loss becomes non-finite is frozen and
    left out of llc_mean and llc_std, with a warning.

    L(w*) and its standard error come from `anchor_loss` (the whole pool by default), evaluated once on
    the E-instance model and shared by its chains; `init_loss` passes them in when several masks share
    one w*. Same settings and seed give identical numbers; only explicit generators are used.
    `precision` (fp32, tf32, bf16 or auto; `headway.compute`) is that of every loss evaluation,
    L(w*) included; weights, noise and losses stay float32. At most `max_rows` of the E·C rows are
    sampled at once (default: what the device is measured to hold, `instance_groups`): the instances
    then run in groups, all chains of each together, with the numbers of one batch. `chance_loss` (a float
    or one per instance) is the loss of a uniform guess on this pool; given, the diagnostics and
    `LLCResult.to_frame().invalid` say when the chains left the basin of w* for it. `validity` holds the limits
    by which the diagnostics and `invalid` judge the chains (`validity.ValidityLimits`; by default the
    estimator's own): a study passes its rules' (`headway.studies.llc_rules.LLCRules.llc_validity`). With
    `resolve`, the Hessian at w* says what these settings can resolve (`headway.analysis.llc.resolution`): the
    result's `resolution`, and its frame's `limited` where more than `validity.max_shortfall` of the curved basin
    is unseen or λ̂ is above the quadratic prediction by more than that share (`validity.limited_reasons`), the
    Hessian measured on `resolution_rows` pool rows (None: all of them). Without a chance loss, chains that left
    the basin still show when λ̂ exceeds d/2 of the moving weights (`validity.ceiling`).
    `settings="auto"` chooses them for this model (`auto.choose_settings` from the default settings; resolution
    included): the estimate at the settings chosen, or, refused, at the last tried
    with the reason as `invalid`. `settings.preconditioner = "diagonal"` measures the chains' fixed metric at w*
    first (`precondition.diagonal_preconditioner`, on its own seeded subsample of the pool). `compile_mode` (a
    `torch.compile` mode such as "default"; None: eager) compiles the sampler's loss and its backward (with an eager
    fallback): the same numbers to float rounding, faster once the compilation (tens of seconds) is paid for.
    """
    if isinstance(settings, str):
        return _auto(model, loss_fn, tokens, targets, settings, mask, precision, chance_loss, train_mode, validity)
    with module_mode(model, train_mode, settings.seed):
        metric = None if settings.preconditioner == "none" else \
            diagonal_preconditioner(model, loss_fn, tokens, targets, settings, mask)
        result = _estimate(model, loss_fn, tokens, targets, settings, mask, progress, desc, init_loss, precision,
                           max_rows, chance_loss, validity, metric, compile_mode)
        if resolve:
            result = replace(result, resolution=basin_resolution(model, loss_fn, tokens, targets, settings, mask,
                                                                 rows=resolution_rows))
    return result


def _auto(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor, settings: str,
          mask: Tensor | None, precision: str, chance_loss: float | np.ndarray | None, train_mode: bool | None,
          validity: ValidityLimits) -> LLCResult:
    """`estimate_llc(settings="auto")`."""
    from headway.analysis.llc.auto import choose_settings

    if settings != "auto":
        raise ConfigError(f"settings = {settings!r} is unknown; give SGLDSettings or 'auto'")
    with module_mode(model, train_mode, SGLDSettings().seed):
        return choose_settings(model, loss_fn, tokens, targets, mask=mask, validity=validity,
                               chance_loss=chance_loss, precision=precision).result


def _estimate(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
              settings: SGLDSettings, mask: Tensor | None, progress: bool, desc: str,
              init_loss: tuple[np.ndarray, np.ndarray] | None, precision: str, max_rows: int | None,
              chance_loss: float | np.ndarray | None, validity: ValidityLimits,
              metric: Tensor | None = None, compile_mode: str | None = None) -> LLCResult:
    """`estimate_llc` with the model in its sampling mode (`metric` [E, P]: the chains' fixed diagonal metric)."""
    model, loss_fn, tokens, targets, trainable = prepared(model, loss_fn, tokens, targets, settings, mask, precision)
    if trainable is not None:
        mask = trainable if mask is None else mask.to(trainable) * trainable
    nbeta = default_nbeta(settings.batch_size) if settings.nbeta is None else settings.nbeta
    device = model.flat.data.device
    if device.type == "cpu":
        keep_freed_memory()  # E·C rows of activations per step: fresh pages each step would cost the kernel's time
    groups = instance_groups(model, loss_fn, tokens, targets, settings, max_rows, mask, precision)
    init_gen = seeded_generators(settings.seed, device)[0]
    init, init_se = loss_at_anchor(model, loss_fn, tokens, targets, settings, init_gen, groups) if init_loss is None \
        else (np.asarray(init_loss[0], dtype=float), np.asarray(init_loss[1], dtype=float))
    trace, died, accept = sample_groups(model, loss_fn, tokens, targets, settings, nbeta, mask, groups, progress, desc,
                                        metric, compile_mode)
    e, c = model.flat.data.shape[0], settings.chains
    trace = trace.double().cpu().numpy().reshape(e, c, settings.draws)
    per_chain = nbeta * (trace.mean(axis=2) - init[:, None])
    mean, std = _chain_summary(per_chain)
    accept = accept.cpu().numpy().reshape(e, c)
    scored = np.isfinite(per_chain) & np.isfinite(accept)
    with np.errstate(invalid="ignore", divide="ignore"):
        llc_se = np.sqrt(std**2 / np.isfinite(per_chain).sum(axis=1) + (nbeta * init_se) ** 2)
        acceptance = np.where(scored, accept, 0.0).sum(axis=1) / scored.sum(axis=1)
    used = replace(settings, nbeta=nbeta)
    chance = np.broadcast_to(np.asarray(np.nan if chance_loss is None else chance_loss, dtype=float), (e,)).copy()
    basin = basin_fraction(init, init + mean / nbeta, chance)
    messages = diagnose(trace, init, per_chain, mean, died.cpu().numpy().reshape(e, c), acceptance, basin, used,
                        validity)
    moving = model.flat.data.shape[1] if mask is None else int((mask != 0).sum().item())
    return LLCResult(mean, std, per_chain, trace, init, messages, used.stored_dict(), init_se, llc_se, acceptance, chance,
                     validity, moving_weights=moving)


def anchor_loss(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                settings: SGLDSettings, precision: str = "fp32", max_rows: int | None = None,
                train_mode: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """L(w*) per instance [E] and its standard error [E], as `estimate_llc` computes them (same inputs, seed,
    precision and mode): hand them to `estimate_llc(init_loss=...)` to evaluate the pool once for several masks."""
    with module_mode(model, train_mode, settings.seed):
        model, loss_fn, tokens, targets, _ = prepared(model, loss_fn, tokens, targets, settings, None, precision)
        groups = instance_groups(model, loss_fn, tokens, targets, settings, max_rows, None, precision)
        generator = seeded_generators(settings.seed, model.flat.data.device)[0]
        return loss_at_anchor(model, loss_fn, tokens, targets, settings, generator, groups)


@torch.no_grad()
def loss_at_anchor(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                   generator: torch.Generator,
                   groups: list[tuple[int, int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """L(w*) per instance [E] and its standard error [E] (float64), from disjoint batches of a random
    permutation of each instance's pool: the whole pool (`init_loss_batches` None; the last batch may be
    shorter) or `init_loss_batches` batches of `init_size`. The SE comes from the spread of the batch
    means and carries the finite-pool correction: it is 0 when the whole pool was evaluated. `groups`
    ([start, stop) instance ranges) evaluates the instances a group at a time, with the same numbers."""
    e, n = tokens.shape[:2]
    size = min(settings.init_size, n)
    batches = -(-n // size) if settings.init_loss_batches is None else settings.init_loss_batches
    if settings.init_loss_batches is not None and batches * size > n:
        raise ConfigError(f"init_loss_batches = {batches} of {size} examples is more than the pool of {n}; use at "
                          f"most {n // size}, or None for the whole pool")
    order = torch.rand(e, n, generator=generator).argsort(dim=1).to(tokens.device)
    spans = [(start, min(start + size, n)) for start in range(0, batches * size, size)]
    parts = [_batch_means(model if (first, last) == (0, e) else replicate(model, 1, (first, last)), loss_fn,
                           tokens[first:last], targets[first:last], order[first:last], spans)
             for first, last in groups or [(0, e)]]
    means_np = np.concatenate(parts, axis=1)
    counts = [stop - start for start, stop in spans]
    weights = np.asarray(counts, dtype=float)[:, None]
    used = weights.sum()
    mean = (weights * means_np).sum(axis=0) / used
    with np.errstate(invalid="ignore", divide="ignore"):
        variance = (weights * (means_np - mean) ** 2).sum(axis=0) / (len(counts) - 1)  # per example
        se = np.sqrt(variance / used * (1 - used / n))
    return mean, np.where(used >= n, 0.0, se)


def _batch_means(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, order: Tensor,
                 spans: list[tuple[int, int]]) -> np.ndarray:
    """Mean loss [batches, E] of every instance on the examples order[:, start:stop] of each span."""
    e = tokens.shape[0]
    instance = torch.arange(e, device=tokens.device)
    means = []
    for start, stop in spans:
        index = order[:, start:stop]
        means.append(checked_loss(loss_fn(model, gather(tokens, instance, index),
                                          gather(targets, instance, index)), e).double().cpu().numpy())
    return np.stack(means)


def _chain_summary(per_chain: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std (ddof=1) over the finite chains of each instance; NaN where too few."""
    finite = np.isfinite(per_chain)
    count = finite.sum(axis=1)
    values = np.where(finite, per_chain, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = values.sum(axis=1) / count
        squares = np.where(finite, (per_chain - mean[:, None]) ** 2, 0.0).sum(axis=1)
        std = np.sqrt(squares / (count - 1))
    return mean, np.where(count > 1, std, np.nan)
