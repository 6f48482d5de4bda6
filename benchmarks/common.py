"""What the training benchmarks share: the benchmark shapes and data pool, timing on a device (synchronised
around every timing), the dense matmul peak, and headway's real trainer step as a way to train E models.
`bench_training.py`, `bench_attention.py` and `profile_step.py` import it; run from `benchmarks/` (each script's
folder is on its import path), so `from common import …`."""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from torch import Tensor

from headway.compute import ComputeSettings
from headway.runs.config import RunConfig
from headway.tasks.objective import run_loss
from headway.train.trainer import EnsembleTrainer

SHAPES = {
    # The paper's model (8 heads, width 128, batch 512) on D=4, K=4 retrieval, 2 layers.
    "paper": dict(hops=4, chains=4, vocab=32, layers=2, heads=8, d_model=128, batch_size=512),
    # CPU scale: width 64, batch 128.
    "cpu": dict(hops=2, chains=4, vocab=16, layers=2, heads=4, d_model=64, batch_size=128),
}
WARMUP = 2
POOL = {"train_size": 2**14, "val_size": 256}
RUN_DIR = Path(tempfile.gettempdir()) / "headway-bench"


def sync(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA kernels run asynchronously)."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextlib.contextmanager
def matmul_precision(mode: str) -> Iterator[None]:
    """Set torch's float32 matmul precision ('highest' or 'high' = TF32) for the enclosed code."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision(mode)
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(before)


def matmul_peak(device: torch.device, dtype: torch.dtype = torch.float32, tf32: bool = False) -> float:
    """FLOP/s of a large square matmul in `dtype` (TF32 when `tf32`): the practical dense peak."""
    size, repeats = (8192, 50) if device.type == "cuda" else (2048, 10)
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    with matmul_precision("high" if tf32 else "highest"):
        for _ in range(3):
            a @ b
        sync(device)
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        sync(device)
        seconds = time.perf_counter() - start
    return 2 * size**3 * repeats / seconds


def runs_for(settings: dict, size: int) -> list[RunConfig]:
    """`size` runs of one benchmark shape, seeds 0..size-1 (one shared data pool)."""
    return [RunConfig.from_flat({**settings, **POOL, "seed": seed}) for seed in range(size)]


def make_trainer(runs: list[RunConfig], device: torch.device, precision: str, compile_mode: str,
                 attention: str = "auto") -> EnsembleTrainer:
    """A headway trainer for `runs` with the given compute settings."""
    return EnsembleTrainer(runs, RUN_DIR, device, progress=False,
                           compute=ComputeSettings(precision=precision, compile=compile_mode,
                                                   attention_kernel=attention))


class Way:
    """One way of training the E models; `advance()` takes the next training step."""

    name = ""

    def __init__(self) -> None:
        self.next_step = 0

    def step(self, step: int) -> None:
        """Training step number `step` of every model."""
        raise NotImplementedError

    def advance(self) -> None:
        """Take the next step (all ways walk through the same step numbers, so the same batches)."""
        self.step(self.next_step)
        self.next_step += 1


class HeadwayWay(Way):
    """The E models as one headway ensemble, stepped by the real trainer step."""

    name = "headway"

    def __init__(self, trainer: EnsembleTrainer) -> None:
        super().__init__()
        self.trainer = trainer
        self.data, self.model, self.optim, self.state = trainer.setup()

    def step(self, step: int) -> None:
        """`EnsembleTrainer.train_step` at `step`."""
        self.trainer.train_step(self.model, self.data, self.optim, self.state, step)

    @torch.no_grad()
    def losses(self, tokens: Tensor, targets: Tensor) -> Tensor:
        """The training loss [E] on a batch (float32, uncompiled)."""
        return run_loss(self.trainer.task, self.trainer.cfg.loss)(self.model, tokens, targets)


def timed(way: Way, steps: int, device: torch.device) -> float:
    """Seconds for `steps` training steps of `way` after WARMUP untimed ones."""
    for _ in range(WARMUP):
        way.advance()
    sync(device)
    start = time.perf_counter()
    for _ in range(steps):
        way.advance()
    sync(device)
    return time.perf_counter() - start
