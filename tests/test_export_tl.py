"""`headway export tl`: trained runs as TransformerLens 4.x models whose outputs are headway's, for the
packed, flat, attention-only, conditional and sorting layouts; the MSE readout guarded; the folder loads
with TransformerLens alone."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import tiny_run

from headway.cli.main import main
from headway.errors import ConfigError
from headway.export.tokens import TokenMap, token_map
from headway.export.transformer_lens import load_export, to_transformer_lens
from headway.runs import layout
from headway.runs.store import load_model, load_runs
from headway.tasks.retrieval import RetrievalConfig
from headway.train.sweep import train_runs

pytest.importorskip("transformer_lens", reason="TransformerLens 4.x is a test extra (pip install 'headway[tl]')")
TOLERANCE = 1e-5
KINDS = {
    "packed": dict(layout="packed", hops=2, layers=2),
    "flat": dict(layout="flat", loss="cross_entropy"),
    "attention-only": dict(d_mlp=0, layernorm=False, attention="bidirectional"),
    "conditional": dict(conditional=True, hops=1, layers=2),
    "sorting": dict(task="sorting", length=4, values=10, gaps="uniform", d_model=16, heads=2, loss="cross_entropy"),
}


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One trained ensemble directory per kind of model (150 steps at a high learning rate, so the
    weights are far from their initialisation)."""
    out = tmp_path_factory.mktemp("tl")
    dirs = {}
    for kind, changes in KINDS.items():
        settings = {k: v for k, v in changes.items()}
        if settings.get("task") == "sorting":
            from headway.runs.config import RunConfig
            run = RunConfig.from_flat({**settings, "steps": 150, "batch_size": 32, "train_size": 1024,
                                       "val_size": 128, "eval_every": 50, "checkpoint_every": 75, "lr": 3e-3})
        else:
            run = tiny_run(steps=150, lr=3e-3, **settings)
        train_runs([run], out / kind, device="cpu", progress=False)
        (dirs[kind],) = layout.ensemble_dirs(out / kind)
    return dirs


def headway_and_tl(run_dir, **kwargs):
    """Outputs of the run at `run_dir` on 64 validation examples: headway's own and the export's."""
    run = load_runs(run_dir)[0]
    tokens = torch.as_tensor(run.task.draw(64, np.random.default_rng(1), validation=True).tokens)
    model = load_model(run_dir, instances=0, step=kwargs.get("step"))
    positions = run.task.readout_positions
    ours = model(tokens[None], readout="last" if positions == 1 else positions)[0]
    exported = to_transformer_lens(run_dir, **kwargs)
    with torch.no_grad():
        return ours, exported(tokens), exported, tokens


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_the_export_computes_headways_outputs(trained, kind):
    ours, theirs, exported, tokens = headway_and_tl(trained[kind])
    assert ours.shape == theirs.shape
    assert ours.std() > 0.05  # trained weights, not a near-zero initial readout
    assert (ours - theirs).abs().max() <= TOLERANCE, (kind, (ours - theirs).abs().max())
    assert type(exported.model).__name__ == "TransformerBridge"
    if kind in ("packed", "conditional"):  # a packed layout: one combined id per position
        assert exported.tokens.slots == tokens.shape[-1] > 1 and exported.tokens(tokens).dim() == 2


def test_an_earlier_checkpoint_and_the_combined_vocabulary(trained):
    run_dir = trained["packed"]
    ours, theirs, exported, _ = headway_and_tl(run_dir, step=60)
    assert exported.step == 60 and (ours - theirs).abs().max() <= TOLERANCE
    w_e = load_model(run_dir, instances=0, step=60).instance_state(0)["embed.W_E"]
    mapping = exported.tokens
    tokens = torch.tensor([[[3, mapping.slot_vocab + 5]]])
    row = exported.model.state_dict()["embed.weight"][mapping(tokens)[0, 0]]
    torch.testing.assert_close(row, w_e[3] + w_e[mapping.slot_vocab + 5])


