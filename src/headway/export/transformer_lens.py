"""One run of a headway ensemble as a TransformerLens model whose outputs are headway's.

TransformerLens 4.x: a `TransformerBridge` from `TransformerBridge.boot_native` (its own GPT-2-style
model: pre-LN, learned positions, exact GELU, attention scaled by 1/√d_head, causal or bidirectional),
loaded with the run's weights through TransformerLens' `convert_tl_checkpoint`; headway's parameter
names and shapes are already TransformerLens'. TransformerLens 3.x, where installed: a
`HookedTransformer` loaded with the same state dict. Nothing is folded or centred, so the model computes
headway's function exactly (to float rounding).

Packed layouts go through a combined vocabulary (`headway.export.tokens`) whose ids start after the raw
headway ids, whose embedding rows are NaN: headway's slot ids fed in as they are give NaN outputs, never
other numbers. Readout: TransformerLens returns [batch, pos, d_out] at every position; headway reads the
last position (retrieval: every target's block of `vocab` outputs side by side) or the last
`readout_positions` (sorting), which `TransformerLensExport.outputs` picks.

A run trained with the MSE loss reads its outputs as regressions onto one-hot targets, so a constant shift
changes them, and TransformerLens' default weight processing (`enable_compatibility_mode`, `process_weights`)
centres the unembedding (`center_unembed`; and TransformerLens 4.3's `fold_ln`, which centres it over the
outputs when d_vocab ≠ d_vocab_out). Such an export has one more output column, minus the sum of the others,
so every row of W_U and b_U has mean zero over the outputs and centring changes nothing: the default
processing keeps every output (tested). `outputs` drops the column. A cross-entropy export has none: a
constant per position leaves every softmax as it was.
"""

from __future__ import annotations

import importlib.metadata
import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.export.tokens import TokenMap, token_map
from headway.limits import MAX_CONTEXT, MAX_HEADS, MAX_LAYERS, MAX_MLP, MAX_STEPS, MAX_WIDTH
from headway.model.config import ATTENTION_KINDS, LensConfig
from headway.recipe import LOSSES
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps
from headway.runs.config import RunConfig
from headway.runs.store import find_run, load_model, load_runs
from headway.settings import is_integer

_INSTALL = "pip install 'headway[tl]' (TransformerLens 4.x)"
CONFIG_FILE = "config.json"  # TransformerBridgeConfig fields (TransformerLens 4.x)
WEIGHTS_FILE = "model.safetensors"  # the bridge's state dict
HEADWAY_FILE = "headway.json"  # the run, the step, the token map and the readout
EXPORT_FILES = (CONFIG_FILE, WEIGHTS_FILE, HEADWAY_FILE)


def transformer_lens_major() -> int:
    """The installed TransformerLens' major version; refused when it is absent."""
    try:
        return int(importlib.metadata.version("transformer-lens").split(".")[0])
    except importlib.metadata.PackageNotFoundError:
        raise ConfigError(f"TransformerLens is not installed; run: {_INSTALL}") from None


def balanced_unembedding(state: dict[str, Tensor]) -> dict[str, Tensor]:
    """`state` with one more output: W_U's and b_U's last column minus the sum of the others, so that every row
    has mean zero over the outputs and TransformerLens' centring of the unembedding changes no output."""
    w_u, b_u = state["unembed.W_U"], state["unembed.b_U"]
    return {**state, "unembed.W_U": torch.cat([w_u, -w_u.sum(-1, keepdim=True)], dim=-1),
            "unembed.b_U": torch.cat([b_u, -b_u.sum(-1, keepdim=True)])}


