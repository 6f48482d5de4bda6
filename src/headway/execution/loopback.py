"""A Ray cluster of several nodes on this machine (127.0.0.1), each node started by `ray start` as a
process of its own, as on a real cluster: for the tests and benchmarks of the Ray executor, and to try
`--executor ray` before a real cluster is at hand."""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from headway.errors import ConfigError

OBJECT_STORE_BYTES = 100 * 2**20  # per node; jobs pass paths, not tensors, through Ray


def free_port() -> int:
    """A TCP port nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class LoopbackCluster:
    """`nodes` Ray nodes of `cpus` CPUs (and `gpus` GPUs) each on 127.0.0.1; a context manager that
    stops them on exit.

    `ray` is the `ray` command next to this Python (the same environment the workers must run)."""

    def __init__(self, nodes: int = 2, cpus: int = 1, gpus: int = 0, start_timeout: float = 90.0) -> None:
        if nodes < 1:
            raise ConfigError(f"nodes = {nodes}; a cluster needs at least its head node")
        if not isinstance(cpus, int) or cpus < 1:
            raise ConfigError(f"cpus = {cpus!r}; `ray start` takes a whole number of CPUs per node, at least 1")
        self.nodes, self.cpus, self.gpus, self.start_timeout = nodes, cpus, gpus, start_timeout
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.processes: list[subprocess.Popen] = []
        self.temp_dir = Path(tempfile.mkdtemp(prefix="hw-ray-", dir="/tmp"))  # short: Ray's socket paths
        self.ray = str(Path(sys.executable).with_name("ray"))
        token = self.temp_dir / "auth_token"
        token.write_text(secrets.token_hex(32))
        token.chmod(0o600)
        # What a driver (or `ray` command) needs in its environment to join: the cluster's own token.
        self.env = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN_PATH": str(token), "RAY_USAGE_STATS_ENABLED": "0"}

    def __enter__(self) -> LoopbackCluster:
        try:
            self.start()
        except BaseException:
            self.stop()  # the nodes' logs stay in temp_dir, which the error names
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
        shutil.rmtree(self.temp_dir, ignore_errors=True)

    def start(self) -> None:
        """Start the head, wait for its port, then the other nodes, and wait until all have joined."""
        common = ["--node-ip-address=127.0.0.1", f"--num-cpus={self.cpus}", f"--num-gpus={self.gpus}",
                  f"--object-store-memory={OBJECT_STORE_BYTES}", "--disable-usage-stats", "--block"]
        self.launch([self.ray, "start", "--head", f"--port={self.port}", "--include-dashboard=false",
                     f"--temp-dir={self.temp_dir}", *common])
        self.wait_for(lambda: self.listening(), "the head node to listen")
        for _ in range(self.nodes - 1):
            self.launch([self.ray, "start", f"--address={self.address}", *common])
        self.wait_for(lambda: self.live_nodes() >= self.nodes, f"{self.nodes} nodes to join")

    def launch(self, command: list[str]) -> None:
        env = {**os.environ, **self.env}
        log = open(self.temp_dir / f"node{len(self.processes)}.log", "w")  # noqa: SIM115 - lives with the node
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                               start_new_session=True))

    def listening(self) -> bool:
        try:
            socket.create_connection(("127.0.0.1", self.port), timeout=1.0).close()
            return True
        except OSError:
            return False

    def live_nodes(self) -> int:
        """Nodes `ray status` reports active."""
        result = subprocess.run([self.ray, "status", f"--address={self.address}"], capture_output=True, text=True,
                                timeout=60, env={**os.environ, **self.env})
        return result.stdout.count(" node_") if result.returncode == 0 else 0

    def wait_for(self, ready, what: str) -> None:
        deadline = time.monotonic() + self.start_timeout
        while not ready():
            dead = [i for i, p in enumerate(self.processes) if p.poll() is not None]
            if dead or time.monotonic() > deadline:
                last = (self.temp_dir / f"node{dead[0]}.log").read_text().strip().splitlines()[-1:] if dead else []
                raise RuntimeError(f"the loopback Ray cluster did not come up waiting for {what} "
                                   f"({' '.join(last) or 'timed out'}; logs in {self.temp_dir})")
            time.sleep(0.5)

    def stop(self) -> None:
        """Stop every node: SIGTERM to each `ray start --block` (it stops its node), then SIGKILL its group."""
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                pass
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.processes.clear()
