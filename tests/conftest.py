"""Shared helpers for the test suite: tiny, fast run configurations."""

from __future__ import annotations

import os

import pytest

from headway.execution.loopback import free_port  # noqa: F401 - shared with the tests that import it from here
from headway.runs.config import RunConfig


def pytest_configure(config: pytest.Config) -> None:
    """Under pytest-xdist (`make test` runs two workers) each worker, and every process it starts, computes on one
    thread: two one-thread workers keep both cores busy, where one process of two threads gains about 1.4x on
    the suite's small models and leaves its Python, start-up and subprocess time on one core."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        os.environ["OMP_NUM_THREADS"] = "1"
        import torch

        torch.set_num_threads(1)


TINY = dict(vocab=12, chains=2, hops=1, layers=1, heads=2, d_model=16, batch_size=32, steps=60,
            train_size=2048, val_size=256, eval_every=20, checkpoint_every=30, log_checkpoints=4)


def tiny_run(**overrides) -> RunConfig:
    """A run that trains in about a second on one CPU core."""
    return RunConfig.from_flat({**TINY, **overrides})


@pytest.fixture
def tiny():
    return tiny_run


@pytest.fixture(scope="module")
def one_thread():
    """Torch on one thread for a module of tiny models: many tiny ops, which a second thread (on a
    machine shared with other jobs) only slows down. Use with `pytest.mark.usefixtures("one_thread")`."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)
