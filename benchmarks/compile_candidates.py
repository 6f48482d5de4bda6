"""Why torch.compile speeds up torch.func's ensembling recipe more than headway's training step on the CPU:
each candidate cause as a variant of headway's step, timed against the recipe in the same run.

Variants (E = 8, fp32, one benchmark shape of common.SHAPES, the batches of one EnsembleData):
  headway-eager        headway's real step (`EnsembleTrainer.train_step`), uncompiled;
  headway              the same compiled (`--compile on`), attention kernel `auto`;
  headway-sdpa, headway-matmul   compiled, the attention kernel forced;
  headway-plain-split  compiled, the custom autograd function `SplitHeads` replaced by its forward's own
                       permute, unbind and reshape ops (autograd derives their backward);
  headway-eager-adam   the loss compiled, the Adam update eager;
  headway-baddbmm      compiled, every bias added by `baddbmm` as eager passes do (a library call that copies
                       the broadcast bias into its output) rather than a `bmm` and an add Inductor fuses;
  headway-fb           compiled, zero_grad, loss and backward only (no optimiser, no divergence checks);
  headway-fb-leaves    the same with every parameter its own leaf tensor rather than a view of
                       `FlatParameters`, its gradient allocated by torch;
  func-explicit-eager, func-explicit   torch.func's recipe with attention written out
                       (bench_training.FuncEnsemble), eager and compiled, with torch's fused AdamW;
  func-explicit-fb     the compiled recipe's zero_grad, loss and backward only.
The variants alternate round by round (the order rotating), each round two warm-up steps and --steps timed
steps of every variant.

Run from benchmarks/: python compile_candidates.py [--shape cpu|paper] [--variants headway,func-explicit,...]
     [--rounds 3] [--steps 30]
Prints one markdown row per variant: ms per step (median, min–max over rounds), steps/s and the speed
relative to the first variant.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable, Iterator

import torch
from torch import Tensor, nn

import headway.model.transformer as transformer
from bench_training import build_ways
from common import SHAPES, HeadwayWay, Way, make_trainer, runs_for, timed
from headway.train.optim import adam_update

DEVICE = torch.device("cpu")
SPLIT_FORWARD = transformer.SplitHeads.forward


class PlainSplit:
    """Stands in for `SplitHeads`: its forward as ordinary ops, differentiated by autograd."""

    @staticmethod
    def apply(qkv: Tensor, last_query_only: bool) -> tuple[Tensor, Tensor, Tensor]:
        """q, k, v as `SplitHeads.forward` computes them."""
        return SPLIT_FORWARD(qkv, last_query_only)


def library_affine(bias: Tensor, x: Tensor, weight: Tensor, alpha: float = 1.0) -> Tensor:
    """Stands in for `transformer.batched_affine`: `baddbmm` whether compiled or not."""
    return torch.baddbmm(bias, x, weight, alpha=alpha)


@contextlib.contextmanager
def swapped(name: str, replacement: object) -> Iterator[None]:
    """`transformer.<name>` replaced inside the block (torch.compile guards on module globals, so the variant
    keeps a compiled graph of its own)."""
    original = getattr(transformer, name)
    setattr(transformer, name, replacement)
    try:
        yield
    finally:
        setattr(transformer, name, original)


class HeadwayVariant(HeadwayWay):
    """headway's step with one candidate changed."""

    def __init__(self, shape: str, compile_mode: str, attention: str = "auto", split: bool = True,
                 eager_adam: bool = False, forward_backward: bool = False, leaves: bool = False,
                 library_bias: bool = False) -> None:
        super().__init__(make_trainer(runs_for(SHAPES[shape], 8), DEVICE, "fp32", compile_mode, attention))
        self.forward_backward, self.leaves = forward_backward, leaves
        self.swaps = ([] if split else [("SplitHeads", PlainSplit)]) + (
            [("batched_affine", library_affine)] if library_bias else [])
        if eager_adam:
            self.optim._update = adam_update
        if leaves:
            for name, param in list(self.model.named_parameters()):
                owner, _, leaf = name.rpartition(".")
                setattr(self.model.get_submodule(owner), leaf, nn.Parameter(param.detach().clone()))
        self.params = list(self.model.parameters())

    def step(self, step: int) -> None:
        """The real step, or zero_grad, loss and backward alone."""
        with contextlib.ExitStack() as stack:
            for name, replacement in self.swaps:
                stack.enter_context(swapped(name, replacement))
            if not self.forward_backward:
                super().step(step)
                return
            tokens, targets = self.data.train_batch(step)
            if self.leaves:
                for param in self.params:
                    param.grad = None
            else:
                self.model.flat.zero_grad()
            self.trainer.loss(self.model, tokens, targets).sum().backward()


