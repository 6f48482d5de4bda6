"""Local learning coefficient (LLC) of every instance of an ensemble, estimated by SGLD in one run.

λ̂(w*) = nβ·(E_w[L(w)] − L(w*)), where w is sampled by SGLD from the localised tempered posterior
∝ exp(−nβ·L(w) − γ/2·|w − w*|²) (Lau et al. 2023; devinterp 1.x semantics, see `sgld_step`).

Batching: for E instances and C chains the model is replicated into one ensemble of E·C instances,
instance-major (row e·C + c is chain c of instance e), so every chain is just another instance:
one forward and backward of the E·C model per SGLD step gives every chain's loss and gradient, and
the update is a few whole-buffer ops on the flat [E·C, P] weights (`FlatParameters`). Minibatch
indices for all rows come from one generator call, and each row reads only its instance's pool.
No Python loop runs over chains or instances while sampling.

Memory: when E·C rows would not fit the device (`max_rows`, or measured: `instance_groups`), the
instances run in groups, each with all its C chains, one group after another. Every group replays the
random streams of the whole run and keeps its own rows of them (`PoolSampler(keep=...)`,
`sgld_step(drawn=...)`), so the numbers are those of the one-batch run (bit for bit on the CPU; on a GPU
the matrix kernels picked for fewer rows may round differently); the price is drawing every
row's minibatch keys and noise once per group (the noise is [E·C, P] floats for one step, small next
to the activations that forced the split).

Any other `nn.Module` is sampled the same way: its chains become rows of a `ModuleEnsemble`, which
runs the copies in one batched call with torch.func (`vmap` over `functional_call`); the loss then is
devinterp's kind, `loss_fn(model, inputs, targets) -> scalar`, on a pool [N, ...].

L(w*) is evaluated on the whole pool (or `init_loss_batches` random batches of it) with its standard
error, and `LLCResult.llc_se` combines that error (nβ·SE(L(w*)), shared by every chain) with the
chains' spread. Every SGLD step after burn-in is also scored as a Metropolis-adjusted Langevin (MALA)
proposal, as devinterp's MALA diagnostic does: the acceptance probability it would have under the
tempered, localised posterior (its minibatch energy), from the gradient the next step computes anyway.

Diagnostics are collected as readable warnings in `LLCResult.warnings`; the thresholds are the
module constants below.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import torch
from torch import Tensor, nn
from tqdm.auto import tqdm

from headway.analysis.module_ensemble import ModuleEnsemble, ModuleLossFn, ensemble_loss, error_line, plain_layout
from headway.compute import ComputeSettings, at_precision
from headway.errors import ConfigError
from headway.execution.allocator import keep_freed_memory
from headway.execution.memory import Footprint, fit_footprint, memory_budget, peak_bytes
from headway.execution.sizes import balanced_sizes
from headway.model.flat import FlatLayout, FlatParameters
from headway.settings import Settings, check_int, check_number, is_integer

LossFn = Callable[[nn.Module, Tensor, Tensor], Tensor]

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
# the warning then says the sampler is far from exact, not by how much λ̂ is off; `sgld_calibration`
# measures that (on the sorting models no affordable setting reached 0.5; docs/study-sorting.md).
MIN_ACCEPTANCE = 0.9


@dataclass(frozen=True)
class SGLDSettings(Settings):
    """SGLD sampler and LLC estimate settings (devinterp 1.x names in comments)."""

    lr: float = 1e-4  # ε, the step size
    nbeta: float | None = None  # n·β, inverse temperature; None → default_nbeta(batch_size)
    localization: float = 100.0  # γ, pull towards w*
    chains: int = 4
    draws: int = 200
    burnin: int = 0  # SGLD steps before the first draw (num_burnin_steps)
    steps_between_draws: int = 1  # num_steps_bw_draws
    batch_size: int = 512
    init_loss_batches: int | None = None  # disjoint random batches averaged for L(w*); None: the whole pool
    init_batch_size: int | None = None  # examples per L(w*) batch; None: batch_size × chains (one step's)
    seed: int = 0

    def __post_init__(self) -> None:
        positive = ("chains", "draws", "steps_between_draws", "batch_size")
        self.normalise(**{name: check_int(name, getattr(self, name), 1) for name in positive})
        self.normalise(**{name: check_int(name, getattr(self, name), 1) for name in ("init_loss_batches",
                                                                                       "init_batch_size")
                          if getattr(self, name) is not None})
        self.normalise(burnin=check_int("burnin", self.burnin, 0), seed=check_int("seed", self.seed, 0))
        self.normalise(
            lr=check_number("lr", self.lr, 0.0, low_open=True),
            nbeta=None if self.nbeta is None else check_number("nbeta", self.nbeta, 0.0, low_open=True),
            localization=check_number("localization", self.localization, 0.0),
        )

    @property
    def steps(self) -> int:
        """SGLD steps per chain: burn-in, then `draws` draws `steps_between_draws` apart."""
        return self.burnin + self.draws * self.steps_between_draws

    @property
    def init_size(self) -> int:
        """Examples per batch of the L(w*) evaluation."""
        return self.init_batch_size or self.batch_size * self.chains


def default_nbeta(batch_size: int) -> float:
    """devinterp's default n·β = B / ln B (1 for B = 1, where it is undefined)."""
    return float(batch_size / math.log(batch_size)) if batch_size > 1 else 1.0


