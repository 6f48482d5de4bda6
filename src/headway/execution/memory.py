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

What the machine has available is the least of what each limit the process lives under leaves it
(`ram_rooms`): the machine's available RAM, the address-space and data-segment limits
(`RLIMIT_AS`, `RLIMIT_DATA`, as `ulimit -v` or `prlimit --as` set them) less what the process already
maps, and its cgroup's memory limit (a container's, a Slurm job's) less what the cgroup uses.
"""

from __future__ import annotations

import gc
import os
import resource
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


AVAILABLE_RAM = "available RAM"  # the name `ram_rooms` gives the machine's own room


def machine_ram() -> int:
    """Bytes of RAM the machine can still give without swapping (/proc/meminfo MemAvailable, else free pages)."""
    meminfo = Path("/proc/meminfo")
    if meminfo.is_file():
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def _status_bytes(field: str) -> int | None:
    """A size the kernel reports for this process in /proc/self/status (VmSize, VmData), in bytes."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def rlimit_rooms() -> dict[str, int]:
    """Bytes the process's own limits let it map more: RLIMIT_AS less its address space now (VmSize: the
    libraries, threads' stacks and heaps torch and Python already map count), RLIMIT_DATA less its data
    segment now (VmData); a limit that is not set is left out."""
    rooms = {}
    for name, limit, used in (("the address-space limit (RLIMIT_AS)", resource.RLIMIT_AS, "VmSize"),
                              ("the data-segment limit (RLIMIT_DATA)", resource.RLIMIT_DATA, "VmData")):
        soft = resource.getrlimit(limit)[0]
        if soft != resource.RLIM_INFINITY:
            rooms[name] = max(0, soft - (_status_bytes(used) or 0))
    return rooms


def _read_int(path: Path) -> int | None:
    """The whole number a cgroup file holds, or None when it is absent, unreadable or says "max"."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _inactive_file(folder: Path, key: str) -> int:
    """Page cache the kernel reclaims before it kills anything in the cgroup (`key` of its memory.stat)."""
    try:
        for line in (folder / "memory.stat").read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def _cgroup_folders(proc: Path) -> tuple[list[Path], Path | None]:
    """The cgroup v2 folders of this process, its own first and then each parent up to the mount; and the cgroup
    v1 memory controller's folder (None without one). Read from `proc`/cgroup and `proc`/mountinfo."""
    try:
        groups = (proc / "cgroup").read_text().splitlines()
        mounts = (proc / "mountinfo").read_text().splitlines()
    except OSError:
        return [], None
    v2_path = next((line.split(":", 2)[2] for line in groups if line.startswith("0::")), None)
    v1_path = next((line.split(":", 2)[2] for line in groups
                    if line.count(":") >= 2 and "memory" in line.split(":", 2)[1].split(",")), None)
    v2: list[Path] = []
    v1 = None
    for mount in mounts:
        fields, _, extra = mount.partition(" - ")
        parts, kind = fields.split(), extra.split()
        if len(parts) < 5 or len(kind) < 3:
            continue
        root, point = parts[3], Path(parts[4])
        if kind[0] == "cgroup2" and v2_path is not None and not v2:
            v2 = _under_mount(point, root, v2_path)
        elif kind[0] == "cgroup" and "memory" in kind[2].split(",") and v1_path is not None and v1 is None:
            v1 = _under_mount(point, root, v1_path)[0]
    return v2, v1


def _under_mount(point: Path, root: str, path: str) -> list[Path]:
    """The folder of cgroup `path` under a hierarchy mounted at `point` (showing the hierarchy from `root`) and
    its parents up to `point`; the mount itself when the folder is not visible there (a container's own view)."""
    relative = Path(path).relative_to(root) if Path(path).is_relative_to(root) else Path(path.lstrip("/"))
    folder = point / relative
    if not folder.is_dir():
        return [point]
    return [folder, *[parent for parent in folder.parents if parent.is_relative_to(point)]]


def cgroup_room(proc: Path = Path("/proc/self")) -> int | None:
    """Bytes the process's cgroup may still use: the least over it and its parents of memory.max less
    memory.current (cgroup v2), else memory.limit_in_bytes less memory.usage_in_bytes (v1), page cache the kernel
    would reclaim counted as free; None when no cgroup limits memory. `proc`: the process's /proc folder."""
    v2, v1 = _cgroup_folders(proc)
    rooms = []
    for folder in v2:
        limit, used = _read_int(folder / "memory.max"), _read_int(folder / "memory.current")
        if limit is not None and used is not None:
            rooms.append(limit - used + _inactive_file(folder, "inactive_file"))
    if not rooms and v1 is not None:
        limit, used = _read_int(v1 / "memory.limit_in_bytes"), _read_int(v1 / "memory.usage_in_bytes")
        if limit is not None and used is not None and limit < 2**62:  # v1 writes "no limit" as about 2^63
            rooms.append(limit - used + _inactive_file(v1, "total_inactive_file"))
    return max(0, min(rooms)) if rooms else None


def ram_rooms() -> dict[str, int]:
    """Bytes of RAM this process can still fill under each limit it lives under, by the limit's name: the
    machine's available RAM, and those of `rlimit_rooms` and `cgroup_room` that are set."""
    rooms = {AVAILABLE_RAM: machine_ram(), **rlimit_rooms()}
    cgroup = cgroup_room()
    if cgroup is not None:
        rooms["the cgroup's memory limit"] = cgroup
    return rooms


def available_ram() -> int:
    """Bytes of RAM this process can still fill: the least of `ram_rooms`."""
    return min(ram_rooms().values())


def memory_budget(device: torch.device | str, fraction: float = SAFETY) -> int:
    """Bytes that new work on `device` may fill: `fraction` of the GPU's free memory (with what torch's
    allocator holds unused) or of the RAM this process can still fill (`available_ram`)."""
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
                          f"{device} can give now{_bound_by(device, budget)}; lower {lower}, or add --no-memory-check "
                          "to try anyway")


def _bound_by(device: torch.device | str, budget: int) -> str:
    """For the CPU, the limit that leaves least room when it is one of the process's own (RLIMIT_AS, a cgroup) and
    accounts for `budget` (to what moves between two reads), as words to add to a refusal; "" when the machine's
    available RAM bounds it."""
    if torch.device(device).type == "cuda":
        return ""
    rooms = ram_rooms()
    name = min(rooms, key=rooms.__getitem__)
    if name == AVAILABLE_RAM or abs(SAFETY * rooms[name] - budget) > 0.05 * budget + 2**26:
        return ""
    return f" ({name} leaves this process {rooms[name] / 2**30:.1f} GiB)"


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
