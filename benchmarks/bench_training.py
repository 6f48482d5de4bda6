"""Training throughput of an ensemble of E small transformers, four ways, in one run.

Ways (each trains the same E models on the same batches, from the same initial weights):
  headway  the E models as one headway ensemble, through the real trainer step
           (`EnsembleTrainer.train_step`: batch sampling, forward, backward, divergence checks, optimiser);
  plain    E ordinary single-model PyTorch modules (benchmarks/plain_model.py), each with its own
           torch.optim.AdamW, stepped one after another: what one writes without headway;
  func     the same plain module, E copies stacked with torch.func.stack_module_state, the loss of all
           of them by vmap over functional_call, one torch.optim.AdamW over the stacked tensors
           (PyTorch's documented model-ensembling recipe), attention through SDPA;
  func-explicit  the same with attention written out (matmul, mask, softmax): vmap has no batching rule
           for SDPA on the CPU and runs it as a loop, so this is that recipe's fastest form there.
Every way draws its batches from the headway trainer's EnsembleData (instance e gets exactly the batch
it would get alone) and uses AdamW with the run's learning rate, betas, eps and weight decay on the
weight matrices only. The baselines take their fastest form unless --ordinary-baselines: the final block
at the last position only (headway's shortcut) and torch's fused AdamW.

The ways alternate round by round (the order rotating each round), each round being two warm-up steps
and --steps timed steps of every way; the median and the spread (min–max) over rounds are reported.

Also measured in the same run: the dense matmul peak (float32 on the CPU; float32, TF32 and bfloat16
on CUDA), and each way's training FLOP/s (FLOPs of one real headway step counted by torch's
FlopCounterMode, so every way is credited with the same useful work) as a fraction of the peak of its
precision; the ratio of headway to every baseline and to the fastest one measured in the run; and the
wall time the paper's depth grid would take at the rate headway reached at the paper shape and the largest ensemble size measured.

Run: python benchmarks/bench_training.py [--device cpu|cuda] [--shapes paper,cpu] [--ensemble-sizes 1,8,32,64]
     [--rounds N] [--steps N] [--ways headway,plain,func,func-explicit] [--precision auto|fp32|tf32|bf16]
     [--compile auto|on|off] [--attention-kernel auto|sdpa|matmul] [--compile-baselines] [--ordinary-baselines]
Prints markdown table rows (for benchmarks/RESULTS.md) after a header line naming the device, torch,
threads and peaks.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import platform
import statistics
import warnings
from collections.abc import Iterator

import torch
import torch._dynamo
from torch import Tensor
from torch.func import functional_call, stack_module_state, vmap
from torch.utils.flop_counter import FlopCounterMode

from headway.compute import ATTENTION_CHOICES, COMPILE_MODES, PRECISIONS, Compiled, ComputeSettings
from headway.runs.config import RunConfig
from headway.train.data import EnsembleData
from common import SHAPES, WARMUP, HeadwayWay, Way, make_trainer, matmul_peak, matmul_precision, runs_for, timed
from plain_model import PlainTransformer, decay_groups, from_instance, mse_readout_loss


WAYS = ("headway", "plain", "func", "func-explicit")
BASELINES = WAYS[1:]


@contextlib.contextmanager
def baseline_precision(precision: str, device: torch.device) -> Iterator[None]:
    """The plain and func ways' forward and loss at `precision`: bf16 autocast, TF32 or float32."""
    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    else:
        with matmul_precision("high" if precision == "tf32" else "highest"):
            yield


def measure_peaks(device: torch.device, precision: str) -> dict[str, float]:
    """Matmul peaks by precision name: fp32 always; tf32 and bf16 on CUDA; bf16 on the CPU when asked for."""
    peaks = {"fp32": matmul_peak(device)}
    if device.type == "cuda":
        peaks["tf32"] = matmul_peak(device, tf32=True)
    if device.type == "cuda" or precision == "bf16":
        peaks["bf16"] = matmul_peak(device, torch.bfloat16)
    return peaks