# --- models and masks -------------------------------------------------------------------------


def is_ensemble(model: nn.Module) -> bool:
    """Whether `model` keeps its instances' weights in a flat [E, P] buffer (a headway ensemble, or a
    `ModuleEnsemble`); any other module is sampled as one plain model."""
    return isinstance(getattr(model, "flat", None), FlatLayout)


def layout_of(model: nn.Module) -> FlatLayout:
    """The flat layout of an ensemble's weights, or the [1, P] one of a plain module's."""
    return model.flat if is_ensemble(model) else plain_layout(model)


def replicate(model: nn.Module, copies: int, instances: tuple[int, int] | None = None) -> nn.Module:
    """A deep copy of `model` holding every instance (or those in [start, stop) of `instances`) `copies`
    times, instance-major (row e·copies + c is copy c of instance e), with its own `flat` buffer and
    `n_instances`; `model` is untouched."""
    copies = check_int("copies", copies, 1)
    start, stop = instances or (0, model.n_instances)
    if isinstance(model, ModuleEnsemble):
        if (start, stop) == (0, model.n_instances):
            return model.replicated(copies)
        return ModuleEnsemble(model.inner[0], model.loss_fn,
                              model.flat.data.detach()[start:stop].repeat_interleave(copies, dim=0).clone())
    clone = copy.deepcopy(model, {id(model.flat): None})  # the old flat buffer is rebuilt below
    with torch.no_grad():
        for name, param in list(clone.named_parameters()):
            owner_name, _, leaf = name.rpartition(".")
            owner = clone.get_submodule(owner_name) if owner_name else clone
            setattr(owner, leaf, nn.Parameter(param[start:stop].repeat_interleave(copies, dim=0), param.requires_grad))
    clone.n_instances = (stop - start) * copies
    clone.flat = FlatParameters(clone, clone.n_instances)
    return clone