@dataclass
class TransformerLensExport:
    """A TransformerLens model of one run, the map from headway's tokens to its input, and its readout."""

    model: Any
    config: dict[str, Any]  # the model's TransformerBridgeConfig fields
    tokens: TokenMap
    readout_positions: int
    loss: str
    run_id: str
    step: int
    d_out: int  # headway's outputs: the first d_out of TransformerLens' (an MSE export adds a balancing column)

    def outputs(self, logits: Tensor) -> Tensor:
        """headway's outputs from TransformerLens logits [batch, pos, d_vocab_out]: [batch, d_out] at the last
        position, or [batch, k, d_out] at the last k when the task reads out k positions."""
        logits = logits[..., : self.d_out]
        if self.readout_positions == 1:
            return logits[:, -1]
        return logits[:, -self.readout_positions :]

    def __call__(self, tokens: Tensor | np.ndarray) -> Tensor:
        """headway's outputs for headway tokens, computed by the TransformerLens model."""
        return self.outputs(self.model(self.tokens(tokens).to(_device_of(self.model))))


def _device_of(model: Any) -> torch.device:
    return next(model.parameters()).device


def _build(config: dict[str, Any], state: dict[str, Tensor], device: str | torch.device) -> Any:
    """The TransformerLens model of `config` holding `state` (TransformerLens property names)."""
    major = transformer_lens_major()
    if major >= 4:
        import transformer_lens.model_bridge.sources.native  # noqa: F401 - attaches boot_native
        from transformer_lens.config import TransformerBridgeConfig
        from transformer_lens.model_bridge import TransformerBridge
        from transformer_lens.utilities.tl_checkpoint_conversion import convert_tl_checkpoint

        cfg = TransformerBridgeConfig(**config, architecture="TransformerLensNative", init_weights=False)
        model = TransformerBridge.boot_native(cfg, device=device)
        model.load_state_dict(convert_tl_checkpoint(state, cfg), strict=True)
        return model
    if major == 3:
        from transformer_lens import HookedTransformer, HookedTransformerConfig

        model = HookedTransformer(HookedTransformerConfig(**config, device=str(device)))
        missing, unexpected = model.load_state_dict(state, strict=False)
        if unexpected or any(not key.endswith((".mask", ".IGNORE")) for key in missing):
            raise ConfigError(f"TransformerLens 3.x did not take the weights (missing {missing}, "
                              f"unexpected {unexpected})")
        return model
    raise ConfigError(f"TransformerLens {major}.x is not supported; install 3.x or 4.x ({_INSTALL})")


def _locate(path: Path | str, instance: int | None, run_id: str | None) -> tuple[Path, int]:
    """(ensemble directory, instance) of the run to export."""
    if run_id is not None:
        if instance is not None:
            raise ConfigError("give instance or run_id, not both")
        return find_run(path, run_id)
    path = Path(path)
    if not (path / layout.CONFIG).is_file():
        raise ConfigError(f"{path} is not an ensemble directory (no {layout.CONFIG}); give one, or a sweep "
                          "directory with run_id")
    return path, 0 if instance is None else instance


def to_transformer_lens(path: Path | str, instance: int | None = None, step: int | None = None,
                        run_id: str | None = None, device: str | torch.device = "cpu") -> TransformerLensExport:
    """Instance `instance` (default 0) of the ensemble at `path`, or the run `run_id` anywhere under it,
    at checkpoint `step` (default: the last), as a TransformerLens model with its token map and readout."""
    run_dir, instance = _locate(path, instance, run_id)
    model = load_model(run_dir, instances=instance, step=step)
    run: RunConfig = load_runs(run_dir)[int(instance)]
    mapping = token_map(run.task, run.model.d_model)
    state = model.instance_state(0)
    state["embed.W_E"] = mapping.combined_embedding(state["embed.W_E"])
    d_out = run.task.d_out
    if run.train.loss == "mse":
        state = balanced_unembedding(state)
    config = LensConfig.of(run.model, run.task.n_ctx, mapping.d_vocab, state["unembed.b_U"].shape[0]).to_dict()
    tl_model = _build(config, state, device)
    used = checkpoint_steps(run_dir)[-1] if step is None else int(step)
    return TransformerLensExport(tl_model, config, mapping, run.task.readout_positions, run.train.loss, run.run_id,
                                 used, d_out)


