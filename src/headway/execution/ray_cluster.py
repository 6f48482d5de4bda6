"""Jobs as Ray tasks: each ensemble is one task with declared CPUs, GPUs and memory, retried on a lost
worker (it then resumes from its last resume state in the shared run store). Ray is imported here
only, when `--executor ray` is chosen (the `headway[cluster]` extra). See docs/cluster.md."""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import socket
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import headway
from headway.errors import ConfigError, JobsFailed, TimeLimitReached
from headway.execution.base import Executor, Job
from headway.limits import MAX_RAY_CPUS, MAX_RAY_GPUS, MAX_RAY_MEMORY, MAX_RAY_RETRIES

CHECK_DIR = ".headway-check"  # per-command files under the store that tell a shared store from a local one
CONNECT_TIMEOUT_S = 5.0
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "m": 10**6, "mb": 10**6, "g": 10**9, "gb": 10**9,
          "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40, "t": 10**12, "tb": 10**12}


def parse_bytes(option: str, text: str) -> int:
    """`8GiB`, `500MB`, `2g` or a plain number of bytes."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", text)
    unit = match.group(2).lower() if match else None
    size = float(match.group(1)) * _UNITS[unit] if match and unit in _UNITS else math.nan
    if not 1 <= size <= MAX_RAY_MEMORY:
        raise ConfigError(f"{option} got {text!r}; write a size from 1 byte to 1PiB, such as 4GiB, 500MB or 2000000000")
    return int(size)


@dataclass(frozen=True)
class TaskResources:
    """What each ensemble task reserves on the cluster. `gpus=None`: one GPU when the job's device may
    be a GPU and the cluster has GPUs, else none. `memory=None`: the job's own estimate."""

    cpus: float = 1.0
    gpus: float | None = None
    memory: int | None = None
    retries: int = 3

    @classmethod
    def parse(cls, cpus: float | None, gpus: float | None, memory: str | None, retries: int | None) -> TaskResources:
        """Resources from option values (None: the default), each checked against `headway.limits`."""
        cpus = cls.cpus if cpus is None else cpus
        retries = cls.retries if retries is None else retries
        if not (math.isfinite(cpus) and 0 < cpus <= MAX_RAY_CPUS):
            raise ConfigError(f"--ray-cpus got {cpus}; a task needs more than 0 CPUs (fractions allowed) and at most "
                              f"{MAX_RAY_CPUS:g}")
        if gpus is not None and not (math.isfinite(gpus) and 0 <= gpus <= MAX_RAY_GPUS):
            raise ConfigError(f"--ray-gpus got {gpus}; use 0, a fraction such as 0.25, or a whole number up to "
                              f"{MAX_RAY_GPUS:g}")
        if gpus is not None and gpus > 1 and not float(gpus).is_integer():
            raise ConfigError(f"--ray-gpus got {gpus}; above 1 GPU, Ray takes whole numbers only")
        if not 0 <= retries <= MAX_RAY_RETRIES:
            raise ConfigError(f"--ray-retries got {retries}; use 0 to {MAX_RAY_RETRIES}")
        size = None if memory is None or memory.strip().lower() == "auto" else parse_bytes("--ray-memory", memory)
        return cls(cpus, gpus, size, retries)


def split_address(address: str) -> tuple[str, int]:
    """(host, port) of a Ray address `host:port` or `ray://host:port`."""
    rest = address.removeprefix("ray://")
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"--ray-address {address!r} is not an address; write HOST:PORT (the head's GCS port, "
                          "e.g. 10.0.0.5:6379), ray://HOST:10001, or auto for a cluster started on this machine")
    return host, int(port)


def check_reachable(address: str, timeout: float = CONNECT_TIMEOUT_S) -> None:
    """Refuse at once an address nothing listens on (Ray itself would retry for minutes)."""
    host, port = split_address(address)
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise ConfigError(f"no Ray cluster at --ray-address {address} ({reason}); start one with "
                          "`ray start --head` or fix the address") from None


@dataclass(frozen=True)
class StoreCheck:
    """A file the driver wrote into the run store; a worker that cannot read it sees another disk."""

    path: str
    token: str

    def verify(self) -> None:
        """Raise unless this process sees the driver's file (the store is shared)."""
        try:
            seen = Path(self.path).read_text()
        except OSError:
            seen = None
        if seen != self.token:
            raise ConfigError(f"the run store {Path(self.path).parent.parent} is not shared with node "
                              f"{socket.gethostname()}: every node must see it at the same path (docs/cluster.md)")