def parameter_mask(model: nn.Module, names: Iterable[str] | Mapping[str, Tensor]) -> Tensor:
    """A [P] float mask over the parameters of an ensemble or a plain module (`named_parameters()`
    names): 1 on every coordinate of each listed name, or, from a dict name → mask of that parameter's
    shape (bool or float, devinterp's `optimize_over`, shared by an ensemble's instances), that mask;
    parameters not named are 0."""
    wanted = dict(names) if isinstance(names, Mapping) else dict.fromkeys([names] if isinstance(names, str) else names)
    flat = layout_of(model)
    unknown = sorted(set(wanted) - set(flat.names))
    if unknown:
        raise ConfigError(f"unknown parameter(s) {', '.join(unknown)}; valid names: {', '.join(flat.names)}")
    out = flat.mask(lambda name: name in wanted and wanted[name] is None)
    for name, part in wanted.items():
        if part is None:
            continue
        i = flat.names.index(name)
        part = torch.as_tensor(part)
        if tuple(part.shape) != flat.shapes[i][1:]:
            raise ConfigError(f"the mask of {name} has shape {tuple(part.shape)}; it must be the parameter's "
                              f"{flat.shapes[i][1:]}")
        out[flat.offsets[i] : flat.offsets[i] + flat.sizes[i]] = part.reshape(-1).to(out)
    return out


def _layer_count(flat: FlatLayout) -> int:
    return sum(1 for name in flat.names if name.startswith("blocks.") and name.endswith(".attn.W_Q"))


def head_mask(model: nn.Module, layer: int, head: int) -> Tensor:
    """A [P] mask on one attention head's own weights: W_Q, W_K, W_V, b_Q, b_K, b_V and W_O at
    [:, head] (the output bias b_O is shared by all heads and left out). Any model whose attention
    weights carry TransformerLens names and shapes has heads: a headway ensemble, or a plain module
    such as a TransformerLens `HookedTransformer`."""
    flat = layout_of(model)
    layers = _layer_count(flat)
    if not layers:
        raise ConfigError(f"{type(model).__name__} has no attention weights named blocks.L.attn.W_Q "
                          "(TransformerLens names); give per-parameter masks with parameter_mask instead")
    if not is_integer(layer) or not 0 <= layer < layers:
        raise ConfigError(f"layer = {layer!r} is invalid; this model has layers 0..{layers - 1}")
    heads = flat.shapes[flat.names.index(f"blocks.{layer}.attn.W_Q")][1]
    if not is_integer(head) or not 0 <= head < heads:
        raise ConfigError(f"head = {head!r} is invalid; layer {layer} has heads 0..{heads - 1}")
    out = torch.zeros(flat.data.shape[1], dtype=flat.data.dtype, device=flat.data.device)
    for leaf in ("W_Q", "W_K", "W_V", "b_Q", "b_K", "b_V", "W_O"):
        i = flat.names.index(f"blocks.{layer}.attn.{leaf}")
        per_head = math.prod(flat.shapes[i][2:])
        start = flat.offsets[i] + head * per_head
        out[start : start + per_head] = 1.0
    return out


WEIGHT_GROUPS = ("all", "heads", "embed", "unembed")


def weight_masks(model: nn.Module, spec: str) -> dict[str, Tensor | None]:
    """Named masks from a comma list of groups: "all" (no mask), "heads" (one per head, "L0H1"),
    "embed" (W_E and W_pos) and "unembed" (W_U and b_U), e.g. "all,heads"."""
    out: dict[str, Tensor | None] = {}
    flat = layout_of(model)
    for group in (part.strip() for part in spec.split(",")):
        if group == "all":
            out["all"] = None
        elif group == "heads":
            if not _layer_count(flat):
                head_mask(model, 0, 0)  # refuses, naming what is missing
            for layer in range(_layer_count(flat)):
                heads = flat.shapes[flat.names.index(f"blocks.{layer}.attn.W_Q")][1]
                out.update({f"L{layer}H{h}": head_mask(model, layer, h) for h in range(heads)})
        elif group == "embed":
            out["embed"] = parameter_mask(model, ["embed.W_E", "pos_embed.W_pos"])
        elif group == "unembed":
            out["unembed"] = parameter_mask(model, ["unembed.W_U", "unembed.b_U"])
        else:
            raise ConfigError(f"weight group {group!r} is unknown; choose from {', '.join(WEIGHT_GROUPS)}")
    return out


# --- sampling ---------------------------------------------------------------------------------


