"""Architecture of one transformer; an ensemble holds E instances of it."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, ClassVar

from headway.errors import ConfigError
from headway.limits import MAX_HEADS, MAX_LAYERS, MAX_MLP, MAX_WIDTH
from headway.settings import Settings, check_bool, check_choice, check_int, check_number

ATTENTION_KINDS = ("causal", "bidirectional")


@dataclass(frozen=True)
class ModelConfig(Settings):
    """GPT-2-style decoder shape; `d_mlp=0` makes it attention-only.

    `d_head` and `d_mlp` may be given as None (their defaults) but always hold the resolved width, so a
    table of configs never has None in them; `stored_dict` writes a width equal to its default as None,
    so a run's id does not depend on whether its default width was written out."""

    layers: int = 2
    heads: int = 8
    d_model: int = 128
    d_head: int | None = None  # None: d_model // heads (resolved on construction)
    d_mlp: int | None = None  # None: 4 * d_model (resolved on construction); 0 = attention-only
    layernorm: bool = True
    attention: str = "causal"
    init_scale: float = 1.0  # multiplies the N(0, 0.02) initial weight matrices (docs/decisions.md)

    LATER: ClassVar[dict[str, Any]] = {"init_scale": 1.0}

    def __post_init__(self) -> None:
        self.normalise(
            layers=check_int("layers", self.layers, 1, MAX_LAYERS),
            heads=check_int("heads", self.heads, 1, MAX_HEADS),
            d_model=check_int("d_model", self.d_model, 1, MAX_WIDTH),
            d_head=None if self.d_head is None else check_int("d_head", self.d_head, 1, MAX_WIDTH),
            d_mlp=None if self.d_mlp is None else check_int("d_mlp", self.d_mlp, 0, MAX_MLP),
            layernorm=check_bool("layernorm", self.layernorm),
            attention=check_choice("attention", self.attention, ATTENTION_KINDS),
            init_scale=check_number("init_scale", self.init_scale, 0.0, low_open=True),
        )
        if self.d_head is None and self.d_model % self.heads:
            raise ConfigError(
                f"d_model = {self.d_model} is not divisible by heads = {self.heads}; "
                "choose heads dividing d_model or set d_head"
            )
        self.normalise(d_head=self.default_head_dim if self.d_head is None else self.d_head,
                       d_mlp=4 * self.d_model if self.d_mlp is None else self.d_mlp)

    @property
    def default_head_dim(self) -> int | None:
        """d_model // heads where heads divide d_model, else None (d_head must then be given)."""
        return None if self.d_model % self.heads else self.d_model // self.heads

    @property
    def head_dim(self) -> int:
        """Width of one head's query/key/value space."""
        return self.d_head

    @property
    def mlp_dim(self) -> int:
        """Hidden width of the MLP (0 when attention-only)."""
        return self.d_mlp

    def stored_dict(self) -> dict[str, Any]:
        """The settings that identify a run, with a default width written as None."""
        out = super().stored_dict()
        if self.d_head == self.default_head_dim:
            out["d_head"] = None
        if self.d_mlp == 4 * self.d_model:
            out["d_mlp"] = None
        return out


@dataclass(frozen=True)
class LensConfig:
    """A model's shape under TransformerLens' config names (`cfg.n_layers`, `cfg.d_vocab_out`, …): what the
    single-model view shows as `cfg` and what an export hands TransformerLens' TransformerBridgeConfig."""

    d_model: int
    n_layers: int
    n_heads: int
    d_head: int
    d_mlp: int | None  # None when attention-only, as TransformerLens writes it
    attn_only: bool
    n_ctx: int
    d_vocab: int
    d_vocab_out: int
    act_fn: str = "gelu"
    eps: float = 1e-5
    normalization_type: str | None = "LN"
    attention_dir: str = "causal"
    positional_embedding_type: str = "standard"
    default_prepend_bos: bool = False

    @classmethod
    def of(cls, model: ModelConfig, n_ctx: int, d_vocab: int, d_out: int) -> LensConfig:
        """The TransformerLens names of a headway model shape with `d_vocab` input ids and `d_out` outputs."""
        return cls(d_model=model.d_model, n_layers=model.layers, n_heads=model.heads, d_head=model.head_dim,
                   d_mlp=model.mlp_dim or None, attn_only=model.mlp_dim == 0, n_ctx=n_ctx, d_vocab=d_vocab,
                   d_vocab_out=d_out, normalization_type="LN" if model.layernorm else None,
                   attention_dir=model.attention)

    def to_dict(self) -> dict[str, Any]:
        """The fields as TransformerBridgeConfig (HookedTransformerConfig on 3.x) keywords."""
        return asdict(self)
