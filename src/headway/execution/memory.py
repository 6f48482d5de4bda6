"""How much memory a piece of work takes on a device, measured, and how much the device has to give.

Plans that pack work into batches (ensembles of runs, rows of LLC chains) ask two things here: the
budget of a device (`memory_budget`) and the measured peak of a callable (`peak_bytes`), from which
`fit_footprint` draws a line bytes = base + per_item·n through two small batch sizes.

On CUDA the caching allocator's own statistics measure the peak exactly. On the CPU there are none:
the resident set size of the process moves in pages, keeps freed memory (glibc, and `keep_freed_memory`
on purpose) and is shared with every other thread, so its growth under one call says little about the
call. `LiveTensorBytes` instead counts what the call holds: the bytes of every tensor storage that an
operator reads or writes while it runs, from when it is first seen until it is freed, and their peak
at operator boundaries. Temporary buffers inside one kernel and memory that is not a tensor storage
(Python objects, NumPy arrays never handed to an operator) are not counted; the budget it is compared
with is what the machine has available, not what the process already holds.
"""

from __future__ import annotations

import gc
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from headway.errors import ConfigError

SAFETY = 0.8  # the fraction of a device's free memory a plan may fill


@dataclass(frozen=True)
class Footprint:
    """Peak bytes of a batch of n items, as base + per_item·n (fitted to measurements)."""

    base: int
    per_item: int

    def predict(self, items: int) -> int:
        """Predicted peak bytes of `items` items."""
        return self.base + self.per_item * items

    def capacity(self, budget: int) -> int:
        """The most items whose predicted peak fits in `budget` bytes (0 when not even one does)."""
        return max(0, (budget - self.base) // max(self.per_item, 1))


def fit_footprint(sizes: list[int], peaks: list[int]) -> Footprint:
    """The least-squares line through (size, peak) points of at least two distinct sizes; the slope is
    kept at least one byte and the intercept at least zero."""
    if len(set(sizes)) < 2:
        raise ConfigError(f"a footprint needs measurements at two or more sizes, not {sizes}")
    n = len(sizes)
    mean_x, mean_y = sum(sizes) / n, sum(peaks) / n
    slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(sizes, peaks)) / sum((x - mean_x) ** 2 for x in sizes)
    per_item = max(1, round(slope))
    return Footprint(max(0, round(mean_y - per_item * mean_x)), per_item)


def available_ram() -> int:
    """Bytes of RAM the machine can still give without swapping (/proc/meminfo MemAvailable, else free pages)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def memory_budget(device: torch.device | str, fraction: float = SAFETY) -> int:
    """Bytes that new work on `device` may fill: `fraction` of the GPU's free memory (with what torch's
    allocator holds unused) or of the machine's available RAM."""
    device = torch.device(device)
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        idle = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return int(fraction * (free + idle))
    return int(fraction * available_ram())


def check_fits(needed: int, device: torch.device | str, what: str, lower: str) -> None:
    """Refuse, before it allocates, work estimated to need `needed` bytes when `device` can give less now: one
    line saying what needs it and which setting to `lower` (or how to try anyway)."""
    budget = memory_budget(device)
    if needed > budget:
        raise ConfigError(f"{what} needs about {needed / 2**30:.1f} GiB, more than the {budget / 2**30:.1f} GiB "
                          f"{device} can give now; lower {lower}, or add --no-memory-check to try anyway")


class LiveTensorBytes(TorchDispatchMode):
    """Counts the bytes of live tensor storages an operator touched while the mode was on, and their peak."""

    def __init__(self) -> None:
        super().__init__()
        self.live: dict[int, tuple[StorageWeakRef, int]] = {}
        self.current = 0
        self.peak = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        """Run the operator; forget storages freed since the last one, then count its tensors' storages."""
        self._forget_freed()
        out = func(*args, **(kwargs or {}))
        for value in tree_leaves((args, kwargs, out)):
            if isinstance(value, torch.Tensor):
                self._count(value)
        self.peak = max(self.peak, self.current)
        return out

    def _forget_freed(self) -> None:
        for key in [key for key, (ref, _) in self.live.items() if ref.expired()]:
            self.current -= self.live.pop(key)[1]

    def _count(self, tensor: torch.Tensor) -> None:
        if tensor.device.type != "cpu" or tensor.is_sparse:
            return
        storage = tensor.untyped_storage()
        ref = StorageWeakRef(storage)
        if ref.cdata not in self.live:
            self.live[ref.cdata] = (ref, storage.nbytes())
            self.current += storage.nbytes()


def peak_bytes(fn: Callable[[], None], device: torch.device | str) -> int:
    """Peak bytes that `fn()` adds on `device` above what was allocated before it: the CUDA allocator's
    peak there, the peak of `LiveTensorBytes` on the CPU."""
    device = torch.device(device)
    gc.collect()
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        before = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    with LiveTensorBytes() as counter:
        fn()
    return counter.peak