def test_weight_processing_keeps_the_outputs_and_center_unembed_is_refused_for_mse(trained):
    mse_dir, ce_dir = trained["packed"], trained["flat"]
    ours, _, exported, tokens = headway_and_tl(mse_dir)
    assert exported.loss == "mse"
    with pytest.raises(ConfigError, match="center_unembed and fold_ln would shift the outputs of a run trained "
                                          "with the MSE loss.*pass center_unembed=False, fold_ln=False"):
        exported.model.enable_compatibility_mode(disable_warnings=True)
    with pytest.raises(ConfigError, match="pass fold_ln=False"):
        exported.model.process_weights(center_unembed=False)
    exported = to_transformer_lens(mse_dir)
    exported.model.enable_compatibility_mode(disable_warnings=True, center_unembed=False, fold_ln=False)
    with torch.no_grad():
        assert (exported(tokens) - ours).abs().max() <= 1e-5  # centring the writing weights keeps the outputs
    unguarded = to_transformer_lens(mse_dir)  # why fold_ln is refused: TransformerLens 4.3 shifts the outputs
    type(unguarded.model).process_weights(unguarded.model, center_unembed=False)
    with torch.no_grad():
        assert (unguarded(tokens) - ours).abs().max() > 1e-3

    ours, _, exported, tokens = headway_and_tl(ce_dir)
    exported.model.enable_compatibility_mode(disable_warnings=True)  # center_unembed too: softmax unchanged
    with torch.no_grad():
        theirs = exported(tokens)
    torch.testing.assert_close(theirs.log_softmax(-1), ours.log_softmax(-1), atol=1e-4, rtol=0)


def test_the_cli_writes_a_folder_transformer_lens_loads_alone(trained, tmp_path, capsys):
    from safetensors.torch import load_file
    from transformer_lens.config import TransformerBridgeConfig
    from transformer_lens.model_bridge import TransformerBridge

    run_dir = trained["conditional"]
    run_id = load_runs(run_dir)[0].run_id
    assert main(["export", "tl", str(run_dir.parent), "--run-id", run_id, "--out", str(tmp_path / "tl")]) == 0
    ours, _, _, tokens = headway_and_tl(run_dir)
    # the documented lines, TransformerLens alone
    folder = tmp_path / "tl"
    config = json.loads((folder / "config.json").read_text())
    meta = json.loads((folder / "headway.json").read_text())
    model = TransformerBridge.boot_native(TransformerBridgeConfig(**config, architecture="TransformerLensNative"))
    model.load_state_dict(load_file(str(folder / "model.safetensors")), strict=True)
    slots, slot_vocab = meta["token_map"]["slots"], meta["token_map"]["slot_vocab"]
    digits = tokens - torch.arange(slots) * slot_vocab
    ids = (digits * slot_vocab ** torch.arange(slots - 1, -1, -1)).sum(-1)
    with torch.no_grad():
        assert (model(ids)[:, -1] - ours).abs().max() <= TOLERANCE
        assert (load_export(folder)(tokens) - ours).abs().max() <= TOLERANCE
    assert meta["run_id"] == run_id and meta["loss"] == "mse"


def test_bad_requests_are_refused_with_one_line_and_nothing_written(trained, tmp_path, capsys):
    run_dir = trained["flat"]
    for args, message in [(["--instance", "3"], r"instance\(s\) \[3\] out of range"),
                          (["--step", "7"], "no checkpoint at step 7"),
                          (["--instance", "0", "--run-id", "feedfacecafe"], "give instance or run_id, not both")]:
        assert main(["export", "tl", str(run_dir), "--out", str(tmp_path / "x"), *args]) == 2
        err = [line for line in capsys.readouterr().err.splitlines() if line.startswith("headway: error")]
        assert len(err) == 1 and __import__("re").search(message, err[0]), err
        assert not (tmp_path / "x").exists()
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    assert main(["export", "tl", str(run_dir), "--out", str(tmp_path / "busy")]) == 2


def test_token_maps_check_their_input():
    mapping = TokenMap(slots=2, slot_vocab=5, slot_axis=True)
    assert mapping(np.array([[[0, 5], [4, 9]]])).tolist() == [[0, 24]]
    with pytest.raises(ConfigError, match=r"lack this task's slot axis: \[..., pos, 2\]"):
        mapping(torch.zeros(3, 4, dtype=torch.long))
    with pytest.raises(ConfigError, match="token ids outside their slot's range"):
        mapping(torch.tensor([[[5, 5]]]))  # 5 is slot 1's first id, not slot 0's
    flat = TokenMap(slots=1, slot_vocab=7, slot_axis=False)
    assert flat(torch.tensor([[1, 6]])).tolist() == [[1, 6]]
    huge = RetrievalConfig(vocab=200, chains=2, hops=1, conditional=True)
    with pytest.raises(ConfigError, match="combined vocabulary has .* ids .* export a flat-layout run instead"):
        token_map(huge, 128)
