"""Architecture of one transformer; an ensemble holds E instances of it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from headway.errors import ConfigError
from headway.settings import Settings, check_bool, check_choice, check_int, check_number

ATTENTION_KINDS = ("causal", "bidirectional")


@dataclass(frozen=True)
class ModelConfig(Settings):
    """GPT-2-style decoder shape; `d_mlp=0` makes it attention-only."""

    layers: int = 2
    heads: int = 8
    d_model: int = 128
    d_head: int | None = None  # default d_model // heads
    d_mlp: int | None = None  # default 4 * d_model; 0 = attention-only
    layernorm: bool = True
    attention: str = "causal"
    init_scale: float = 1.0  # multiplies the N(0, 0.02) initial weight matrices (docs/decisions.md)

    LATER: ClassVar[dict[str, Any]] = {"init_scale": 1.0}

    def __post_init__(self) -> None:
        self.normalise(
            layers=check_int("layers", self.layers, 1),
            heads=check_int("heads", self.heads, 1),
            d_model=check_int("d_model", self.d_model, 1),
            d_head=None if self.d_head is None else check_int("d_head", self.d_head, 1),
            d_mlp=None if self.d_mlp is None else check_int("d_mlp", self.d_mlp, 0),
            layernorm=check_bool("layernorm", self.layernorm),
            attention=check_choice("attention", self.attention, ATTENTION_KINDS),
            init_scale=check_number("init_scale", self.init_scale, 0.0, low_open=True),
        )
        if self.d_head is None and self.d_model % self.heads:
            raise ConfigError(
                f"d_model = {self.d_model} is not divisible by heads = {self.heads}; "
                "choose heads dividing d_model or set d_head"
            )

    @property
    def head_dim(self) -> int:
        """Width of one head's query/key/value space."""
        return self.d_head if self.d_head is not None else self.d_model // self.heads

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the MLP (0 when attention-only)."""
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp
