"""How a training or sampling step is computed on its device: numeric precision and compilation.

Precision (`--precision`): `fp32` runs every op in float32; `tf32` lets CUDA matmuls use
TensorFloat-32; `bf16` runs matmuls and attention under bfloat16 autocast. Weights, gradients,
optimiser moments and losses stay float32 in every mode. `auto` is bf16 on CUDA and fp32 on the CPU,
where bf16 autocast measured 2× slower with bf16 matrix units and 7–10× without (docs/performance.md).

Compilation (`--compile`): `on` wraps the loss in `torch.compile` (AOTAutograd compiles its
backward too) and the optimiser update likewise; `graphs` (CUDA only) also replays the compiled loss
as CUDA graphs (`mode="reduce-overhead"`), removing the launch cost of its many small kernels. If
compiling fails the step runs eagerly, with a warning. `auto` is `on` on CUDA; on the CPU it compiles the
training of an ensemble large and long enough for compilation to repay itself (`TrainingWork`,
docs/performance.md), and leaves LLC sampling eager.

Attention kernel (`--attention-kernel`): `sdpa` computes unhooked attention with torch's fused
`scaled_dot_product_attention`, `matmul` as two batched matrix products and a softmax; both give the
same numbers to float rounding. `auto` picks per forward pass by device, sequence length, whether
gradients are taken and whether the pass is compiled (`auto_attention_kernel`), from the measurements in
docs/performance.md.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from headway.errors import ConfigError
from headway.settings import check_choice

PRECISIONS = ("auto", "fp32", "tf32", "bf16")
COMPILE_MODES = ("auto", "on", "off", "graphs")
ATTENTION_KERNELS = ("sdpa", "matmul")
ATTENTION_CHOICES = ("auto", *ATTENTION_KERNELS)
if TYPE_CHECKING:  # torch loads with the first step, not when the CLI parses --precision and --compile
    import torch

MATMUL_ATTENTION_CTX = (16, 40)  # sequence lengths at which the matmul kernel trained no slower on the CPU
# `auto` on the CPU compiles an ensemble's training when compilation repays itself. Measured on 2 cores (torch
# 2.13, benchmarks/RESULTS.md): a cold compilation of the step took 44 s and saved 22 ms a step at the cpu
# benchmark shape (8 runs, 5.6e9 FLOP a step by headway.runs.cost.training_flops) and 118 ms at the paper shape
# (1.7e11 FLOP): repaid after about 2000 steps at the smaller and 370 at the larger. Smaller steps were not
# measured and stay eager.
CPU_COMPILE_MIN_STEPS = 2000
CPU_COMPILE_MIN_STEP_FLOPS = 5.5e9
RECOMPILE_LIMIT = 64  # compiled graphs kept per function: one per ensemble shape of a study (torch's default: 8)


@dataclass(frozen=True)
class TrainingWork:
    """What one ensemble's training asks of the device: its steps and the FLOPs of one step of all its runs
    (`headway.runs.cost.training_flops`), from which `auto` decides whether compiling the CPU step repays itself."""

    steps: int
    step_flops: float

    def repays_cpu_compilation(self) -> bool:
        """Whether compiling this training on the CPU saves more time than it costs, as measured
        (CPU_COMPILE_MIN_STEPS, CPU_COMPILE_MIN_STEP_FLOPS)."""
        return self.steps >= CPU_COMPILE_MIN_STEPS and self.step_flops >= CPU_COMPILE_MIN_STEP_FLOPS


@dataclass(frozen=True)
class ComputeSettings:
    """Precision and compilation of the steps of one job; not part of a run's identity."""

    precision: str = "auto"
    compile: str = "auto"
    attention_kernel: str = "auto"

    def __post_init__(self) -> None:
        check_choice("precision", self.precision, PRECISIONS)
        check_choice("compile", self.compile, COMPILE_MODES)
        check_choice("attention_kernel", self.attention_kernel, ATTENTION_CHOICES)

    def resolved_attention_kernel(self, device: torch.device, n_ctx: int, work: TrainingWork | None = None) -> str:
        """The kernel of the training steps of a model with `n_ctx` positions on `device`: the one asked
        for, or for `auto` the one measured faster there with gradients, compiled as these settings compile
        `work` (`auto_attention_kernel`)."""
        if self.attention_kernel != "auto":
            return self.attention_kernel
        compiled = self.compile_mode(device, work) is not None
        return auto_attention_kernel(device, n_ctx, with_grad=True, compiled=compiled)

    def resolved_precision(self, device: torch.device) -> str:
        """fp32, tf32 or bf16 on `device`; tf32 is refused off CUDA, and bf16 on a CPU that only
        emulates it is allowed with a warning."""
        if self.precision == "auto":
            return "bf16" if device.type == "cuda" else "fp32"
        if self.precision == "tf32" and device.type != "cuda":
            raise ConfigError(f"precision = 'tf32' needs a CUDA device, not {device}; choose fp32 or bf16")
        if self.precision == "bf16" and device.type == "cpu" and not cpu_has_bf16_matmul():
            warnings.warn("precision = 'bf16' on a CPU without bf16 matrix instructions (AVX512-BF16 or AMX): "
                          "it is emulated, and a training step measured 7–10× slower than at fp32 "
                          "(docs/performance.md)", RuntimeWarning, stacklevel=2)
        return self.precision

    def compile_mode(self, device: torch.device, work: TrainingWork | None = None) -> str | None:
        """The `torch.compile` mode of steps on `device` ('default' or 'reduce-overhead'), None when
        not compiled; `graphs` is refused off CUDA. `auto` compiles on CUDA, and on the CPU a training whose
        `work` repays the compilation (without `work`, e.g. LLC sampling, it stays eager there)."""
        if self.compile == "graphs":
            if device.type != "cuda":
                raise ConfigError(f"compile = 'graphs' (CUDA graphs) needs a CUDA device, not {device}; choose on or off")
            return "reduce-overhead"
        if self.compile == "auto":
            compiled = device.type == "cuda" or (work is not None and work.repays_cpu_compilation())
        else:
            compiled = self.compile == "on"
        return "default" if compiled else None

    def sampler_compile_mode(self, device: torch.device) -> str | None:
        """The `torch.compile` mode of the LLC sampler's loss on `device`: 'default' wherever steps are compiled,
        never CUDA graphs (the chains' weights change in place between calls, which recorded graphs would replay
        from copies; not measured on a GPU), None when not compiled."""
        return "default" if self.compile_mode(device) else None

    def describe(self, device: torch.device, work: TrainingWork | None = None) -> dict[str, str]:
        """The settings as they apply on `device` (to a training of `work`), for a run's summary."""
        return {"precision": self.resolved_precision(device), "compiled": self.compile_mode(device, work) or "no"}


