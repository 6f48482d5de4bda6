"""SGLD over every chain of every instance at once: minibatch indices per row (`PoolSampler`), the update
(`sgld_step`), the sampling loop (`sample`, `sample_groups`) and the MALA acceptance of its steps
(`MalaScore`).

Batching: for E instances and C chains the model is replicated into one ensemble of E·C instances,
instance-major (row e·C + c is chain c of instance e), so every chain is just another instance:
one forward and backward of the E·C model per SGLD step gives every chain's loss and gradient, and
the update is a few whole-buffer ops on the flat [E·C, P] weights (`FlatParameters`). Minibatch
indices for all rows come from one generator call, and each row reads only its instance's pool.
No Python loop runs over chains or instances while sampling.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from torch import Tensor, nn

from headway.analysis.llc.prepare import checked_loss
from headway.analysis.llc.replication import replicate
from headway.analysis.llc.settings import LossFn, SGLDSettings
from headway.analysis.llc.module_ensemble import error_line
from headway.compute import Compiled
from headway.errors import ConfigError
from headway.model.flat import FlatParameters
from headway.progress import tracked


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
              drawn: tuple[int, int] | None = None, metric: Tensor | None = None) -> None:
    """One SGLD step on every row of `flat` from the gradients in `flat.grad` (devinterp 1.x):
    w ← w − ε/2·(nβ·∇L_batch(w) + γ·(w − w*)) + N(0, ε); with a fixed diagonal `metric` P [R, P]
    (`precondition`), w ← w − ε/2·P·(…) + N(0, ε·P).
    `mask` [P] restricts drift and noise to its coordinates (devinterp's optimize_over); rows where
    `live` [R] is False do not move. With `drawn` (rows, first), noise is drawn for `rows` rows and rows
    first … first + R of it are used: a group of a split run gets the noise the whole run gives it."""
    w = flat.data
    rows, first = drawn or (w.shape[0], 0)
    noise = torch.randn((rows, *w.shape[1:]), generator=generator, device=w.device, dtype=w.dtype)
    update = noise[first : first + w.shape[0]].mul_(math.sqrt(lr))
    if metric is None:
        update.add_(flat.grad, alpha=-0.5 * lr * nbeta)
        if localization:
            update.add_(w, alpha=-0.5 * lr * localization).add_(anchor, alpha=0.5 * lr * localization)
    else:
        drift = flat.grad.mul(nbeta)
        if localization:
            drift.add_(w, alpha=localization).add_(anchor, alpha=-localization)
        update.mul_(metric.sqrt()).addcmul_(drift, metric, value=-0.5 * lr)
    if mask is not None:
        update.mul_(mask)
    if live is not None:
        update.masked_fill_(~live.unsqueeze(1), 0.0)  # also clears the NaN of a dead row's gradient
    w.add_(update)


def seeded_generators(seed: int, device: torch.device) -> tuple[torch.Generator, torch.Generator, torch.Generator]:
    """Independent streams for the init-loss batches, the SGLD batches (CPU) and the noise (device)."""
    init_seed, batch_seed, noise_seed = (int(s) for s in np.random.SeedSequence(seed).generate_state(3))
    return (torch.Generator().manual_seed(init_seed), torch.Generator().manual_seed(batch_seed),
            torch.Generator(device=device).manual_seed(noise_seed))


def gather(data: Tensor, instance: Tensor, index: Tensor) -> Tensor:
    """Rows of `data` [E, N, ...] picked per row: out[r, b] = data[instance[r], index[r, b]]."""
    return data[instance.unsqueeze(1), index]


def sample(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
           nbeta: float, mask: Tensor | None, generators: tuple[torch.Generator, torch.Generator],
           progress: bool, desc: str, instances: tuple[int, int] | None = None,
           drawn: tuple[int, int] | None = None, metric: Tensor | None = None,
           compile_mode: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """Run every chain of every instance (or of those in [start, stop) of `instances`, whose pools
    `tokens`, `targets` are); returns the draw losses [E·C, draws] (NaN once a chain died), the step at
    which each chain's loss first became non-finite [E·C] (-1: never) and each chain's mean MALA
    acceptance over the steps after burn-in [E·C] (NaN: none scored). `drawn` (rows, first): the
    generators serve `rows` rows, of which these are rows first … (see `sgld_step`). `metric` [E, P]: each
    instance's fixed diagonal metric (`precondition.diagonal_preconditioner`), shared by its chains. `compile_mode`
    (a `torch.compile` mode; None: eager) compiles the loss, its backward with it, falling back to eager with a
    warning where compiling fails (`headway.compute.Compiled`)."""
    batch_gen, noise_gen = generators
    chains = settings.chains
    if compile_mode is not None:
        loss_fn = Compiled(loss_fn, "LLC sampler's loss", compile_mode)
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
    if metric is not None:
        metric = metric.to(device, flat.data.dtype).repeat_interleave(chains, dim=0)
    trace = torch.full((rows, settings.draws), math.nan, dtype=flat.data.dtype, device=device)
    live = torch.ones(rows, dtype=torch.bool, device=device)
    died = torch.full((rows,), -1, dtype=torch.long, device=device)
    mala = MalaScore(flat, anchor, settings.lr, nbeta, settings.localization, mask, metric)
    for step in tracked(range(settings.steps), desc, "step", enabled=progress):
        index = sampler.next()
        flat.zero_grad()
        loss = checked_loss(loss_fn(sampler_model, gather(tokens, instance, index),
                                    gather(targets, instance, index)), rows)
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
            sgld_step(flat, anchor, settings.lr, nbeta, settings.localization, noise_gen, mask, live, drawn, metric)
    return trace, died, mala.mean()


def sample_groups(model: nn.Module, loss_fn: LossFn, tokens: Tensor, targets: Tensor, settings: SGLDSettings,
                  nbeta: float, mask: Tensor | None, groups: list[tuple[int, int]], progress: bool,
                  desc: str, metric: Tensor | None = None,
                  compile_mode: str | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """`sample` of each instance group in turn, every group on fresh copies of the run's generators, joined
    (`metric` [E, P]: the instances' fixed diagonal metrics, or None; `compile_mode` as `sample`'s)."""
    device, chains = model.flat.data.device, settings.chains
    if len(groups) == 1:
        return sample(model, loss_fn, tokens, targets, settings, nbeta, mask,
                      seeded_generators(settings.seed, device)[1:], progress, desc, metric=metric,
                      compile_mode=compile_mode)
    rows = model.flat.data.shape[0] * chains
    parts = [sample(model, loss_fn, tokens[start:stop], targets[start:stop], settings, nbeta, mask,
                    seeded_generators(settings.seed, device)[1:], progress, f"{desc} {i + 1}/{len(groups)}",
                    instances=(start, stop), drawn=(rows, start * chains),
                    metric=None if metric is None else metric[start:stop], compile_mode=compile_mode)
             for i, (start, stop) in enumerate(groups)]
    return tuple(torch.cat(part) for part in zip(*parts))


class MalaScore:
    """The MALA acceptance probability of each SGLD step, scored after it is taken (devinterp 1.x's
    MalaAcceptanceRate, batched over rows): with the energy U(w) = nβ·L_B(w) + γ/2·|w − w*|² (the
    minibatch loss of the step at w, as devinterp) and its gradient g, a move w → w' has
    log α = U(w) − U(w') + log q(w | w') − log q(w' | w), q the Gaussian proposal N(w − ε/2·g(w), ε);
    expanded, the log q difference is ½(w' − w)·(g + g') + ε/8·(|g|² − |g'|²), which needs no large
    cancelling sums. Only `mask`'s coordinates count in g (the others do not move). With a diagonal `metric` P
    [R, P] the proposal is N(w − ε/2·P·g(w), ε·P) and |g|² becomes g·P·g; the rest is unchanged."""

    def __init__(self, flat: FlatParameters, anchor: Tensor, lr: float, nbeta: float, localization: float,
                 mask: Tensor | None, metric: Tensor | None = None) -> None:
        self.flat, self.anchor, self.lr, self.nbeta, self.localization, self.mask = (flat, anchor, lr, nbeta,
                                                                                      localization, mask)
        self.metric = metric
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
        square = (drift.square() if self.metric is None else drift.square().mul_(self.metric)).sum(dim=1).double()
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