def write_export(export: TransformerLensExport, out: Path | str) -> TransformerLensExport:
    """Save `export` (TransformerLens 4.x) to a folder that `load_export`, or TransformerLens alone,
    loads: config.json, model.safetensors (the bridge's state dict) and headway.json."""
    from safetensors.torch import save

    if transformer_lens_major() < 4:
        raise ConfigError("writing an export folder needs TransformerLens 4.x; with 3.x use "
                          "to_transformer_lens in Python")
    out = Path(out)
    state = {k: v.detach().contiguous().cpu() for k, v in export.model.state_dict().items()}
    checksums = {CONFIG_FILE: layout.write_text(out / CONFIG_FILE, json.dumps(export.config, indent=2)),
                 WEIGHTS_FILE: layout.write_bytes(out / WEIGHTS_FILE, save(state))}
    meta = {"run_id": export.run_id, "step": export.step, "loss": export.loss, "d_out": export.d_out,
            "readout_positions": export.readout_positions, "token_map": export.tokens.to_dict(),
            "checksums": checksums}
    layout.write_json(out / HEADWAY_FILE, meta)  # checked, and last: a folder without it is no export yet
    return export


def load_export(folder: Path | str, device: str | torch.device = "cpu") -> TransformerLensExport:
    """A folder from `write_export` as a TransformerLensExport (TransformerLens 4.x)."""
    from safetensors.torch import load

    from safetensors import SafetensorError

    folder = Path(folder)
    if not (folder / HEADWAY_FILE).is_file():
        raise ConfigError(f"{folder} is not a TransformerLens export (no {HEADWAY_FILE})")
    meta = _export_meta(folder / HEADWAY_FILE)
    checksums = meta["checksums"]
    config = _lens_config(folder / CONFIG_FILE, layout.parse_json(
        folder / CONFIG_FILE, layout.read_text(folder / CONFIG_FILE, checksums[CONFIG_FILE])))
    token_map = TokenMap(**meta["token_map"])
    d_out = meta.get("d_out", config["d_vocab_out"])
    if token_map.d_vocab != config["d_vocab"] or not d_out <= config["d_vocab_out"]:
        raise layout.damaged(folder / HEADWAY_FILE, f"its token map ({token_map.d_vocab} ids) and {d_out} outputs do "
                                                    f"not fit {CONFIG_FILE} (d_vocab {config['d_vocab']}, "
                                                    f"d_vocab_out {config['d_vocab_out']})")
    try:
        weights = load(layout.read_bytes(folder / WEIGHTS_FILE, checksums[WEIGHTS_FILE]))
    except SafetensorError as err:
        raise layout.damaged(folder / WEIGHTS_FILE, f"not a readable safetensors file: {err}") from None
    held = sum(tensor.numel() for tensor in weights.values())
    if _lens_weights(config) > held:
        raise layout.damaged(folder / WEIGHTS_FILE, f"it holds {held} weights; {CONFIG_FILE} describes a model of "
                                                    f"at least {_lens_weights(config)}")
    import transformer_lens.model_bridge.sources.native  # noqa: F401 - attaches boot_native
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(
        TransformerBridgeConfig(**config, architecture="TransformerLensNative", init_weights=False), device=device)
    expected = {name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in model.state_dict().items()}
    found = {name: (tensor.dtype, tuple(tensor.shape)) for name, tensor in weights.items()}
    if found != expected:
        wrong = sorted(set(found) ^ set(expected)) or sorted(n for n in found if found[n] != expected[n])
        raise layout.damaged(folder / WEIGHTS_FILE, f"not the tensors the model of {CONFIG_FILE} holds (first "
                                                    f"difference: {wrong[0]})")
    model.load_state_dict({name: tensor.to(device) for name, tensor in weights.items()}, strict=True)
    return TransformerLensExport(model, config, token_map, meta["readout_positions"], meta["loss"], meta["run_id"],
                                 meta["step"], d_out)


