"""The training recipe of a run (`TrainConfig`). Defaults are the retrieval paper's: Adam lr 1e-3,
decoupled weight decay 0.1, batch 512, 10k steps, a pool of 2^20 examples, MSE loss."""

from __future__ import annotations

from dataclasses import dataclass

from headway.errors import ConfigError
from headway.limits import MAX_BATCH, MAX_CHECKPOINTS, MAX_EVALUATIONS, MAX_POOL, MAX_STEPS
from headway.settings import Settings, check_choice, check_int, check_number

EVAL_CHUNK = 1024  # examples per forward pass when a fixed set is evaluated (bounds evaluation memory)

OPTIMIZERS = ("adamw", "adam")
LOSSES = ("mse", "cross_entropy")
SCHEDULES = ("constant", "linear", "cosine")


@dataclass(frozen=True)
class TrainConfig(Settings):
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
        most = {"steps": MAX_STEPS, "batch_size": MAX_BATCH, "train_size": MAX_POOL, "val_size": MAX_POOL,
                "eval_every": MAX_STEPS, "checkpoint_every": MAX_STEPS}
        self.normalise(**{name: check_int(name, getattr(self, name), 1, most[name]) for name in most})
        self.normalise(warmup_steps=check_int("warmup_steps", self.warmup_steps, 0, MAX_STEPS),
                       log_checkpoints=check_int("log_checkpoints", self.log_checkpoints, 0, MAX_CHECKPOINTS))
        self.normalise(
            lr=check_number("lr", self.lr, 0.0, low_open=True),
            weight_decay=check_number("weight_decay", self.weight_decay, 0.0),
            grad_clip=check_number("grad_clip", self.grad_clip, 0.0),
            eps=check_number("eps", self.eps, 0.0),
            beta1=check_number("beta1", self.beta1, 0.0, 1.0, high_open=True),
            beta2=check_number("beta2", self.beta2, 0.0, 1.0, high_open=True),
            final_lr_fraction=check_number("final_lr_fraction", self.final_lr_fraction, 0.0, 1.0),
            optimizer=check_choice("optimizer", self.optimizer, OPTIMIZERS),
            schedule=check_choice("schedule", self.schedule, SCHEDULES),
            loss=check_choice("loss", self.loss, LOSSES),
        )
        self._check_counts()

    def _check_counts(self) -> None:
        """Refuse a recipe that keeps more checkpoints or logs more evaluations than `headway.limits`
        allows, and a final learning-rate fraction under a schedule that has no end to reach."""
        kept = self.steps // self.checkpoint_every + self.log_checkpoints
        if kept > MAX_CHECKPOINTS:
            raise ConfigError(f"steps / checkpoint_every + log_checkpoints = {kept} checkpoints is more than "
                              f"{MAX_CHECKPOINTS}; raise checkpoint_every or lower log_checkpoints")
        if self.steps // self.eval_every > MAX_EVALUATIONS:
            raise ConfigError(f"steps / eval_every = {self.steps // self.eval_every} evaluations is more than "
                              f"{MAX_EVALUATIONS}; raise eval_every")
        if self.schedule == "constant" and self.final_lr_fraction != 0.0:
            raise ConfigError(f"final_lr_fraction = {self.final_lr_fraction:g} applies to the linear and cosine "
                              "schedules only (schedule = 'constant' here); leave it out or choose one of those")
