"""Jobs (one ensemble's work) and the executors that run them."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from headway.errors import ConfigError

EXECUTORS = ("local", "ray")


@dataclass(frozen=True)
class Job:
    """One ensemble's work: `fn(*args)` writes its results under the run store and returns nothing.
    `fn` is a module-level function so that a Ray worker can import it; `memory` is the bytes the job
    is expected to need (what a cluster reserves for it)."""

    name: str
    fn: Callable[..., None]
    args: tuple[Any, ...]
    memory: int = 0


class Executor(ABC):
    """Runs a list of jobs to completion; a job that fails is reported, never silently dropped."""

    name: str
    jobs_show_progress: bool = True  # whether a job's own bar reaches the user's terminal

    @abstractmethod
    def prepare(self, device: str) -> str:
        """Get ready to run jobs (connect to a cluster) and return the device string jobs are given for
        the user's `device`, checked here on the driver; bad input is refused before anything runs."""

    @abstractmethod
    def run(self, jobs: list[Job], desc: str, store: Path, device: str, progress: bool = True) -> None:
        """Run every job (their results go under `store`, on `device` as `prepare` gave it); return
        when all have finished, raise if any failed."""

    def describe(self) -> dict[str, str]:
        """Where jobs ran, for reports."""
        return {"executor": self.name}


class LocalExecutor(Executor):
    """This process, one job after another (each trainer shows its own bar under the grid's)."""

    name = "local"

    def prepare(self, device: str) -> str:
        from headway.execution.devices import resolve_device

        return str(resolve_device(device))

    def run(self, jobs: list[Job], desc: str, store: Path, device: str, progress: bool = True) -> None:
        from headway.progress import tracked

        for job in tracked(jobs, desc, "ensemble", enabled=progress and len(jobs) > 1, leave=False):
            job.fn(*job.args)


def make_executor(name: str = "local", address: str | None = None, cpus: float | None = None,
                  gpus: float | None = None, memory: str | None = None, retries: int | None = None) -> Executor:
    """The executor named `name`; the other arguments apply to Ray (address of the cluster, resources
    each ensemble task reserves, retries after a lost worker; None: Ray's defaults) and are refused for `local`."""
    if name == "local":
        given = [flag for flag, value in (("--ray-address", address), ("--ray-cpus", cpus), ("--ray-gpus", gpus),
                                          ("--ray-memory", memory), ("--ray-retries", retries)) if value is not None]
        if given:
            raise ConfigError(f"{', '.join(given)} set with --executor local; add --executor ray")
        return LocalExecutor()
    if name == "ray":
        from headway.execution.ray_cluster import RayExecutor, TaskResources

        return RayExecutor(address, TaskResources.parse(cpus, gpus, memory, retries))
    raise ConfigError(f"executor = {name!r} is not known; use one of {', '.join(EXECUTORS)}")
