"""LLC estimation speed: headway's batched SGLD against devinterp 1.x and against one-at-a-time runs.

Run: python benchmarks/bench_llc.py [--chains 4] [--draws 100] [--batch-size 256] [--instances 8]
     [--device cpu|cuda] [--repeats 1] [--threads N] [--precision fp32|tf32|bf16|auto]
Model: the list-sorting recipe, a 1-layer attention-only transformer (2 heads, d_model 96, d_head 48,
LayerNorm), d_vocab 52, n_ctx 20, d_out 51, read out at every position, cross-entropy on the last 10,
trained with Adam on headway's sorting data (--train-steps; 1500 bring the loss near 0.002) so that
w* is near a minimum. SGLD: ε 3e-6, γ 1e4, nβ 1e4 (see LR, LOCALIZATION, NBETA).
Part 1: one model, the same settings and chains, headway's `estimate_llc` against devinterp's
`estimate_learning_coeff_with_summary` (cores=1): wall times, their ratio and both estimates; and
the same model handed to `estimate_llc` as a plain nn.Module (chains batched by torch.func).
Part 2: E instances × C chains in one batched call against E·C calls of one instance and one chain.
Ratios are measured in the same run (medians over --repeats, alternating), since machines are noisy.
`--precision` is that of headway's sampling (devinterp has none: it runs in float32); compare the
estimates of both in the printed table before comparing their times.
`--auto N` first chooses the settings for instance 0 within N steps a chain (`choose_settings` from nβ 1e4, the
chains and the batch, the Hessian on 256 pool rows), prints the choice, and runs both parts at it: devinterp
against headway at headway's own calibrated settings; a refused choice ends the run with its reason.
`--compile` runs instead the comparison of headway's batched sampler eager and with its loss compiled
(`estimate_llc(compile_mode="default")`): the first compiled call (compilation included) apart, then --repeats
alternating rounds of both; the speed-up, what the compilation costs, and the largest difference of the estimates.
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import time
import warnings

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from headway.analysis.llc import SGLDSettings, estimate_llc
from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.tasks.sorting.task import SortingConfig, generate
from headway.tasks.objective import run_loss

MODEL = ModelConfig(layers=1, heads=2, d_model=96, d_head=48, d_mlp=0, layernorm=True)
TASK = SortingConfig()
# Chosen on this model trained 1500 Adam steps (loss 0.002): the loss settles near 0.01 (a timing benchmark;
# the settings are not checked on known answers). With
# devinterp's default nβ = B/ln B and γ = 100 the chains leave the basin (loss above a uniform guess).
LR, LOCALIZATION, NBETA = 3e-6, 1e4, 1e4
sorting_loss = run_loss(TASK, "cross_entropy")  # the study's loss: teacher-forced cross-entropy on the sorted positions


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def pool(n: int, instances: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """One sorting pool shared by every instance: tokens [E, n, 20] and targets [E, n, 10]."""
    batch = generate(TASK, n, np.random.default_rng(0))
    tokens = torch.as_tensor(batch.tokens, device=device)
    targets = torch.as_tensor(batch.targets, device=device)
    return tokens.expand(instances, *tokens.shape), targets.expand(instances, *targets.shape)


def trained_ensemble(instances: int, steps: int, tokens: torch.Tensor, targets: torch.Tensor,
                     device: torch.device) -> EnsembleTransformer:
    """`instances` seeds of the model after `steps` Adam steps (lr 1e-3, batch 256) on the pool."""
    model = EnsembleTransformer.from_seeds(MODEL, TASK.d_vocab, TASK.n_ctx, TASK.d_out, list(range(instances)),
                                           device)
    optimiser = torch.optim.Adam(model.parameters(), lr=1e-3)
    g = torch.Generator(device=device).manual_seed(0)
    for _ in range(steps):
        index = torch.randint(0, tokens.shape[1], (256,), generator=g, device=device)
        optimiser.zero_grad()
        sorting_loss(model, tokens[:, index], targets[:, index]).sum().backward()
        optimiser.step()
    return model


def single(model: EnsembleTransformer, index: int) -> EnsembleTransformer:
    """Instance `index` of an ensemble as a 1-instance ensemble."""
    device = model.flat.data.device
    one = EnsembleTransformer(MODEL, TASK.d_vocab, TASK.n_ctx, TASK.d_out, 1, device)
    one.load_instances({name: value.unsqueeze(0) for name, value in model.instance_state(index).items()})
    return one


class Unbatched(nn.Module):
    """A 1-instance ensemble as a plain model for devinterp: [B, 20] → per-position logits."""

    def __init__(self, inner: EnsembleTransformer) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.inner(tokens.unsqueeze(0), readout="all")[0]


class TensorPool(torch.utils.data.Dataset):
    """Tensor pool gathered in one indexing op per batch (`__getitems__`), so devinterp's
    DataLoader does not pay per-example collation."""

    def __init__(self, tokens: torch.Tensor, targets: torch.Tensor) -> None:
        self.tokens, self.targets = tokens, targets

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index):
        return self.tokens[index], self.targets[index]

    def __getitems__(self, indices):
        return self.tokens[indices], self.targets[indices]


def timed(device: torch.device, fn, *args, **kwargs):
    """Seconds that fn(*args, **kwargs) takes on `device`, and its result."""
    sync(device)
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    sync(device)
    return time.perf_counter() - start, out


def plain_loss(model, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy on the sorted positions of a plain model's per-position logits."""
    logits = model(tokens)[:, -targets.shape[-1]:]
    return F.cross_entropy(logits.flatten(0, 1), targets.flatten())