_MAX_IDS = 2**31 - 1  # input ids or outputs of an export; its weights file bounds them further (`_lens_weights`)
MAX_SLOTS = 64  # token slots at one position (a task's layout uses at most 3)
# What write_export puts in headway.json, by key: whether a value is of its kind (d_out: from TransformerLens 4.3).
_META = {"run_id": lambda v: isinstance(v, str), "step": lambda v: is_integer(v) and 0 <= v <= MAX_STEPS,
         "loss": lambda v: v in LOSSES, "readout_positions": lambda v: is_integer(v) and 1 <= v <= MAX_CONTEXT,
         "d_out": lambda v: is_integer(v) and 1 <= v <= _MAX_IDS,
         "token_map": lambda v: isinstance(v, dict) and {"slots", "slot_vocab", "slot_axis"} <= set(v)
         <= {f.name for f in fields(TokenMap)} and isinstance(v["slot_axis"], bool)
         and is_integer(v["slots"]) and 1 <= v["slots"] <= MAX_SLOTS
         and all(is_integer(v.get(k, 0)) and 0 <= v.get(k, 0) <= _MAX_IDS for k in ("slot_vocab", "offset")),
         "checksums": lambda v: isinstance(v, dict) and {CONFIG_FILE, WEIGHTS_FILE} <= v.keys()
         and all(isinstance(x, str) for x in v.values())}


def _export_meta(path: Path) -> dict[str, Any]:
    """headway.json of an export, each entry checked against what `write_export` writes there (`_META`)."""
    meta = layout.read_json(path)
    unknown, absent = sorted(set(meta) - set(_META)), sorted(set(_META) - set(meta) - {"d_out"})
    wrong = [key for key in _META if key in meta and not _META[key](meta[key])]
    if unknown or absent or wrong:
        raise layout.damaged(path, f"not what an export writes there (unexpected: {unknown or 'none'}; missing: "
                                   f"{absent or 'none'}; of the wrong kind: {wrong or 'none'})")
    return meta


def _lens_config(path: Path, config: Any) -> dict[str, Any]:
    """An export's config.json, checked against the fields `LensConfig` writes and their kinds and ranges."""
    sizes = {"d_model": MAX_WIDTH, "n_layers": MAX_LAYERS, "n_heads": MAX_HEADS, "d_head": MAX_WIDTH,
             "n_ctx": MAX_CONTEXT, "d_vocab": _MAX_IDS, "d_vocab_out": _MAX_IDS}
    kinds = {"d_mlp": lambda v: v is None or (is_integer(v) and 1 <= v <= MAX_MLP),
             "attn_only": lambda v: isinstance(v, bool), "act_fn": lambda v: v == "gelu",
             "eps": lambda v: v == LensConfig.eps, "normalization_type": lambda v: v in ("LN", None),
             "attention_dir": lambda v: v in ATTENTION_KINDS, "positional_embedding_type": lambda v: v == "standard",
             "default_prepend_bos": lambda v: v is False,
             **{name: (lambda most: lambda v: is_integer(v) and 1 <= v <= most)(most) for name, most in sizes.items()}}
    if not isinstance(config, dict) or set(config) != {f.name for f in fields(LensConfig)}:
        raise layout.damaged(path, f"not the fields of a TransformerLens config headway writes "
                                   f"({', '.join(f.name for f in fields(LensConfig))})")
    wrong = [name for name, ok in kinds.items() if not ok(config[name])]
    if wrong:
        raise layout.damaged(path, f"{wrong[0]} = {config[wrong[0]]!r} is not a value headway writes there")
    return config


def _lens_weights(config: dict[str, Any]) -> int:
    """The fewest weights a model of a TransformerLens config holds: its embeddings, attention and MLP matrices
    and unembedding (what bounds the model built from it by the weights file beside it)."""
    d, heads = config["d_model"], config["n_heads"] * config["d_head"]
    block = 4 * heads * d + 2 * d * (config["d_mlp"] or 0)
    return (config["d_vocab"] + config["n_ctx"] + config["d_vocab_out"]) * d + config["n_layers"] * block