def auto_attention_kernel(device: torch.device, n_ctx: int, with_grad: bool, compiled: bool = False) -> str:
    """The faster kernel where it was measured (docs/performance.md, "Attention kernel"): the matmul kernel
    for a pass that takes gradients on the CPU with MATMUL_ATTENTION_CTX positions (17–33 measured 1.00–1.06×
    the fused kernel's speed), or with fewer positions when the pass is `compiled` (Inductor fuses the
    softmax and mask into the code around the products, where the fused kernel stays an opaque call: 9
    positions measured 1.18–1.31× faster); sdpa for passes without gradients, longer sequences and CUDA."""
    low, high = MATMUL_ATTENTION_CTX
    if with_grad and device.type == "cpu" and (compiled or low <= n_ctx) and n_ctx <= high:
        return "matmul"
    return "sdpa"


def cpu_has_bf16_matmul() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (oneDNN's own check; True where torch
    cannot say), rather than converting to float32 and back."""
    import torch

    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return True


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device) -> Iterator[None]:
    """Run the enclosed forward (and its loss) at `precision` ('fp32', 'tf32' or 'bf16'); the
    global matmul setting that tf32 and fp32 need is restored on exit."""
    import torch

    if precision == "bf16":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
        return
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high" if precision == "tf32" else "highest")
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


class Compiled:
    """`fn` compiled by `torch.compile` in `mode`, falling back to `fn` itself (with a warning) when
    compiling or one of the first `TRIAL_CALLS` compiled calls fails (CUDA graphs are warmed up and
    recorded over the first calls, not the first alone); later failures are real errors and
    propagate. Calls with a new shape compile again (a same-shaped new model reuses the compiled graph)."""

    TRIAL_CALLS = 3

    def __init__(self, fn: Callable[..., Any], what: str, mode: str = "default") -> None:
        import torch
        import torch._dynamo.config as dynamo_config

        dynamo_config.recompile_limit = max(dynamo_config.recompile_limit, RECOMPILE_LIMIT)
        self.fn, self.what = fn, what
        self.compiled: Callable[..., Any] | None = torch.compile(fn, dynamic=False, mode=mode)
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        if self.compiled is None:
            return self.fn(*args)
        if self.calls >= self.TRIAL_CALLS:
            return self.compiled(*args)
        try:
            out = self.compiled(*args)
        except Exception as err:  # noqa: BLE001 - any compiler failure falls back to eager
            reason = (str(err).splitlines() or [""])[0][:200]
            warnings.warn(f"compiling the {self.what} failed ({type(err).__name__}: {reason}); "
                          "running it without compilation", RuntimeWarning, stacklevel=2)
            self.compiled = None
            return self.fn(*args)
        self.calls += 1
        return out

    @property
    def is_compiled(self) -> bool:
        """False once the step fell back to eager."""
        return self.compiled is not None


def maybe_compiled(fn: Callable[..., Any], mode: str | None, what: str) -> Callable[..., Any]:
    """`fn` wrapped in `Compiled` in `mode`, or `fn` itself when `mode` is None."""
    return Compiled(fn, what, mode) if mode else fn


def at_precision(fn: Callable[..., torch.Tensor], precision: str, device: torch.device) -> Callable[..., torch.Tensor]:
    """`fn` (a loss) evaluated under `precision_context`, its result in float32; `fn` itself for fp32."""
    if precision == "fp32":
        return fn

    def wrapped(*args: Any) -> torch.Tensor:
        with precision_context(precision, device):
            return fn(*args).float()
    return wrapped