def run_devinterp(model: EnsembleTransformer, tokens: torch.Tensor, targets: torch.Tensor, settings: SGLDSettings,
                  init_loss: float, device: torch.device) -> dict:
    from devinterp.slt.sampler import estimate_learning_coeff_with_summary

    loader = torch.utils.data.DataLoader(TensorPool(tokens[0], targets[0]), batch_size=settings.batch_size,
                                         shuffle=True, collate_fn=lambda pair: pair)
    def evaluate(m, batch):
        return plain_loss(m, *batch)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return estimate_learning_coeff_with_summary(
            Unbatched(model), loader, evaluate=evaluate,
            optimizer_kwargs={"lr": settings.lr, "localization": settings.localization, "nbeta": settings.nbeta},
            num_draws=settings.draws, num_chains=settings.chains, num_burnin_steps=settings.burnin,
            init_loss=init_loss, cores=1, seed=0, device=device, verbose=False)


def part_one(model, tokens, targets, settings, repeats, device, precision) -> dict:
    """headway (as an ensemble and as a plain module) vs devinterp on one model: median seconds of each
    and the estimates."""
    one = single(model, 0)
    ours_s, plain_s, theirs_s = [], [], []
    for _ in range(repeats):
        seconds, ours = timed(device, estimate_llc, one, sorting_loss, tokens[:1], targets[:1], settings,
                              precision=precision)
        ours_s.append(seconds)
        seconds, plain = timed(device, estimate_llc, Unbatched(one), plain_loss, tokens[0], targets[0], settings,
                               precision=precision)
        plain_s.append(seconds)
        seconds, theirs = timed(device, run_devinterp, one, tokens, targets, settings, float(ours.init_loss[0]),
                                device)
        theirs_s.append(seconds)
    return {"headway_s": statistics.median(ours_s), "devinterp_s": statistics.median(theirs_s),
            "plain_s": statistics.median(plain_s), "plain": (plain.llc_mean[0], plain.llc_std[0]),
            "headway": (ours.llc_mean[0], ours.llc_std[0]), "devinterp": (theirs["llc/mean"], theirs["llc/std"]),
            "warnings": ours.warnings}