class Board:
    """A Ray actor recording the node of every attempt each job started, for the driver's progress."""

    def __init__(self) -> None:
        self.attempts: dict[str, list[str]] = {}

    def start(self, name: str, node: str) -> None:
        self.attempts.setdefault(name, []).append(node)

    def snapshot(self) -> dict[str, list[str]]:
        return {name: list(nodes) for name, nodes in self.attempts.items()}


def run_job(board: Any, job: Job, check: StoreCheck, version: str) -> None:
    """What a Ray task runs: check the worker against the driver, report the start, run the job."""
    if headway.__version__ != version:
        raise ConfigError(f"node {socket.gethostname()} has headway {headway.__version__}, the driver {version}; "
                          "install the same version on every node")
    import ray

    check.verify()
    board.start.remote(job.name, ray.get_runtime_context().get_node_id())
    job.fn(*job.args)


@contextlib.contextmanager
def native_stderr_silenced() -> Iterator[None]:
    """Send what native code writes to file descriptor 2 nowhere while the block runs."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as sink:
            os.dup2(sink.fileno(), 2)
            yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class RayExecutor(Executor):
    """Every job a Ray task on the cluster at `address` (None: RAY_ADDRESS, else a Ray instance
    started for this command on this machine, with all its CPUs and GPUs)."""

    name = "ray"
    jobs_show_progress = False

    def __init__(self, address: str | None, resources: TaskResources) -> None:
        self.address, self.resources = address, resources

    def prepare(self, device: str) -> str:
        self.connect()
        if device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"device = {device!r} with --executor ray: use auto, cpu or cuda (Ray assigns each "
                              "task its GPU)")
        if self.resources.gpus and device == "cpu":
            raise ConfigError(f"--ray-gpus {self.resources.gpus} with --device cpu reserves GPUs no task uses")
        self.check_feasible([self.task_options(0, self.task_gpus(device))])  # what the options alone ask for
        return device

    def run(self, jobs: list[Job], desc: str, store: Path, device: str, progress: bool = True) -> None:
        if not jobs:
            return
        ray = self.connect()
        gpus = self.task_gpus(device)
        options = [self.task_options(job.memory, gpus) | {"name": job.name} for job in jobs]
        self.check_feasible(options)
        check = self.write_check(store)
        try:
            self.wait(ray, jobs, options, check, desc, progress)
        finally:
            Path(check.path).unlink(missing_ok=True)
            with contextlib.suppress(OSError):
                Path(check.path).parent.rmdir()  # only when no other command's check is there

    def connect(self) -> Any:
        """The `ray` module, connected to the cluster (once per process)."""
        try:
            import ray
        except ImportError:
            raise ConfigError("--executor ray needs Ray: pip install 'headway[cluster]'") from None
        if ray.is_initialized():
            return ray
        address = self.address or os.environ.get("RAY_ADDRESS")
        if address and address != "auto":
            check_reachable(address)
        settings: dict[str, Any] = {"log_to_driver": False, "logging_level": logging.ERROR}
        if not address:
            settings.update(include_dashboard=False)
        refused = getattr(ray.exceptions, "AuthenticationError", ConnectionError)  # a token the cluster refuses
        try:
            with native_stderr_silenced():  # Ray's core prints a line a second while it retries a refused connection
                ray.init(address=address, **settings)
        except (ConnectionError, refused) as err:
            reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ConfigError(f"could not join the Ray cluster at --ray-address {address} ({reason}); if the cluster "
                              "uses token authentication, set RAY_AUTH_MODE=token and RAY_AUTH_TOKEN_PATH to its token "
                              "(docs/cluster.md)") from None
        return ray

    def task_gpus(self, device: str) -> float:
        """GPUs each task reserves: as given, else one where the device may be a GPU and there are GPUs."""
        if self.resources.gpus is not None:
            return self.resources.gpus
        if device == "cpu":
            return 0.0
        import ray

        has_gpus = ray.cluster_resources().get("GPU", 0) > 0
        if device == "cuda" and not has_gpus:
            raise ConfigError("--device cuda but the Ray cluster has no GPUs; use auto or cpu")
        return 1.0 if has_gpus else 0.0

    def task_options(self, estimate: int, gpus: float) -> dict[str, Any]:
        """Ray's resource options for a task whose job estimates `estimate` bytes of memory."""
        memory = self.resources.memory if self.resources.memory is not None else estimate
        options = {"num_cpus": self.resources.cpus, "num_gpus": gpus, "max_retries": self.resources.retries}
        return options | ({"memory": memory} if memory else {})

    def check_feasible(self, options: list[dict[str, Any]]) -> None:
        """Refuse a task no node could ever hold (Ray would wait for it forever)."""
        import ray

        nodes = [node["Resources"] for node in ray.nodes() if node["Alive"]]
        limits = (("num_cpus", "CPU", 1, "CPUs", "--ray-cpus"), ("num_gpus", "GPU", 1, "GPUs", "--ray-gpus"),
                  ("memory", "memory", 2**30, "GiB of memory", "--ray-memory"))
        for key, resource, unit, what, option in limits:
            largest = max((node.get(resource, 0.0) for node in nodes), default=0.0)
            need = max(option_set.get(key, 0) for option_set in options)
            if need > largest:
                raise ConfigError(f"each ensemble task asks for {need / unit:.4g} {what} but the largest node of the "
                                  f"cluster has {largest / unit:.4g}; lower {option}")

    def write_check(self, store: Path) -> StoreCheck:
        """Write this command's store-check file under `store`."""
        token = uuid.uuid4().hex
        path = Path(store).resolve() / CHECK_DIR / token
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(token)
        return StoreCheck(str(path), token)

    def wait(self, ray: Any, jobs: list[Job], options: list[dict[str, Any]], check: StoreCheck, desc: str,
             progress: bool) -> None:
        """Submit every job, show one bar for the grid until all have ended, and raise for the failed."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        from headway.progress import progress as progress_bar

        here = NodeAffinitySchedulingStrategy(ray.get_runtime_context().get_node_id(), soft=True)
        board = ray.remote(num_cpus=0)(Board).options(scheduling_strategy=here).remote()
        task = ray.remote(run_job)
        names = {task.options(**option).remote(board, job, check, headway.__version__): job.name
                 for job, option in zip(jobs, options)}
        pending, failed, attempts = list(names), {}, {}
        bar = progress_bar(len(jobs), desc, "ensemble", enabled=progress)  # plain lines when not on a terminal
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=1.0)
                for ref in done:
                    try:
                        ray.get(ref)
                    except ray.exceptions.RayError as err:
                        failed[names[ref]] = getattr(err, "cause", None) or err
                    bar.update(1)
                attempts = self.attempts(ray, board, attempts)
                running = sum(1 for ref in pending if names[ref] in attempts)
                bar.set_postfix(running=running, failed=len(failed),
                                retried=sum(len(nodes) - 1 for nodes in attempts.values()))
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref, force=True)
            raise
        finally:
            bar.close()
        nodes = {node for tries in attempts.values() for node in tries}
        retried = sum(len(tries) - 1 for tries in attempts.values())
        print(f"{desc}: {len(jobs) - len(failed)} of {len(jobs)} ensemble(s) done on {len(nodes)} node(s), "
              f"{retried} retried after a lost worker", file=sys.stderr)
        if failed:
            raise_failures(failed)

    @staticmethod
    def attempts(ray: Any, board: Any, last: dict[str, list[str]]) -> dict[str, list[str]]:
        """The board's attempts by job (the last ones seen if its node is gone)."""
        try:
            return ray.get(board.snapshot.remote(), timeout=5.0)
        except ray.exceptions.RayError:
            return last

    def describe(self) -> dict[str, str]:
        import ray

        nodes = [node for node in ray.nodes() if node["Alive"]]
        total = ray.cluster_resources()
        return {"executor": f"ray: {len(nodes)} node(s), {total.get('CPU', 0):g} CPUs, {total.get('GPU', 0):g} GPUs"}


def raise_failures(failed: dict[str, BaseException]) -> None:
    """One error for every failed job: bad input stays a ConfigError (exit status 2); jobs stopped by the
    time limit are no failures: with nothing else failed, one TimeLimitReached (run again) names them."""
    stopped = sorted(name for name, err in failed.items() if isinstance(err, TimeLimitReached))
    failed = {name: err for name, err in failed.items() if name not in stopped}
    if not failed:
        raise TimeLimitReached(where=f"with {len(stopped)} ensemble(s) unfinished ({', '.join(stopped)})")
    lines = [f"{name}: {str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__}"
             for name, err in sorted(failed.items())]
    if all(isinstance(err, ConfigError) for err in failed.values()):
        raise ConfigError("; ".join(lines))
    raise JobsFailed(lines + ([f"{len(stopped)} more stopped at the time limit"] if stopped else []))