def resolve_precision(requested: str, device: torch.device) -> str:
    """The precision every way runs at: headway's resolution of `requested` on `device`."""
    return ComputeSettings(precision=requested).resolved_precision(device)


def adamw(groups: list[dict], run: RunConfig, fused: bool = True) -> torch.optim.AdamW:
    """torch.optim.AdamW with the run's learning rate, betas and eps (weight decay set per group); `fused`
    takes torch's fused implementation (its fastest on CPU and CUDA), else torch's default one."""
    cfg = run.train
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=fused or None)


def check_plain_run(run: RunConfig) -> None:
    """Refuse settings the plain baselines do not implement (they train like the benchmark's shapes)."""
    cfg, task = run.train, run.task
    if cfg.optimizer != "adamw" or cfg.loss != "mse" or cfg.grad_clip > 0 or cfg.schedule != "constant":
        raise ValueError("the plain baselines train with AdamW, an MSE loss, a constant learning rate and no clipping")
    if task.train_targets_masked:
        raise ValueError("the plain baselines do not implement masked (dense) supervision")


class PlainLoop(Way):
    """E plain models, each with its own torch.optim.AdamW, stepped one after another."""

    name = "plain"

    def __init__(self, models: list[PlainTransformer], data: EnsembleData, run: RunConfig, precision: str,
                 device: torch.device, compiled: bool = False, fused_adamw: bool = True) -> None:
        super().__init__()
        check_plain_run(run)
        self.models, self.data, self.precision, self.device = models, data, precision, device
        self.vocab, self.positions = run.task.vocab, run.task.train_readout_positions
        self.optims = [adamw(decay_groups(m.named_parameters(), run.train.weight_decay), run, fused_adamw)
                       for m in models]
        self.loss_fn = Compiled(self.model_loss, "plain loss") if compiled else self.model_loss

    def model_loss(self, model: PlainTransformer, tokens: Tensor, targets: Tensor) -> Tensor:
        """One model's mean loss on its batch (tokens [B, pos(, slots)], targets [B, T])."""
        return mse_readout_loss(model(tokens, self.positions), targets, self.vocab)

    def step(self, step: int) -> None:
        """Every model's batch of `step`, then forward, backward and AdamW step, model by model."""
        tokens, targets = self.data.train_batch(step)
        for e, (model, optim) in enumerate(zip(self.models, self.optims)):
            optim.zero_grad(set_to_none=True)
            with baseline_precision(self.precision, self.device):
                loss = self.loss_fn(model, tokens[e], targets[e])
            loss.backward()
            optim.step()

    @torch.no_grad()
    def losses(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """Every model's loss [E] on its own batch."""
        with baseline_precision(self.precision, self.device):
            return torch.stack([self.model_loss(m, tokens[e], targets[e]) for e, m in enumerate(self.models)])


class FuncEnsemble(Way):
    """E copies of the plain model stacked by torch.func, their losses by vmap over functional_call, and
    one torch.optim.AdamW over the stacked parameters."""

    name = "func"

    def __init__(self, models: list[PlainTransformer], data: EnsembleData, run: RunConfig, precision: str,
                 device: torch.device, compiled: bool = False, fused_adamw: bool = True) -> None:
        super().__init__()
        check_plain_run(run)
        self.data, self.precision, self.device = data, precision, device
        self.vocab, self.positions = run.task.vocab, run.task.train_readout_positions
        self.params, self.buffers = stack_module_state(models)  # copies: [E, ...] leaves that take gradients
        self.base = copy.deepcopy(models[0]).to("meta")  # structure only; weights come from self.params
        # stacked weight matrices have 3 or more dims (the instance axis first)
        self.optim = adamw(decay_groups(self.params, run.train.weight_decay, matrix_dim=3), run, fused_adamw)
        batched = vmap(self.one_loss)
        self.batched = Compiled(batched, "vmapped loss") if compiled else batched
        self.notes: set[str] = set()  # torch's warnings of the first step (e.g. ops vmap runs as a loop)
        self.first = True

    def one_loss(self, params: dict[str, Tensor], buffers: dict[str, Tensor], tokens: Tensor,
                 targets: Tensor) -> Tensor:
        """One copy's mean loss: the plain module called with that copy's weights."""
        out = functional_call(self.base, (params, buffers), (tokens, self.positions))
        return mse_readout_loss(out, targets, self.vocab)

    def batch_losses(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """Losses [E] of every copy on its own batch (tokens [E, B, ...], targets [E, B, T])."""
        with baseline_precision(self.precision, self.device):
            return self.batched(self.params, self.buffers, tokens, targets)

    def step(self, step: int) -> None:
        """One forward and backward of all copies together, then one AdamW step over the stacks."""
        tokens, targets = self.data.train_batch(step)
        self.optim.zero_grad(set_to_none=True)
        with warnings.catch_warnings(record=True) as caught:
            if self.first:
                warnings.simplefilter("always")
            self.batch_losses(tokens, targets).sum().backward()
        if self.first:
            self.notes |= {str(w.message).split(". Please")[0] for w in caught}
            self.first = False
        self.optim.step()

    @torch.no_grad()
    def losses(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """Every copy's loss [E] on its own batch."""
        return self.batch_losses(tokens, targets)


def build_ways(runs: list[RunConfig], device: torch.device, names: list[str], precision: str, compile_mode: str,
               compile_baselines: bool = False, ordinary: bool = False, attention: str = "auto") -> dict[str, Way]:
    """The requested ways for `runs`, all from the same initial weights and the same EnsembleData;
    `precision`, `compile_mode` and `attention` as given on the command line (the baselines run at the
    precision headway resolves it to). The baselines take their fastest form (the final block at the last
    position only, fused AdamW) unless `ordinary` (every position, torch's default AdamW)."""
    headway = HeadwayWay(make_trainer(runs, device, precision, compile_mode, attention))
    resolved = resolve_precision(precision, device)
    ways: dict[str, Way] = {}
    for name in names:
        if name == "headway":
            ways[name] = headway
        else:
            kernel = "explicit" if name.endswith("-explicit") else "sdpa"
            models = [from_instance(headway.model, e, last_only=not ordinary, attention=kernel)
                      for e in range(len(runs))]
            kind = PlainLoop if name == "plain" else FuncEnsemble
            ways[name] = kind(models, headway.data, runs[0], resolved, device, compile_baselines,
                              fused_adamw=not ordinary)
    return ways


def model_step_flops(settings: dict, device: torch.device, precision: str) -> int:
    """FLOPs of one model's training step: FlopCounterMode over one real step of a one-instance headway
    ensemble (uncompiled; an ensemble of E does exactly E times this work)."""
    trainer = make_trainer(runs_for(settings, 1), device, precision, "off")
    data, model, optim, state = trainer.setup()
    with FlopCounterMode(display=False) as counter:
        trainer.train_step(model, data, optim, state, 0)
    return counter.get_total_flops()


def ratio_cell(times: dict[str, list[float]], way: str) -> str:
    """'ratio× (min–max per round)' of `way`'s time over headway's, or — when either is missing."""
    if "headway" not in times or way not in times:
        return "—"
    per_round = [b / a for a, b in zip(times["headway"], times[way])]
    ratio = statistics.median(times[way]) / statistics.median(times["headway"])
    return f"{ratio:.2f}× ({min(per_round):.2f}–{max(per_round):.2f})"


def fastest_cell(times: dict[str, list[float]], ways: list[str]) -> str:
    """headway's speed over the fastest baseline measured here (by median time), naming it."""
    measured = [w for w in ways if w in times]
    if "headway" not in times or not measured:
        return "—"
    fastest = min(measured, key=lambda w: statistics.median(times[w]))
    return f"{ratio_cell(times, fastest)} vs {fastest}"


def spread(values: list[float], fmt: str = ".2f") -> str:
    """'median (min–max)' of `values`."""
    return f"{statistics.median(values):{fmt}} ({min(values):{fmt}}–{max(values):{fmt}})"


def failure_row(shape: str, size: int, what: str, err: Exception) -> str:
    """A table row saying that `what` failed, with the error's first line."""
    message = (str(err).strip().splitlines() or [""])[0][:160]
    return f"| {shape} | {size} | {what} | failed: {type(err).__name__}: {message} | | | |"


def bench(shape: str, size: int, device: torch.device, args: argparse.Namespace,
          notes: set[str]) -> dict[str, list[float]]:
    """Seconds per round of every requested way at one shape and ensemble size; a way that fails
    (e.g. out of memory) is reported and left out of the rest of the run. Adds torch's warnings
    about the func way, and the attention kernel headway used, to `notes`."""
    runs = runs_for(SHAPES[shape], size)
    try:
        ways = build_ways(runs, device, args.ways, args.precision, args.compile,
                          args.compile_baselines, args.ordinary_baselines, args.attention_kernel)
    except Exception as err:  # noqa: BLE001 - report it and go on with the next size
        print(failure_row(shape, size, "setup of " + ",".join(args.ways), err), flush=True)
        release(device)
        return {}
    if "headway" in ways:
        notes.add(f"headway's attention kernel in training steps at the {shape} shape: "
                  f"{ways['headway'].trainer.attention_kernel}")
    times: dict[str, list[float]] = {name: [] for name in ways}
    order = list(ways)
    for r in range(args.rounds):
        shift = r % len(order)
        for name in order[shift:] + order[:shift]:
            if name not in ways:
                continue
            try:
                times[name].append(timed(ways[name], args.steps, device))
            except Exception as err:  # noqa: BLE001 - report it and measure the other ways
                print(failure_row(shape, size, name, err), flush=True)
                del ways[name]
                times.pop(name)
    for way in ways.values():
        if isinstance(way, FuncEnsemble):
            notes |= {f"(torch, func way) {note}" for note in way.notes}
    del ways
    release(device)
    return times


def release(device: torch.device) -> None:
    """Between measurements: forget compiled graphs (each shape and E compiles its own, and torch keeps only
    a few per function) and give cached device memory back."""
    torch._dynamo.reset()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def project_depth_grid(rate: float, size: int, flops_per_model_step: int) -> str:
    """The paper depth grid's projected training wall time at headway's measured rate, with its assumptions."""
    from headway.runs.cost import training_flops
    from headway.studies.retrieval.plan import study_plan

    grid = study_plan("paper").grids()["depth"]
    total = sum(training_flops(run) for run in grid)
    bench_run = runs_for(SHAPES["paper"], 1)[0]
    formula_per_step = training_flops(bench_run) / bench_run.train.steps
    units = formula_per_step / flops_per_model_step
    hours = total / rate / 3600
    return (f"Projection: the paper depth grid (study_plan('paper').grids()['depth'], {len(grid)} runs, "
            f"{total / 1e15:.0f} PFLOP by headway.runs.cost.training_flops) would take {hours:.1f} h of training "
            f"on this device at the {rate / 1e9:.1f} GFLOP/s headway reached at the paper shape with E = {size}, "
            f"assuming every run of the grid trains at that FLOP rate (the grid has 1–8 layers, D up to 14 and "
            f"vocab 64; the benchmark shape 2 layers, D = 4, vocab 32) and leaving out evaluation, checkpoints "
            f"and data generation. training_flops counts {units:.2f}× the FLOPs FlopCounterMode counts for the "
            f"benchmark's paper shape (among other things it counts every position of the final block, which "
            f"headway computes at the last position only), so at the same steps/s "
            f"in training_flops' own units the grid would take {hours / units:.1f} h.")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(
        description="Training throughput of an ensemble of E transformers four ways: headway's ensemble trainer, "
                    "a plain PyTorch loop over E models, and torch.func (vmap) ensembling with SDPA or written-out "
                    "attention. Prints markdown rows.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Output: a header line (device, torch, threads, matmul peaks, precision, compilation), then one "
               "row per shape, E and way: steps/s (median and min–max over rounds), model-steps/s (E × steps/s), "
               "GFLOP/s (headway's FLOPs per model-step, counted by FlopCounterMode, × model-steps/s) and its "
               "fraction of the matmul peak of the precision used; then headway's speed over every baseline and "
               "over the fastest one, per shape and E; then the projected training time of the paper depth grid at headway's "
               "rate (paper shape, largest E). With --device cuda the device is synchronised around every "
               "timing.")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu",
                        help="device to train on")
    parser.add_argument("--shapes", default="paper,cpu",
                        help=f"comma list of model/task shapes, from {', '.join(SHAPES)} "
                             "(paper: 2 layers, 8 heads, width 128, batch 512, D=4 K=4; cpu: 2 layers, 4 heads, "
                             "width 64, batch 128, D=2 K=4)")
    parser.add_argument("--ensemble-sizes", default="8",
                        help="comma list of ensemble sizes E (e.g. 1,8,32,64); each is measured for every shape")
    parser.add_argument("--rounds", type=int, default=3,
                        help="alternating rounds (the order of the ways rotates each round); median and min–max "
                             "over rounds are reported")
    parser.add_argument("--steps", type=int, default=10, help=f"timed training steps per way per round (after "
                                                                f"{WARMUP} warm-up steps)")
    parser.add_argument("--ways", default=",".join(WAYS),
                        help="comma list of ways: headway (ensemble trainer), plain (E torch models and AdamWs "
                             "one after another), func (torch.func stack_module_state + vmap, one AdamW, SDPA "
                             "attention), func-explicit (the same with attention written out)")
    parser.add_argument("--precision", choices=PRECISIONS, default="auto",
                        help="headway's ComputeSettings precision; the "
                             "plain and func ways run at the same resolved precision (bf16: torch.autocast)")
    parser.add_argument("--compile", choices=COMPILE_MODES, default="auto",
                        help="headway's ComputeSettings compile mode (graphs: CUDA graphs too, CUDA only)")
    parser.add_argument("--compile-baselines", action="store_true",
                        help="also torch.compile the plain and func ways' forward and loss (else they run eagerly)")
    parser.add_argument("--attention-kernel", choices=ATTENTION_CHOICES, default="auto",
                        help="headway's ComputeSettings attention kernel (auto: by device and shape)")
    parser.add_argument("--ordinary-baselines", action="store_true",
                        help="the plain and func ways as one ordinarily writes them: every position of the final "
                             "block computed and torch's default AdamW; by default they take their fastest form, "
                             "the final block at the last position only (headway's shortcut) and fused AdamW")
    args = parser.parse_args(argv)
    args.shapes = [s for s in args.shapes.split(",") if s]
    args.ways = [w for w in args.ways.split(",") if w]
    args.ensemble_sizes = [int(n) for n in args.ensemble_sizes.split(",") if n]
    for shape in args.shapes:
        if shape not in SHAPES:
            parser.error(f"unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
    for way in args.ways:
        if way not in WAYS:
            parser.error(f"unknown way {way!r}; choose from {', '.join(WAYS)}")
    if not args.ways or not args.shapes or not args.ensemble_sizes or min(args.ensemble_sizes) < 1:
        parser.error("give at least one way, one shape and ensemble sizes >= 1")
    if args.rounds < 1 or args.steps < 1:
        parser.error("--rounds and --steps must be at least 1")
    if args.device == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda: no CUDA device is available")
    try:
        resolve_precision(args.precision, torch.device(args.device))
    except Exception as err:  # noqa: BLE001 - e.g. tf32 off CUDA: a usage error
        parser.error(str(err))
    return args


def main(argv: list[str] | None = None) -> None:
    """Measure and print the header, one row per shape, ensemble size and way, the ratios and the projection."""
    args = parse_args(argv)
    device = torch.device(args.device)
    precision = resolve_precision(args.precision, device)
    peaks = measure_peaks(device, precision)
    peak = peaks[precision]
    where = (torch.cuda.get_device_name(device) if device.type == "cuda"
             else f"{platform.processor() or platform.machine()}")
    mode = ComputeSettings(precision=args.precision, compile=args.compile).compile_mode(device)
    compute = f"ComputeSettings(precision={args.precision}, compile={args.compile}): {mode or 'eager'}"
    print(f"device: {device} ({where}); torch {torch.__version__}; {torch.get_num_threads()} threads; matmul peak "
          + ", ".join(f"{k} {v / 1e9:.1f} GFLOP/s" for k, v in peaks.items())
          + f"; precision {precision} for every way; headway {compute}; plain and func "
          f"{'compiled' if args.compile_baselines else 'eager'}"
          f"{' as ordinarily written (every position, default AdamW)' if args.ordinary_baselines else ' in their fastest form (final block at the last position only, fused AdamW)'}; "
          f"median (min–max) of {args.rounds} alternating rounds of {args.steps} steps; FLOP/s credit every way "
          f"with headway's FLOPs per model-step (FlopCounterMode), fraction of the {precision} peak", flush=True)
    print("| shape | E | way | steps/s | model-steps/s | GFLOP/s | fraction of peak |")
    print("|---|---|---|---|---|---|---|", flush=True)
    results: dict[tuple[str, int], dict[str, list[float]]] = {}
    flops: dict[str, int] = {}
    notes: set[str] = set()
    for shape in args.shapes:
        flops[shape] = model_step_flops(SHAPES[shape], device, args.precision)
        for size in args.ensemble_sizes:
            times = bench(shape, size, device, args, notes)
            results[shape, size] = times
            for name, seconds in times.items():
                rates = [args.steps / s for s in seconds]
                flop_rates = [r * size * flops[shape] for r in rates]
                print(f"| {shape} | {size} | {name} | {spread(rates)} | {statistics.median(rates) * size:.1f} | "
                      f"{spread([f / 1e9 for f in flop_rates], '.1f')} | {statistics.median(flop_rates) / peak:.1%} |",
                      flush=True)
    others = [w for w in BASELINES if w in args.ways and "headway" in args.ways]
    if others:
        print()
        print("| shape | E | " + " | ".join(f"headway/{w} (min–max per round)" for w in others)
              + " | headway/fastest baseline |")
        print("|---|---|" + "---|" * (len(others) + 1))
        for (shape, size), times in results.items():
            print(f"| {shape} | {size} | " + " | ".join(ratio_cell(times, w) for w in others)
                  + f" | {fastest_cell(times, others)} |")
    for note in sorted(notes):
        print(f"\nNote: {note}.")
    paper = [(size, times) for (shape, size), times in results.items() if shape == "paper" and "headway" in times]
    print()
    if paper:
        size, times = max(paper, key=lambda item: item[0])
        rate = args.steps / statistics.median(times["headway"]) * size * flops["paper"]
        try:
            print(project_depth_grid(rate, size, flops["paper"]))
        except Exception as err:  # noqa: BLE001 - the measurements above stand without it
            print(f"Projection of the paper depth grid failed: {type(err).__name__}: {err}")
    else:
        print("Projection of the paper depth grid: not made (it needs the paper shape and the headway way).")


if __name__ == "__main__":
    main()
