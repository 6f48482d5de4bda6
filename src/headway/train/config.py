"""Training recipe. Defaults are the paper's: Adam lr 1e-3, decoupled weight decay 0.1,
batch 512, 10k steps, a pool of 2^20 examples, MSE loss."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from headway.errors import ConfigError
from headway.train.schedule import SCHEDULES

OPTIMIZERS = ("adamw", "adam")
LOSSES = ("mse", "cross_entropy")


@dataclass(frozen=True)
class TrainConfig:
    """How one run is trained; `lr` and `weight_decay` may differ between members of an ensemble."""

    steps: int = 10_000
    batch_size: int = 512
    lr: float = 1e-3
    weight_decay: float = 0.1
    optimizer: str = "adamw"  # adamw: decoupled decay; adam: L2 penalty added to the gradient
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    schedule: str = "constant"
    warmup_steps: int = 0
    final_lr_fraction: float = 0.0  # lr at the last step / lr, for linear and cosine
    grad_clip: float = 0.0  # max gradient norm per instance; 0 = no clipping
    loss: str = "mse"
    train_size: int = 2**20
    val_size: int = 4096
    eval_every: int = 100
    checkpoint_every: int = 1000
    log_checkpoints: int = 20  # extra checkpoints spaced logarithmically in steps

    def __post_init__(self) -> None:
        for f in fields(self):  # 0 and 0.0 are one setting: store floats as floats (stable run ids)
            value = getattr(self, f.name)
            if f.type == "float" and isinstance(value, int) and not isinstance(value, bool):
                object.__setattr__(self, f.name, float(value))
        positive = ("steps", "batch_size", "train_size", "val_size", "eval_every", "checkpoint_every")
        for name in positive:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} = {value!r} is invalid; use an integer >= 1")
        for name in ("warmup_steps", "log_checkpoints"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ConfigError(f"{name} = {value!r} is invalid; use an integer >= 0")
        if not self.lr > 0:
            raise ConfigError(f"lr = {self.lr!r} is invalid; use a number > 0")
        for name in ("weight_decay", "grad_clip", "eps"):
            if not getattr(self, name) >= 0:
                raise ConfigError(f"{name} = {getattr(self, name)!r} is invalid; use a number >= 0")
        for name in ("beta1", "beta2"):
            if not 0 <= getattr(self, name) < 1:
                raise ConfigError(f"{name} = {getattr(self, name)!r} is invalid; use a number in [0, 1)")
        if not 0 <= self.final_lr_fraction <= 1:
            raise ConfigError(f"final_lr_fraction = {self.final_lr_fraction!r} is invalid; use a number in [0, 1]")
        for name, allowed in (("optimizer", OPTIMIZERS), ("schedule", SCHEDULES), ("loss", LOSSES)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{name} = {getattr(self, name)!r} is unknown; choose one of {', '.join(allowed)}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrainConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
