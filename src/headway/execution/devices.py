"""The torch device a job runs on, resolved on the machine that runs it."""

from __future__ import annotations

import platform

import torch

from headway.errors import ConfigError


def resolve_device(device: str, here: bool = True) -> torch.device:
    """`auto` picks the GPU when there is one, else the CPU; anything unusable is refused. `here` False (a dry run,
    which may plan for another machine): a CUDA device this machine lacks is taken as it is."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        target = torch.device(device)
    except RuntimeError:
        raise ConfigError(f"device = {device!r} is not a device; use auto, cpu, cuda or cuda:N") from None
    if target.type == "cuda" and here and not torch.cuda.is_available():
        raise ConfigError(f"device = {device!r} but no CUDA GPU is available here; use auto or cpu")
    if target.type == "cuda" and here and (target.index or 0) >= torch.cuda.device_count():
        raise ConfigError(f"device = {device!r} but this machine has {torch.cuda.device_count()} GPU(s); "
                          f"use cuda:0 … cuda:{torch.cuda.device_count() - 1}")
    if target.type not in ("cpu", "cuda"):
        raise ConfigError(f"device = {device!r} is not supported; use auto, cpu, cuda or cuda:N")
    if target.type == "cpu" and target.index not in (None, 0):
        raise ConfigError(f"device = {device!r} names a CPU that torch does not have; use cpu (all its cores)")
    return target


def device_name(target: torch.device) -> str:
    """'cuda: NVIDIA H200', 'cpu: x86_64': the device's type and what it is, for summaries and reports."""
    name = torch.cuda.get_device_name(target) if target.type == "cuda" else platform.processor()
    return f"{target.type}: {name or platform.machine()}"
