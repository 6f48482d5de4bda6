"""The training benchmark's baselines compute what headway computes: the plain model matches a headway
instance, and the plain loop, torch.func ensembling and the headway trainer agree on losses and updates."""

import re
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import bench_training  # noqa: E402
from plain_model import from_instance  # noqa: E402

from headway.model.config import ModelConfig  # noqa: E402
from headway.model.transformer import EnsembleTransformer  # noqa: E402
from headway.runs.config import RunConfig  # noqa: E402

D_VOCAB, N_CTX, D_OUT = 20, 7, 12
pytestmark = pytest.mark.filterwarnings("ignore:There is a performance drop:UserWarning")


def random_tokens(batch: int, slots: int | None, seed: int = 0) -> torch.Tensor:
    """Tokens [batch, N_CTX] (flat) or [batch, N_CTX, slots] (packed)."""
    shape = (batch, N_CTX) if slots is None else (batch, N_CTX, slots)
    return torch.randint(0, D_VOCAB, shape, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
@pytest.mark.parametrize("slots", [None, 2])
@pytest.mark.parametrize("d_mlp", [0, 64])
def test_plain_model_matches_a_headway_instance(attention: str, slots: int | None, d_mlp: int) -> None:
    """Outputs equal to 1e-5 with the instance's weights, with and without the last-position shortcut."""
    cfg = ModelConfig(layers=2, heads=4, d_model=32, d_mlp=d_mlp, attention=attention)
    ensemble = EnsembleTransformer.from_seeds(cfg, D_VOCAB, N_CTX, D_OUT, [3, 7])
    with torch.no_grad():  # non-trivial biases and gains, so a misplaced one shows
        for param in ensemble.parameters():
            param.add_(0.05 * torch.randn_like(param))
    tokens = random_tokens(6, slots)
    with torch.no_grad():
        expected = ensemble(torch.stack([tokens, tokens]))[1]
        expected_last3 = ensemble(torch.stack([tokens, tokens]), readout=3)[1].reshape(6, -1)
        for last_only in (False, True):
            plain = from_instance(ensemble, 1, last_only=last_only)
            assert plain(tokens).shape == expected.shape
            torch.testing.assert_close(plain(tokens), expected, atol=1e-5, rtol=0)
            torch.testing.assert_close(plain(tokens, 3), expected_last3, atol=1e-5, rtol=0)


def test_plain_model_without_layernorm_matches() -> None:
    """The identity in place of LayerNorm when the model has none."""
    cfg = ModelConfig(layers=1, heads=2, d_model=16, layernorm=False)
    ensemble = EnsembleTransformer.from_seeds(cfg, D_VOCAB, N_CTX, D_OUT, [5])
    tokens = random_tokens(4, 2)
    with torch.no_grad():
        torch.testing.assert_close(from_instance(ensemble, 0)(tokens), ensemble(tokens[None])[0], atol=1e-5, rtol=0)


def tiny_runs(n: int) -> list[RunConfig]:
    """n runs of a tiny retrieval shape (packed tokens), seeds 0..n-1."""
    flat = dict(vocab=12, chains=2, hops=2, layers=2, heads=2, d_model=16, batch_size=16, steps=100,
                train_size=512, val_size=64, weight_decay=0.1, lr=1e-2)
    return [RunConfig.from_flat({**flat, "seed": seed}) for seed in range(n)]


def test_func_losses_equal_the_plain_loop_and_headway() -> None:
    """Same weights and batch: the torch.func path's losses equal the plain loop's and the trainer's."""
    ways = bench_training.build_ways(tiny_runs(3), torch.device("cpu"), ["headway", "plain", "func"], "fp32", "off")
    tokens, targets = ways["headway"].data.train_batch(0)
    assert tokens.dim() == 4
    headway = ways["headway"].losses(tokens, targets)
    torch.testing.assert_close(ways["plain"].losses(tokens, targets), headway, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(ways["func"].losses(tokens, targets), headway, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("ordinary", [False, True])
def test_the_four_ways_train_alike(ordinary: bool) -> None:
    """After three steps on the same batches (AdamW, decay on weight matrices only) the losses still agree,
    with the baselines in their fastest form (last position only, fused AdamW) or as ordinarily written."""
    names = ["headway", "plain", "func", "func-explicit"]
    ways = bench_training.build_ways(tiny_runs(2), torch.device("cpu"), names, "fp32", "off", ordinary=ordinary)
    for name in names[1:]:
        optims = ways[name].optims if name == "plain" else [ways[name].optim]
        assert all(bool(optim.defaults["fused"]) is not ordinary for optim in optims), name
    models = ways["plain"].models
    assert all(model.last_only is not ordinary for model in models)
    tokens, targets = ways["headway"].data.train_batch(50)
    before = ways["headway"].losses(tokens, targets)
    for way in ways.values():
        for _ in range(3):
            way.advance()
    after = ways["headway"].losses(tokens, targets)
    assert not torch.allclose(before, after, atol=1e-4)
    for name in names[1:]:
        torch.testing.assert_close(ways[name].losses(tokens, targets), after, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("kernel", ["sdpa", "matmul"])
def test_headway_takes_the_attention_kernel_asked_for(kernel: str) -> None:
    ways = bench_training.build_ways(tiny_runs(2), torch.device("cpu"), ["headway"], "fp32", "off", attention=kernel)
    assert ways["headway"].model.attention_kernel == kernel


def test_command_line_help_and_choices() -> None:
    """--help names every option; unknown shapes and ways are refused."""
    args = bench_training.parse_args(["--device", "cpu", "--shapes", "cpu", "--ensemble-sizes", "1,8",
                                      "--ways", "headway,func"])
    assert args.ensemble_sizes == [1, 8] and args.ways == ["headway", "func"] and args.shapes == ["cpu"]
    with pytest.raises(SystemExit):
        bench_training.parse_args(["--device", "cpu", "--ways", "jax"])
    with pytest.raises(SystemExit):
        bench_training.parse_args(["--device", "cpu", "--shapes", "huge"])


def test_baselines_follow_the_precision_headway_resolves() -> None:
    """auto is float32 on the CPU; under bf16 the baselines run autocast and their losses stay close."""
    cpu = torch.device("cpu")
    assert bench_training.resolve_precision("auto", cpu) == "fp32"
    ways = bench_training.build_ways(tiny_runs(2), cpu, ["headway", "plain", "func"], "bf16", "off")
    assert ways["plain"].precision == ways["func"].precision == "bf16"
    tokens, targets = ways["headway"].data.train_batch(0)
    exact = ways["headway"].losses(tokens, targets)
    for name in ("plain", "func"):
        torch.testing.assert_close(ways[name].losses(tokens, targets), exact, atol=2e-2, rtol=2e-2)
        ways[name].advance()


def test_the_attention_benchmark_times_both_kernels_and_names_the_auto_choice(monkeypatch) -> None:
    import argparse

    import bench_attention

    tiny = dict(task="retrieval", loss="mse", vocab=12, chains=2, hops=2, layers=1, heads=2, d_model=16,
                batch_size=8)
    monkeypatch.setitem(bench_attention.SHAPES, "tiny", tiny)
    row = bench_attention.bench_shape("tiny", argparse.Namespace(ensemble_size=2, rounds=2, steps=1),
                                      torch.device("cpu"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[0] == "tiny" and cells[1] == "5" and cells[2] == "2 × 8" and cells[4] == "2"
    assert all(float(cells[i].split()[0]) > 0 for i in (5, 6)) and cells[7].endswith("×") and cells[8] == "sdpa"  # 5 positions: below the matmul band


def test_the_step_profile_accounts_for_the_matrix_products(capsys, monkeypatch) -> None:
    import profile_step

    monkeypatch.setattr(sys, "argv", ["profile_step.py", "--shape", "cpu", "--ensemble-size", "1", "--steps", "1",
                                      "--top", "5"])
    profile_step.main()
    out = capsys.readouterr().out
    assert "| aten::bmm |" in out or "| aten::baddbmm |" in out
    assert "Matrix products (every op with counted FLOPs):" in out and "GFLOP/s" in out


def test_the_step_profile_by_shape_lists_every_batched_product_with_its_rate_alone(capsys, monkeypatch) -> None:
    """--by-shape: one row per product shape with its calls, time and rates in the step and alone, and the
    products' total as run and at the alone rates."""
    import profile_step

    monkeypatch.setattr(sys, "argv", ["profile_step.py", "--shape", "cpu", "--ensemble-size", "1", "--steps", "1",
                                      "--top", "5", "--by-shape"])
    profile_step.main()
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("| aten::bmm | [", "| aten::baddbmm | ["))]
    assert len(rows) >= 5
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        assert "×" in cells[1] and float(cells[3]) > 0 and float(cells[4]) > 0 and float(cells[5]) > 0
    floor = re.search(r"Batched products: ([\d.]+) ms per step as run here \(shapes recorded\); ([\d.]+) ms", out)
    assert floor and float(floor.group(1)) > 0 and float(floor.group(2)) > 0


def test_the_step_latency_probe_times_the_named_cell_and_reports_a_mode_that_fails(capsys):
    """bench_step_latency on the CPU: graphs are refused off CUDA (reported, not raised), eager is timed, and the last
    line holds what a GPU piece reads."""
    import json

    import bench_step_latency

    args = ["--device", "cpu", "--layers", "2", "--hops", "3", "--seeds", "0,1", "--steps", "1", "--modes", "off,graphs"]
    assert bench_step_latency.main(args) == 0
    out = capsys.readouterr().out
    assert "| graphs | failed: ConfigError: compile = 'graphs' (CUDA graphs) needs a CUDA device" in out
    last = [line for line in out.splitlines() if line.startswith("latency-json: ")][-1]
    measured = json.loads(last.removeprefix("latency-json: "))
    assert set(measured["modes"]) == {"off"} and measured["runs"] == 2 and measured["layers"] == 2
    assert measured["modes"]["off"]["step_s"] > 0 and measured["projected_step_s"] > 0