class PoolSampler:
    """Minibatch indices for R rows at once: each row walks through its own random permutations of
    its pool of N examples, B at a time, like a shuffled DataLoader with drop_last: no example
    repeats within a batch, and each is used once per epoch. Holds one [R, N] permutation. With `keep`,
    the keys of all `rows` rows are drawn and only the rows in `keep` are kept (one group of a split run)."""

    def __init__(self, rows: int, pool: int, batch_size: int, generator: torch.Generator,
                 device: torch.device | str = "cpu", keep: slice | None = None) -> None:
        self.rows, self.pool, self.batch_size = rows, pool, batch_size
        self.keep = keep or slice(None)
        self.generator, self.device = generator, device
        self.per_epoch = pool // batch_size
        self.order = torch.empty(rows, 0, dtype=torch.long, device=device)
        self.cursor = self.per_epoch  # draw a permutation on the first call

    def next(self) -> Tensor:
        """[R, B] indices into each row's pool."""
        if self.cursor == self.per_epoch:
            keys = torch.rand(self.rows, self.pool, generator=self.generator)[self.keep]
            self.order = keys.argsort(dim=1).to(self.device)
            self.cursor = 0
        start = self.cursor * self.batch_size
        self.cursor += 1
        return self.order[:, start : start + self.batch_size]


@torch.no_grad()
def sgld_step(flat: FlatParameters, anchor: Tensor, lr: float, nbeta: float, localization: float,
              generator: torch.Generator, mask: Tensor | None = None, live: Tensor | None = None,
              drawn: tuple[int, int] | None = None) -> None:
    """One SGLD step on every row of `flat` from the gradients in `flat.grad` (devinterp 1.x):
    w ← w − ε/2·(nβ·∇L_batch(w) + γ·(w − w*)) + N(0, ε).
    `mask` [P] restricts drift and noise to its coordinates (devinterp's optimize_over); rows where
    `live` [R] is False do not move. With `drawn` (rows, first), noise is drawn for `rows` rows and rows
    first … first + R of it are used: a group of a split run gets the noise the whole run gives it."""
    w = flat.data
    rows, first = drawn or (w.shape[0], 0)
    noise = torch.randn((rows, *w.shape[1:]), generator=generator, device=w.device, dtype=w.dtype)
    update = noise[first : first + w.shape[0]].mul_(math.sqrt(lr))
    update.add_(flat.grad, alpha=-0.5 * lr * nbeta)
    if localization:
        update.add_(w, alpha=-0.5 * lr * localization).add_(anchor, alpha=0.5 * lr * localization)
    if mask is not None:
        update.mul_(mask)
    if live is not None:
        update.masked_fill_(~live.unsqueeze(1), 0.0)  # also clears the NaN of a dead row's gradient
    w.add_(update)


def _generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator, torch.Generator]:
    """Independent streams for the init-loss batches, the SGLD batches (CPU) and the noise (device)."""
    init_seed, batch_seed, noise_seed = (int(s) for s in np.random.SeedSequence(seed).generate_state(3))
    return (torch.Generator().manual_seed(init_seed), torch.Generator().manual_seed(batch_seed),
            torch.Generator(device=device).manual_seed(noise_seed))


def _gather(data: Tensor, instance: Tensor, index: Tensor) -> Tensor:
    """Rows of `data` [E, N, ...] picked per row: out[r, b] = data[instance[r], index[r, b]]."""
    return data[instance.unsqueeze(1), index]


@torch.no_grad()
def _init_loss(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
               generator: torch.Generator, groups: list[tuple[int, int]] | None = None) -> tuple[np.ndarray, np.ndarray]:
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
        means.append(_checked_loss(loss_fn(model, _gather(tokens, instance, index),
                                           _gather(targets, instance, index)), e).double().cpu().numpy())
    return np.stack(means)