class RecipeVariant(Way):
    """torch.func's recipe with written-out attention, from the same initial weights and data pool."""

    def __init__(self, shape: str, compiled: bool, forward_backward: bool = False) -> None:
        super().__init__()
        self.way = build_ways(runs_for(SHAPES[shape], 8), DEVICE, ["func-explicit"], "fp32", "off",
                              compiled)["func-explicit"]
        self.forward_backward = forward_backward

    def step(self, step: int) -> None:
        """The recipe's step, or its zero_grad, loss and backward alone."""
        if not self.forward_backward:
            self.way.step(step)
            return
        tokens, targets = self.way.data.train_batch(step)
        self.way.optim.zero_grad(set_to_none=True)
        self.way.batch_losses(tokens, targets).sum().backward()


VARIANTS: dict[str, Callable[[str], Way]] = {
    "headway-eager": lambda shape: HeadwayVariant(shape, "off"),
    "headway": lambda shape: HeadwayVariant(shape, "on"),
    "headway-sdpa": lambda shape: HeadwayVariant(shape, "on", "sdpa"),
    "headway-matmul": lambda shape: HeadwayVariant(shape, "on", "matmul"),
    "headway-plain-split": lambda shape: HeadwayVariant(shape, "on", split=False),
    "headway-eager-adam": lambda shape: HeadwayVariant(shape, "on", eager_adam=True),
    "headway-baddbmm": lambda shape: HeadwayVariant(shape, "on", library_bias=True),
    "headway-fb": lambda shape: HeadwayVariant(shape, "on", forward_backward=True),
    "headway-fb-leaves": lambda shape: HeadwayVariant(shape, "on", forward_backward=True, leaves=True),
    "func-explicit-eager": lambda shape: RecipeVariant(shape, False),
    "func-explicit": lambda shape: RecipeVariant(shape, True),
    "func-explicit-fb": lambda shape: RecipeVariant(shape, True, forward_backward=True),
}


def main() -> None:
    """Build (and compile) every requested variant, time them in alternating rounds, print the rows."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--shape", choices=list(SHAPES), default="cpu")
    parser.add_argument("--variants", default="headway-eager,headway,func-explicit-eager,func-explicit",
                        help=f"comma list from {', '.join(VARIANTS)}; ratios are against the first")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=30, help="timed steps per variant per round")
    args = parser.parse_args()
    names = [n for n in args.variants.split(",") if n]
    unknown = sorted(set(names) - set(VARIANTS))
    if unknown or not names:
        parser.error(f"unknown variants {unknown}; choose from {', '.join(VARIANTS)}")
    ways: dict[str, Way] = {}
    for name in names:
        start = time.perf_counter()
        ways[name] = VARIANTS[name](args.shape)
        ways[name].advance()  # compiles
        print(f"{name}: built and compiled in {time.perf_counter() - start:.1f} s", flush=True)
    seconds: dict[str, list[float]] = {name: [] for name in names}
    for r in range(args.rounds):
        shift = r % len(names)
        for name in names[shift:] + names[:shift]:
            seconds[name].append(timed(ways[name], args.steps, DEVICE) / args.steps)
    base = statistics.median(seconds[names[0]])
    print(f"| shape | variant | ms per step | steps/s | speed vs {names[0]} |")
    print("|---|---|---|---|---|")
    for name in names:
        median = statistics.median(seconds[name])
        print(f"| {args.shape} | {name} | {median * 1e3:.1f} ({min(seconds[name]) * 1e3:.1f}–"
              f"{max(seconds[name]) * 1e3:.1f}) | {1 / median:.2f} | {base / median:.2f}× |")


if __name__ == "__main__":
    main()