def part_two(model, tokens, targets, settings, repeats, device, precision) -> dict:
    """E instances × C chains batched vs E·C single-instance, single-chain calls."""
    e, c = model.n_instances, settings.chains
    singles = [single(model, i) for i in range(e)]

    def one_at_a_time():
        return [estimate_llc(singles[i], sorting_loss, tokens[i : i + 1], targets[i : i + 1],
                             dataclasses.replace(settings, chains=1, seed=chain), precision=precision)
                for i in range(e) for chain in range(c)]

    batched_s, sequential_s = [], []
    for _ in range(repeats):
        seconds, batched = timed(device, estimate_llc, model, sorting_loss, tokens, targets, settings,
                                 precision=precision)
        batched_s.append(seconds)
        seconds, _ = timed(device, one_at_a_time)
        sequential_s.append(seconds)
    return {"batched_s": statistics.median(batched_s), "sequential_s": statistics.median(sequential_s),
            "llc": batched.llc_mean}


def part_compiled(model, tokens, targets, settings, repeats, device, precision) -> dict:
    """E instances × C chains batched, eager against the loss compiled: the first compiled call (with the
    compilation), then median seconds of `repeats` alternating rounds, and both estimates."""
    first_s, _ = timed(device, estimate_llc, model, sorting_loss, tokens, targets, settings, precision=precision,
                       compile_mode="default")
    eager_s, compiled_s = [], []
    for _ in range(repeats):
        seconds, eager = timed(device, estimate_llc, model, sorting_loss, tokens, targets, settings,
                               precision=precision)
        eager_s.append(seconds)
        seconds, compiled = timed(device, estimate_llc, model, sorting_loss, tokens, targets, settings,
                                  precision=precision, compile_mode="default")
        compiled_s.append(seconds)
    return {"first_s": first_s, "eager_s": statistics.median(eager_s), "compiled_s": statistics.median(compiled_s),
            "eager": eager.llc_mean, "compiled": compiled.llc_mean}