def _checked_loss(loss: Tensor, rows: int) -> Tensor:
    if loss.shape != (rows,):
        raise ConfigError(f"loss_fn returned shape {tuple(loss.shape)}; it must return one loss per instance, "
                          f"shape ({rows},)")
    return loss


def _check_pool(tokens: Tensor, targets: Tensor, axes: int, shape: str) -> None:
    """Refuse a pool that is not two tensors with at least `axes` axes (`shape` says which)."""
    for name, value in (("tokens", tokens), ("targets", targets)):
        if not isinstance(value, Tensor) or value.dim() < axes:
            got = tuple(value.shape) if isinstance(value, Tensor) else type(value).__name__
            raise ConfigError(f"{name} is {got}; it must be a tensor {shape}")


def _check_inputs(model: nn.Module, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                  mask: Tensor | None) -> None:
    _check_pool(tokens, targets, 2, "[instances, examples, ...]")
    e, p = model.flat.data.shape
    if tokens.shape[0] != e or targets.shape[0] != e:
        raise ConfigError(f"tokens {tuple(tokens.shape)} and targets {tuple(targets.shape)} must have the "
                          f"model's {e} instances on axis 0")
    if tokens.shape[1] != targets.shape[1]:
        raise ConfigError(f"tokens hold {tokens.shape[1]} examples per instance but targets {targets.shape[1]}")
    if settings.batch_size > tokens.shape[1]:
        raise ConfigError(f"batch_size = {settings.batch_size} is invalid; use at most the pool size "
                          f"{tokens.shape[1]}")
    if mask is not None and mask.shape != (p,):
        raise ConfigError(f"mask has shape {tuple(mask.shape)}; it must be ({p},), one entry per parameter")


