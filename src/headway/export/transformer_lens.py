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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from headway.errors import ConfigError
from headway.export.tokens import TokenMap, token_map
from headway.model.config import LensConfig
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps
from headway.runs.config import RunConfig
from headway.runs.store import find_run, load_model, load_runs

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

    folder = Path(folder)
    if not (folder / HEADWAY_FILE).is_file():
        raise ConfigError(f"{folder} is not a TransformerLens export (no {HEADWAY_FILE})")
    meta = layout.read_json(folder / HEADWAY_FILE)
    checksums = meta.get("checksums")
    if not isinstance(checksums, dict) or not {CONFIG_FILE, WEIGHTS_FILE} <= checksums.keys():
        raise layout.damaged(folder / HEADWAY_FILE, f"no checksums of {CONFIG_FILE} and {WEIGHTS_FILE} in it")
    config = json.loads(layout.read_text(folder / CONFIG_FILE, checksums[CONFIG_FILE]))
    weights = load(layout.read_bytes(folder / WEIGHTS_FILE, checksums[WEIGHTS_FILE]))
    import transformer_lens.model_bridge.sources.native  # noqa: F401 - attaches boot_native
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    model = TransformerBridge.boot_native(
        TransformerBridgeConfig(**config, architecture="TransformerLensNative", init_weights=False), device=device)
    model.load_state_dict({name: tensor.to(device) for name, tensor in weights.items()}, strict=True)
    return TransformerLensExport(model, config, TokenMap(**meta["token_map"]), meta["readout_positions"],
                                 meta["loss"], meta["run_id"], meta["step"], meta.get("d_out", config["d_vocab_out"]))