def chosen_settings(model: EnsembleTransformer, tokens: torch.Tensor, targets: torch.Tensor, base: SGLDSettings,
                    budget: int, precision: str) -> SGLDSettings:
    """The settings `choose_settings` picks for instance 0 within `budget` steps a chain (L(w*) as `base`'s); a
    refusal ends the run with its reason."""
    from headway.analysis.llc.auto import choose_settings
    from headway.analysis.llc.resolution import RESOLUTION_ROWS

    choice = choose_settings(single(model, 0), sorting_loss, tokens[:1], targets[:1], base=base, max_steps=budget,
                             precision=precision, rows=RESOLUTION_ROWS)
    print(f"auto ({budget} steps a chain): {choice.reason}", flush=True)
    if choice.settings is None:
        raise SystemExit("no setting qualified; nothing to compare")
    return choice.settings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--draws", type=int, default=100)
    parser.add_argument("--burnin", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--instances", type=int, default=8)
    parser.add_argument("--pool", type=int, default=8192, help="examples in the data pool")
    parser.add_argument("--train-steps", type=int, default=300, help="Adam steps before sampling")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=1, help="alternating rounds; the median is reported")
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--precision", default="fp32", help="headway's sampling precision: fp32, tf32, bf16, auto")
    parser.add_argument("--compile", action="store_true",
                        help="compare the batched sampler eager and compiled (instead of parts 1 and 2)")
    parser.add_argument("--auto", type=int, default=None, metavar="N",
                        help="choose the settings for instance 0 within N SGLD steps a chain, then compare at them")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    settings = SGLDSettings(lr=LR, localization=LOCALIZATION, nbeta=NBETA, chains=args.chains, draws=args.draws,
                            burnin=args.burnin, batch_size=args.batch_size, init_loss_batches=16,
                            init_batch_size=args.batch_size)  # L(w*) as when RESULTS.md was measured
    tokens, targets = pool(args.pool, args.instances, device)
    model = trained_ensemble(args.instances, args.train_steps, tokens, targets, device)
    if args.auto is not None:
        settings = chosen_settings(model, tokens, targets, settings, args.auto, args.precision)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"cpu, {torch.get_num_threads()} threads"
    print(f"device: {device} ({where}); torch {torch.__version__}; {settings.chains} chains × {settings.draws} draws "
          f"(burn-in {settings.burnin}), batch {settings.batch_size}, ε {settings.lr:g}, γ {settings.localization:g}, "
          f"nβ {settings.nbeta:.2f}; {args.train_steps} Adam steps before sampling; headway at {args.precision}")
    if args.compile:
        report_compiled(part_compiled(model, tokens, targets, settings, args.repeats, device, args.precision),
                        args.instances, settings)
        return
    one = part_one(model, tokens, targets, settings, args.repeats, device, args.precision)
    print(f"part 1: headway {one['headway_s']:.2f} s, LLC {one['headway'][0]:.2f} ± {one['headway'][1]:.2f}; "
          f"as a plain module {one['plain_s']:.2f} s, LLC {one['plain'][0]:.2f} ± {one['plain'][1]:.2f}; "
          f"devinterp {one['devinterp_s']:.2f} s, LLC {one['devinterp'][0]:.2f} ± {one['devinterp'][1]:.2f}; "
          f"headway warnings: {one['warnings'] or 'none'}", flush=True)
    two = part_two(model, tokens, targets, settings, args.repeats, device, args.precision)
    print(f"part 2: {args.instances} × {args.chains} batched {two['batched_s']:.2f} s; one at a time "
          f"{two['sequential_s']:.2f} s; LLC per instance {np.round(two['llc'], 2).tolist()}")
    print()
    print("| comparison | headway batched (s) | other (s) | speed-up | LLC headway | LLC other |")
    print("|---|---|---|---|---|---|")
    print(f"| 1 model × {args.chains} chains vs devinterp 1.x | {one['headway_s']:.2f} | {one['devinterp_s']:.2f} | "
          f"{one['devinterp_s'] / one['headway_s']:.2f}× | {one['headway'][0]:.2f} ± {one['headway'][1]:.2f} | "
          f"{one['devinterp'][0]:.2f} ± {one['devinterp'][1]:.2f} |")
    print(f"| 1 plain nn.Module × {args.chains} chains (torch.func) vs devinterp 1.x | {one['plain_s']:.2f} | "
          f"{one['devinterp_s']:.2f} | {one['devinterp_s'] / one['plain_s']:.2f}× | {one['plain'][0]:.2f} ± "
          f"{one['plain'][1]:.2f} | {one['devinterp'][0]:.2f} ± {one['devinterp'][1]:.2f} |")
    print(f"| {args.instances} instances × {args.chains} chains vs {args.instances * args.chains} single runs | "
          f"{two['batched_s']:.2f} | {two['sequential_s']:.2f} | {two['sequential_s'] / two['batched_s']:.2f}× | "
          f"{np.nanmean(two['llc']):.2f} (mean of instances) | – |")



def report_compiled(result: dict, instances: int, settings: SGLDSettings) -> None:
    """The compiled-sampler comparison as a line and a RESULTS.md row."""
    gain = result["eager_s"] - result["compiled_s"]
    paid_back = result["first_s"] - result["compiled_s"]
    payback = f"compilation paid back after {paid_back / gain:.1f} calls" if gain > 0 else "compiled is not faster"
    print(f"compiled: first call {result['first_s']:.1f} s (with the compilation), then {result['compiled_s']:.2f} s; "
          f"eager {result['eager_s']:.2f} s; {payback}")
    difference = np.nanmax(np.abs(result["compiled"] - result["eager"]) / np.abs(result["eager"]))
    print()
    print("| comparison | compiled (s) | eager (s) | speed-up | first compiled call (s) | max relative Δλ̂ |")
    print("|---|---|---|---|---|---|")
    print(f"| {instances} instances × {settings.chains} chains × {settings.steps} steps, loss compiled vs eager | "
          f"{result['compiled_s']:.2f} | {result['eager_s']:.2f} | {result['eager_s'] / result['compiled_s']:.2f}× | "
          f"{result['first_s']:.1f} | {difference:.1e} |")


if __name__ == "__main__":
    main()
