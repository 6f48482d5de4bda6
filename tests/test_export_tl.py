"""`headway export tl`: trained runs as TransformerLens 4.x models whose outputs are headway's, for the
packed, flat, attention-only, conditional and sorting layouts; TransformerLens' default weight processing
keeps an MSE run's outputs; raw packed ids give NaN; the folder loads with TransformerLens alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

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
    embedding = exported.model.state_dict()["embed.weight"]
    row = embedding[mapping(tokens)[0, 0]]
    torch.testing.assert_close(row, w_e[3] + w_e[mapping.slot_vocab + 5])
    assert mapping.offset == 2 * mapping.slot_vocab and embedding[: mapping.offset].isnan().all()
    with torch.no_grad():  # raw headway ids, unmapped: NaN everywhere, never numbers that look right
        assert exported.model(tokens[..., 0]).isnan().all()


@pytest.mark.parametrize("processing", [{}, {"fold_ln": False}, {"center_unembed": False}])
def test_transformer_lens_default_processing_keeps_an_mse_runs_outputs(trained, processing):
    """An MSE export's balancing column makes centring the unembedding a no-op: TransformerLens 4.3's default
    enable_compatibility_mode (and process_weights) shifted outputs by up to 0.06 before it."""
    ours, _, exported, tokens = headway_and_tl(trained["packed"])
    assert exported.loss == "mse" and exported.config["d_vocab_out"] == exported.d_out + 1
    torch.testing.assert_close(exported.model.state_dict()["unembed.weight"].sum(0),
                               torch.zeros(16), atol=1e-5, rtol=0)
    exported.model.enable_compatibility_mode(disable_warnings=True, **processing)
    with torch.no_grad():
        assert (exported(tokens) - ours).abs().max() <= TOLERANCE
    again = to_transformer_lens(trained["packed"])
    again.model.process_weights()
    with torch.no_grad():
        assert (again(tokens) - ours).abs().max() <= TOLERANCE


def test_weight_processing_keeps_a_cross_entropy_runs_softmax(trained):
    ce_dir = trained["flat"]

    ours, _, exported, tokens = headway_and_tl(ce_dir)
    assert exported.config["d_vocab_out"] == exported.d_out  # no balancing column: softmax ignores a shift
    exported.model.enable_compatibility_mode(disable_warnings=True)  # center_unembed too: softmax unchanged
    with torch.no_grad():
        theirs = exported(tokens)
    torch.testing.assert_close(theirs.log_softmax(-1), ours.log_softmax(-1), atol=1e-4, rtol=0)


def test_the_cli_writes_a_folder_transformer_lens_loads_alone(trained, tmp_path, monkeypatch):
    """docs/api.md's TransformerLens-alone lines, run as written on `headway export tl`'s folder: headway's
    outputs, and still after TransformerLens' default processing."""
    run_dir = trained["conditional"]
    run_id = load_runs(run_dir)[0].run_id
    assert main(["export", "tl", str(run_dir.parent), "--run-id", run_id, "--out", str(tmp_path / "tl")]) == 0
    ours, _, _, tokens = headway_and_tl(run_dir)
    text = (Path(__file__).resolve().parents[1] / "docs" / "api.md").read_text()
    recipe = re.search(r"TransformerLens alone, from the folder:\n\n```python\n(.*?)```", text, re.S).group(1)
    monkeypatch.chdir(tmp_path)
    scope = {"tokens": tokens}
    with torch.no_grad():
        exec(recipe, scope)  # noqa: S102 - the documentation's own lines
        assert (scope["outputs"][:, -1] - ours).abs().max() <= TOLERANCE
        scope["bridge"].enable_compatibility_mode(disable_warnings=True)
        assert (scope["bridge"](scope["ids"])[:, -1, : ours.shape[-1]] - ours).abs().max() <= TOLERANCE
        assert (load_export(tmp_path / "tl")(tokens) - ours).abs().max() <= TOLERANCE
    meta = json.loads((tmp_path / "tl" / "headway.json").read_text())
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
