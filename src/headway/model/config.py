"""Architecture of one transformer; an ensemble holds E instances of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Any

from headway.errors import ConfigError

ATTENTION_KINDS = ("causal", "bidirectional")


@dataclass(frozen=True)
class ModelConfig:
    """GPT-2-style decoder shape; `d_mlp=0` makes it attention-only."""

    layers: int = 2
    heads: int = 8
    d_model: int = 128
    d_head: int | None = None  # default d_model // heads
    d_mlp: int | None = None  # default 4 * d_model; 0 = attention-only
    layernorm: bool = True
    attention: str = "causal"

    def __post_init__(self) -> None:
        for name in ("layers", "heads", "d_model"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"{name} = {value!r} is invalid; use an integer >= 1")
        if self.d_head is not None and (not isinstance(self.d_head, int) or self.d_head < 1):
            raise ConfigError(f"d_head = {self.d_head!r} is invalid; use an integer >= 1")
        if self.d_head is None and self.d_model % self.heads:
            raise ConfigError(
                f"d_model = {self.d_model} is not divisible by heads = {self.heads}; "
                "choose heads dividing d_model or set d_head"
            )
        if self.d_mlp is not None and (not isinstance(self.d_mlp, int) or self.d_mlp < 0):
            raise ConfigError(f"d_mlp = {self.d_mlp!r} is invalid; use an integer >= 0 (0 = attention-only)")
        if self.attention not in ATTENTION_KINDS:
            raise ConfigError(f"attention = {self.attention!r} is unknown; choose one of {', '.join(ATTENTION_KINDS)}")

    @property
    def head_dim(self) -> int:
        """Width of one head's query/key/value space."""
        return self.d_head if self.d_head is not None else self.d_model // self.heads

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the MLP (0 when attention-only)."""
        return 4 * self.d_model if self.d_mlp is None else self.d_mlp

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ModelConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})