def _sample(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
            nbeta: float, mask: Tensor | None, generators: tuple[torch.Generator, torch.Generator],
            progress: bool, desc: str, instances: tuple[int, int] | None = None,
            drawn: tuple[int, int] | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Run every chain of every instance (or of those in [start, stop) of `instances`, whose pools
    `tokens`, `targets` are); returns the draw losses [E·C, draws] (NaN once a chain died), the step at
    which each chain's loss first became non-finite [E·C] (-1: never) and each chain's mean MALA
    acceptance over the steps after burn-in [E·C] (NaN: none scored). `drawn` (rows, first): the
    generators serve `rows` rows, of which these are rows first … (see `sgld_step`)."""
    batch_gen, noise_gen = generators
    chains = settings.chains
    sampler_model = replicate(model, chains, instances)
    flat = sampler_model.flat
    rows = flat.data.shape[0]
    anchor = flat.data.clone()
    device = flat.data.device
    instance = torch.arange(rows, device=tokens.device) // chains
    total, first = drawn or (rows, 0)
    sampler = PoolSampler(total, tokens.shape[1], settings.batch_size, batch_gen, tokens.device,
                          keep=slice(first, first + rows))
    mask = None if mask is None else mask.to(device, flat.data.dtype)
    trace = torch.full((rows, settings.draws), math.nan, dtype=flat.data.dtype, device=device)
    live = torch.ones(rows, dtype=torch.bool, device=device)
    died = torch.full((rows,), -1, dtype=torch.long, device=device)
    mala = MalaScore(flat, anchor, settings.lr, nbeta, settings.localization, mask)
    for step in tqdm(range(settings.steps), desc=desc, disable=not progress):
        index = sampler.next()
        flat.zero_grad()
        loss = _checked_loss(loss_fn(sampler_model, _gather(tokens, instance, index),
                                     _gather(targets, instance, index)), rows)
        try:
            loss.sum().backward()
        except RuntimeError as err:
            raise ConfigError(f"the backward pass of loss_fn failed: {error_line(err)}") from None
        with torch.no_grad():
            loss = loss.detach()
            finite = torch.isfinite(loss)
            died.masked_fill_(live & ~finite, step)
            live &= finite
            after = step - settings.burnin
            if after >= 0 and (after + 1) % settings.steps_between_draws == 0:
                trace[:, after // settings.steps_between_draws] = torch.where(live, loss, math.nan)
            if after >= 0:
                mala.score(loss, live)
            sgld_step(flat, anchor, settings.lr, nbeta, settings.localization, noise_gen, mask, live, drawn)
    return trace, died, mala.mean()


class MalaScore:
    """The MALA acceptance probability of each SGLD step, scored after it is taken (devinterp 1.x's
    MalaAcceptanceRate, batched over rows): with the energy U(w) = nβ·L_B(w) + γ/2·|w − w*|² (the
    minibatch loss of the step at w, as devinterp) and its gradient g, a move w → w' has
    log α = U(w) − U(w') + log q(w | w') − log q(w' | w), q the Gaussian proposal N(w − ε/2·g(w), ε);
    expanded, the log q difference is ½(w' − w)·(g + g') + ε/8·(|g|² − |g'|²), which needs no large
    cancelling sums. Only `mask`'s coordinates count in g (the others do not move)."""

    def __init__(self, flat: FlatParameters, anchor: Tensor, lr: float, nbeta: float, localization: float,
                 mask: Tensor | None) -> None:
        self.flat, self.anchor, self.lr, self.nbeta, self.localization, self.mask = (flat, anchor, lr, nbeta,
                                                                                      localization, mask)
        self.previous: tuple[Tensor, Tensor, Tensor, Tensor] | None = None  # w, g, |g|², U of the last step
        rows = flat.data.shape[0]
        self.total = torch.zeros(rows, dtype=torch.float64, device=flat.data.device)
        self.count = torch.zeros(rows, dtype=torch.float64, device=flat.data.device)

    @torch.no_grad()
    def score(self, loss: Tensor, live: Tensor) -> None:
        """Score the move into the current weights (whose minibatch `loss` [R] and gradient `flat.grad`
        are fresh), then keep them as the start of the next move."""
        w = self.flat.data
        offset = w - self.anchor  # 0 off the mask: those coordinates never move
        drift = self.flat.grad * self.nbeta
        if self.mask is not None:
            drift.mul_(self.mask)
        drift.add_(offset, alpha=self.localization)
        square = drift.square().sum(dim=1).double()
        energy = self.nbeta * loss.double() + 0.5 * self.localization * offset.square().sum(dim=1).double()
        if self.previous is not None:
            before, drift_before, square_before, energy_before = self.previous
            moved = ((w - before) * (drift + drift_before)).sum(dim=1).double()
            log_accept = energy_before - energy + 0.5 * moved + self.lr / 8 * (square_before - square)
            accept = log_accept.clamp(max=0.0).exp()
            ok = live & torch.isfinite(accept)
            self.total += torch.where(ok, accept, 0.0)
            self.count += ok.double()
        self.previous = (w.clone(), drift, square, energy)

    def mean(self) -> Tensor:
        """Mean acceptance per row [R] (NaN where no move was scored)."""
        return self.total / self.count


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

    def instance_warnings(self, index: int) -> list[str]:
        """The diagnostics of one instance, without their "instance e: " prefix."""
        prefix = f"instance {index}: "
        return [w.removeprefix(prefix) for w in self.warnings if w.startswith(prefix)]

    def to_frame(self) -> pd.DataFrame:
        """One row per instance: instance, llc_mean, llc_std, llc_se, init_loss, init_loss_se,
        acceptance, llc_chain{c}, n_warnings and warnings (that instance's diagnostics joined by "; ")."""
        e, c = self.llc_per_chain.shape
        frame = pd.DataFrame({"instance": np.arange(e), "llc_mean": self.llc_mean, "llc_std": self.llc_std,
                              "llc_se": self.llc_se, "init_loss": self.init_loss, "init_loss_se": self.init_loss_se,
                              "acceptance": self.acceptance})
        for chain in range(c):
            frame[f"llc_chain{chain}"] = self.llc_per_chain[:, chain]
        own = [self.instance_warnings(i) for i in range(e)]
        frame["n_warnings"] = [len(messages) for messages in own]
        frame["warnings"] = ["; ".join(messages) for messages in own]
        return frame


def estimate_llc(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                 settings: SGLDSettings, mask: Tensor | None = None, progress: bool = False,
                 desc: str = "LLC", init_loss: tuple[np.ndarray, np.ndarray] | None = None,
                 precision: str = "fp32", max_rows: int | None = None) -> LLCResult:
    """λ̂ = nβ·(mean draw loss − L(w*)) for every instance of `model` (its weights are w*), from
    `settings.chains` SGLD chains each, all run as one batched E·C ensemble (see the module docstring).

    For a headway ensemble, `loss_fn(model, tokens, targets)` returns the per-instance mean loss
    [n_instances] of a batch; `tokens`, `targets` [E, N, ...] are each instance's pool, from which every
    chain draws its own shuffled minibatches. Any other `nn.Module` is one instance: `tokens`, `targets`
    are its pool [N, ...] and `loss_fn(model, inputs, targets)` returns a batch's mean loss, a scalar
    (devinterp's `evaluate`; `model` is callable like the module, on its chain's weights); the module's
    own weights and buffers are never changed (the chains read a copy of its buffers, in the module's
    train/eval mode as it is), and its parameters with requires_grad=False do not move. As in devinterp
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
    then run in groups, all chains of each together, with the numbers of one batch.
    """
    model, loss_fn, tokens, targets, trainable = _prepared(model, loss_fn, tokens, targets, settings, mask, precision)
    if trainable is not None:
        mask = trainable if mask is None else mask.to(trainable) * trainable
    nbeta = default_nbeta(settings.batch_size) if settings.nbeta is None else settings.nbeta
    device = model.flat.data.device
    if device.type == "cpu":
        keep_freed_memory()  # E·C rows of activations per step: fresh pages each step would cost the kernel's time
    groups = instance_groups(model, loss_fn, tokens, targets, settings, max_rows, mask, precision)
    init_gen = _generators(settings.seed, device)[0]
    init, init_se = _init_loss(model, loss_fn, tokens, targets, settings, init_gen, groups) if init_loss is None \
        else (np.asarray(init_loss[0], dtype=float), np.asarray(init_loss[1], dtype=float))
    trace, died, accept = _sample_groups(model, loss_fn, tokens, targets, settings, nbeta, mask, groups, progress, desc)
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
    messages = _diagnose(trace, init, per_chain, mean, died.cpu().numpy().reshape(e, c), acceptance, used)
    return LLCResult(mean, std, per_chain, trace, init, messages, used.to_dict(), init_se, llc_se, acceptance)


def anchor_loss(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
                settings: SGLDSettings, precision: str = "fp32", max_rows: int | None = None
                ) -> tuple[np.ndarray, np.ndarray]:
    """L(w*) per instance [E] and its standard error [E], as `estimate_llc` computes them (same inputs,
    seed and precision): hand them to `estimate_llc(init_loss=...)` to evaluate the pool once for several masks."""
    model, loss_fn, tokens, targets, _ = _prepared(model, loss_fn, tokens, targets, settings, None, precision)
    groups = instance_groups(model, loss_fn, tokens, targets, settings, max_rows, None, precision)
    return _init_loss(model, loss_fn, tokens, targets, settings, _generators(settings.seed, model.flat.data.device)[0],
                      groups)


# --- memory -----------------------------------------------------------------------------------

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
            _sample(model, loss_fn, tokens[:k], targets[:k], probe, nbeta, mask,
                    _generators(probe.seed, device)[1:], False, "", instances=(0, k))

        _footprints[key] = fit_footprint([1, 2], [peak_bytes(lambda k=k: step(k), device) for k in (1, 2)])
    return _footprints[key]


def _sample_groups(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                   nbeta: float, mask: Tensor | None, groups: list[tuple[int, int]], progress: bool,
                   desc: str) -> tuple[Tensor, Tensor, Tensor]:
    """`_sample` of each instance group in turn, every group on fresh copies of the run's generators, joined."""
    device, chains = model.flat.data.device, settings.chains
    if len(groups) == 1:
        return _sample(model, loss_fn, tokens, targets, settings, nbeta, mask, _generators(settings.seed, device)[1:],
                       progress, desc)
    rows = model.flat.data.shape[0] * chains
    parts = [_sample(model, loss_fn, tokens[start:stop], targets[start:stop], settings, nbeta, mask,
                     _generators(settings.seed, device)[1:], progress, f"{desc} {i + 1}/{len(groups)}",
                     instances=(start, stop), drawn=(rows, start * chains))
             for i, (start, stop) in enumerate(groups)]
    return tuple(torch.cat(part) for part in zip(*parts))


def _prepared(model: nn.Module, loss_fn: LossFn | ModuleLossFn, tokens: Tensor, targets: Tensor,
              settings: SGLDSettings, mask: Tensor | None,
              precision: str) -> tuple[nn.Module, LossFn, Tensor, Tensor, Tensor | None]:
    """The checked ensemble, loss (at `precision`) and pool on the model's device (a plain module wrapped
    as a 1-instance `ModuleEnsemble`), and a plain module's trainable-parameter mask."""
    trainable = None
    if not is_ensemble(model):
        _check_pool(tokens, targets, 1, "[examples, ...] (a plain module's pool)")
        trainable = _trainable(model)
        model, loss_fn = ModuleEnsemble.wrap(model, loss_fn), ensemble_loss
        tokens, targets = tokens.unsqueeze(0), targets.unsqueeze(0)
    _check_inputs(model, tokens, targets, settings, mask)
    device = model.flat.data.device
    loss_fn = at_precision(loss_fn, ComputeSettings(precision=precision).resolved_precision(device), device)
    return model, loss_fn, tokens.to(device), targets.to(device), trainable


def _trainable(module: nn.Module) -> Tensor | None:
    """The mask of a plain module's parameters that require grad, None when all do: like devinterp,
    SGLD leaves frozen parameters where they are."""
    names = [name for name, param in module.named_parameters() if param.requires_grad]
    if len(names) == len(list(module.parameters())):
        return None
    if not names:
        raise ConfigError(f"every parameter of {type(module).__name__} has requires_grad=False; SGLD moves only "
                          "trainable parameters")
    return parameter_mask(module, names)


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


# --- diagnostics ------------------------------------------------------------------------------


def _diagnose(trace: np.ndarray, init: np.ndarray, per_chain: np.ndarray, mean: np.ndarray, died: np.ndarray,
              acceptance: np.ndarray, settings: SGLDSettings) -> list[str]:
    """Readable warnings, instance by instance, in the order: non-finite, diverging, climbing,
    disagreeing chains, low MALA acceptance, negative LLC."""
    messages: list[str] = []
    for e in range(trace.shape[0]):
        rise = trace[e] - init[e]
        finite = np.isfinite(per_chain[e])
        messages += _non_finite(e, died[e], settings)
        if finite.any():
            messages += _diverging(e, rise[finite], np.flatnonzero(finite))
            messages += _climbing(e, rise[finite])
            messages += _disagreeing(e, rise[finite], per_chain[e, finite], settings.nbeta)
        if acceptance[e] < MIN_ACCEPTANCE:
            messages.append(f"instance {e}: mean MALA acceptance {acceptance[e]:.3g} < {MIN_ACCEPTANCE:g}: SGLD is not a "
                            "calibrated sampler of the tempered posterior here (too coarse a step or, as nβ "
                            "multiplies it, too much minibatch noise), so λ̂ may be biased; lower lr or raise "
                            "batch_size, and check that λ̂ holds (headway.analysis.sgld_calibration)")
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
