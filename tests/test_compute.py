"""Precision, compilation, device-resident batches and the training deadline (`headway.compute`,
the trainer and `EnsembleData`)."""

from __future__ import annotations

import time
from pathlib import Path
import warnings

import numpy as np
import pandas as pd
import pytest
import torch
from conftest import tiny_run

from headway.analysis.llc import SGLDSettings, estimate_llc
from headway.compute import (CPU_COMPILE_MIN_STEP_FLOPS, CPU_COMPILE_MIN_STEPS, Compiled, ComputeSettings, TrainingWork,
                              at_precision, precision_context)
from headway.errors import ConfigError, TimeLimitReached
from headway.runs import layout
from headway.runs.cost import training_flops, training_work
from headway.runs.store import load_runs, load_weights
from headway.train.data import EnsembleData
from headway.tasks.objective import run_loss
from headway.train.trainer import EnsembleTrainer

CPU = torch.device("cpu")
# bf16 autocast against fp32 on the same tiny runs (200 steps, 2 seeds): measured largest relative
# differences 0.07% (train loss) and 0.16% (validation loss); docs/performance.md gives the tolerance
BF16_LOSS_RTOL = 0.02


def final_weights(run_dir):
    return load_weights(run_dir)


@pytest.mark.parametrize("precision, compile_mode, message", [
    ("fp16", "auto", "precision = 'fp16' is unknown; choose one of auto, fp32, tf32, bf16"),
    ("auto", "yes", "compile = 'yes' is unknown; choose one of auto, on, off, graphs"),
])
def test_unknown_settings_are_refused_naming_the_value(precision, compile_mode, message):
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        ComputeSettings(precision=precision, compile=compile_mode)


def test_auto_resolves_per_device_and_tf32_needs_cuda():
    auto = ComputeSettings()
    assert auto.resolved_precision(CPU) == "fp32" and auto.resolved_precision(torch.device("cuda")) == "bf16"
    assert auto.compile_mode(CPU) is None and auto.compile_mode(torch.device("cuda")) == "default"
    assert ComputeSettings(compile="graphs").compile_mode(torch.device("cuda")) == "reduce-overhead"
    # the LLC sampler is compiled wherever the steps are, but never replayed as CUDA graphs
    assert ComputeSettings(compile="graphs").sampler_compile_mode(torch.device("cuda")) == "default"
    assert auto.sampler_compile_mode(CPU) is None and auto.sampler_compile_mode(torch.device("cuda")) == "default"
    assert ComputeSettings(compile="on").sampler_compile_mode(CPU) == "default"
    with pytest.raises(ConfigError, match="precision = 'tf32' needs a CUDA device"):
        ComputeSettings(precision="tf32").resolved_precision(CPU)
    with pytest.raises(ConfigError, match="compile = 'graphs' .* needs a CUDA device"):
        ComputeSettings(compile="graphs").compile_mode(CPU)


@pytest.mark.parametrize("steps, step_flops, compiled", [
    (CPU_COMPILE_MIN_STEPS, CPU_COMPILE_MIN_STEP_FLOPS, True),  # the smallest measured shape, long enough to repay
    (20_000, 1.7e11, True),  # the paper shape
    (CPU_COMPILE_MIN_STEPS - 1, 1.7e11, False),  # too short to repay a compilation
    (100_000, CPU_COMPILE_MIN_STEP_FLOPS / 2, False),  # smaller than anything measured
])
def test_auto_compiles_a_cpu_training_only_where_compilation_repays_itself(steps, step_flops, compiled):
    work = TrainingWork(steps, step_flops)
    auto, cpu_mode = ComputeSettings(), ("default" if compiled else None)
    assert auto.compile_mode(CPU, work) == cpu_mode
    assert auto.describe(CPU, work)["compiled"] == (cpu_mode or "no")
    # the attention kernel follows: a compiled CPU pass takes the matmul kernel even at 9 positions
    assert auto.resolved_attention_kernel(CPU, 9, work) == ("matmul" if compiled else "sdpa")
    assert auto.compile_mode(torch.device("cuda"), work) == "default"  # CUDA compiles whatever the work
    assert ComputeSettings(compile="off").compile_mode(CPU, work) is None
    assert ComputeSettings(compile="on").compile_mode(CPU, TrainingWork(1, 1.0)) == "default"


def test_the_trainer_sizes_its_work_from_its_ensemble(tmp_path):
    """Two runs of the tiny shape for 60 steps: far below what repays a CPU compilation, so `auto` trains eagerly."""
    runs = [tiny_run(seed=s, steps=60) for s in (0, 1)]
    trainer = EnsembleTrainer(runs, tmp_path, progress=False)
    assert trainer.work.steps == 60 and trainer.work.step_flops == pytest.approx(2 * training_flops(runs[0]) / 60)
    assert not trainer.work.repays_cpu_compilation() and not isinstance(trainer.loss, Compiled)


RESULTS = Path(__file__).resolve().parent.parent / "results"


@pytest.mark.parametrize("folder, compiled", [
    ("modular-cpu", True), ("fourth-layer-class-cpu", True), ("whole-chain-fresh-data-cpu", True),
    ("bidirectional-d9-cpu", True), ("retrieval-cpu", False), ("depth-phase-cpu", False),
    ("bidirectional-d4-cpu", False), ("masked-shuffled-cpu", False), ("sorting-cpu", False),
])
def test_auto_compiles_the_committed_cpu_folders_docs_performance_names(folder, compiled):
    """docs/performance.md ("Compilation") lists which committed cpu-scale ensembles the rule compiles."""
    ensembles = sorted((RESULTS / folder / "runs").glob("*/config.json"))
    assert ensembles, folder
    assert {training_work(load_runs(path.parent)).repays_cpu_compilation() for path in ensembles} == {compiled}


@pytest.mark.parametrize("native", [True, False])
def test_bf16_on_a_cpu_that_emulates_it_warns(monkeypatch, native):
    monkeypatch.setattr("headway.compute.cpu_has_bf16_matmul", lambda: native)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert ComputeSettings(precision="bf16").resolved_precision(CPU) == "bf16"
        assert ComputeSettings(precision="fp32").resolved_precision(CPU) == "fp32"
        assert ComputeSettings(precision="bf16").resolved_precision(torch.device("cuda")) == "bf16"
    messages = [str(w.message) for w in caught if issubclass(w.category, RuntimeWarning)]
    if native:
        assert messages == []
    else:
        assert len(messages) == 1 and messages[0].startswith("precision = 'bf16' on a CPU without bf16 matrix")


def test_precision_context_autocasts_matmuls_and_restores_the_matmul_setting():
    a = torch.randn(4, 4)
    before = torch.get_float32_matmul_precision()
    with precision_context("bf16", CPU):
        assert (a @ a).dtype == torch.bfloat16
    with precision_context("fp32", CPU):
        assert torch.get_float32_matmul_precision() == "highest"
        assert (a @ a).dtype == torch.float32
    assert torch.get_float32_matmul_precision() == before
    assert at_precision(lambda x: x @ x, "bf16", CPU)(a).dtype == torch.float32


def test_bf16_training_keeps_fp32_state_and_tracks_fp32_losses(tmp_path):
    runs = [tiny_run(seed=s, steps=200, eval_every=20) for s in (0, 1)]
    fp32 = EnsembleTrainer(runs, tmp_path / "fp32", progress=False).fit()
    trainer = EnsembleTrainer(runs, tmp_path / "bf16", progress=False, compute=ComputeSettings(precision="bf16"))
    bf16 = trainer.fit()
    data, model, optim, state = trainer.setup()
    trainer.train_step(model, data, optim, state, 0)
    assert model.flat.data.dtype == model.flat.grad.dtype == optim.exp_avg_sq.dtype == torch.float32
    summary = layout.read_json(tmp_path / "bf16" / layout.SUMMARY)
    assert summary["precision"] == "bf16" and summary["compiled"] == "no"
    for column in ("train_loss", "val_loss"):
        assert bf16[column].to_numpy() == pytest.approx(fp32[column].to_numpy(), rel=BF16_LOSS_RTOL, nan_ok=True)
    assert not np.array_equal(bf16.val_loss.to_numpy(), fp32.val_loss.to_numpy())  # bf16 really ran


def test_compiled_training_matches_eager_within_tolerance(tmp_path):
    runs = [tiny_run(seed=s, steps=30, eval_every=10) for s in (0, 1)]
    eager = EnsembleTrainer(runs, tmp_path / "eager", progress=False, compute=ComputeSettings(compile="off")).fit()
    trainer = EnsembleTrainer(runs, tmp_path / "compiled", progress=False, compute=ComputeSettings(compile="on"))
    compiled = trainer.fit()
    assert trainer.loss.is_compiled, "the CPU compile fell back to eager; this test would prove nothing"
    assert compiled.val_loss.to_numpy() == pytest.approx(eager.val_loss.to_numpy(), rel=1e-4)
    for name, tensor in final_weights(tmp_path / "eager").items():
        assert torch.allclose(final_weights(tmp_path / "compiled")[name], tensor, atol=1e-5, rtol=1e-4), name


@pytest.mark.parametrize("fails_on_call", [1, 2, 3])
def test_a_compile_failing_in_its_first_calls_falls_back_to_eager_with_a_warning(monkeypatch, fails_on_call):
    def broken(fn, **kwargs):
        calls = []

        def call(*args):
            calls.append(1)
            if len(calls) == fails_on_call:  # e.g. CUDA graphs are recorded on a later call than the first
                raise RuntimeError("no compiler here")
            return fn(*args)
        return call

    monkeypatch.setattr(torch, "compile", broken)
    step = Compiled(lambda x: x * 2, "test step")
    for value in range(1, fails_on_call):
        assert step(torch.tensor(float(value))) == 2 * value and step.is_compiled
    with pytest.warns(RuntimeWarning, match="compiling the test step failed .*no compiler here"):
        assert step(torch.tensor(3.0)) == 6.0
    assert not step.is_compiled and step(torch.tensor(4.0)) == 8.0


def test_a_compiled_step_failing_after_its_trial_calls_raises(monkeypatch):
    def late(fn, **kwargs):
        calls = []

        def call(*args):
            calls.append(1)
            if len(calls) > Compiled.TRIAL_CALLS:
                raise RuntimeError("a real error")
            return fn(*args)
        return call

    monkeypatch.setattr(torch, "compile", late)
    step = Compiled(lambda x: x * 2, "test step")
    for _ in range(Compiled.TRIAL_CALLS):
        step(torch.tensor(1.0))
    with pytest.raises(RuntimeError, match="a real error"):
        step(torch.tensor(1.0))


def old_batch_indices(pool_size: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """The batch order as the sampler defined it before batches were sliced on the device."""
    positions = step * batch_size + np.arange(batch_size)
    epochs, within = np.divmod(positions, pool_size)
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        order = np.random.default_rng([seed, 0xBA7C4, int(epoch)]).permutation(pool_size)
        out[epochs == epoch] = order[within[epochs == epoch]]
    return out


@pytest.mark.parametrize("batch_size, train_size", [(32, 100), (48, 48), (80, 30)])
def test_device_batches_are_the_sampler_batches_across_epoch_boundaries(batch_size, train_size):
    runs = [tiny_run(seed=s, data_seed=s % 2, batch_size=batch_size, train_size=train_size) for s in range(3)]
    data = EnsembleData(runs, CPU)
    for step in [0, 1, 2, 3, 7, 50, 51]:
        tokens, targets = data.train_batch(step)
        for e, run in enumerate(runs):
            rows = old_batch_indices(data.pool_size, batch_size, run.seed, step) + int(data.offsets[e])
            assert torch.equal(tokens[e], data.tokens[rows].long()) and torch.equal(targets[e], data.targets[rows])
    assert len(data._epochs) <= 2  # only the epochs in use stay on the device


def test_a_deadline_saves_and_stops_and_the_run_resumes_to_the_same_numbers(tmp_path):
    runs = [tiny_run(seed=s) for s in (0, 1)]
    straight = EnsembleTrainer(runs, tmp_path / "straight", progress=False).fit()
    with pytest.raises(TimeLimitReached, match="time limit reached at step 1; run the same command again"):
        EnsembleTrainer(runs, tmp_path / "pieces", progress=False, deadline=time.time() - 1).fit()
    assert layout.read_json(tmp_path / "pieces" / layout.RESUME / layout.LATEST)["step"] == 1
    resumed = EnsembleTrainer(runs, tmp_path / "pieces", progress=False).fit()
    pd.testing.assert_frame_equal(straight, resumed)


def test_llc_at_bf16_is_close_to_fp32(tmp_path):
    runs = [tiny_run(seed=s, steps=200) for s in (0, 1)]
    trainer = EnsembleTrainer(runs, tmp_path, progress=False)
    trainer.fit()
    from headway.runs.store import load_model

    model = load_model(tmp_path, [0, 1], device="cpu")
    data = EnsembleData(runs, CPU)
    tokens, targets = data.pool()
    settings = SGLDSettings(lr=1e-4, nbeta=100.0, localization=100.0, chains=2, draws=40, burnin=20, batch_size=64)
    loss = run_loss(runs[0].task, runs[0].train.loss)
    fp32 = estimate_llc(model, loss, tokens, targets, settings)
    bf16 = estimate_llc(model, loss, tokens, targets, settings, precision="bf16")
    assert np.all(np.isfinite(bf16.llc_mean))
    assert bf16.llc_mean == pytest.approx(fp32.llc_mean, rel=0.01)  # measured: 0.03%


def test_the_cli_trains_at_the_chosen_precision_and_refuses_what_the_device_cannot_do(tmp_path, capsys):
    from headway.cli.main import main

    train = ["train", "--scale", "cpu", "--steps", "4", "--eval-every", "2", "--train-size", "512",
             "--val-size", "64", "--batch-size", "16", "--no-progress"]
    assert main([*train, "--out", str(tmp_path / "bf16"), "--precision", "bf16", "--compile", "off"]) == 0
    (summary,) = (tmp_path / "bf16").glob(f"*/{layout.SUMMARY}")
    assert layout.read_json(summary)["precision"] == "bf16"
    assert main([*train, "--out", str(tmp_path / "matmul"), "--attention-kernel", "matmul", "--compile", "off"]) == 0
    (summary,) = (tmp_path / "matmul").glob(f"*/{layout.SUMMARY}")
    assert layout.read_json(summary)["attention_kernel"] == "matmul"
    capsys.readouterr()
    for option, value, message in [("--precision", "tf32", "precision = 'tf32' needs a CUDA device"),
                                   ("--compile", "graphs", "compile = 'graphs' (CUDA graphs) needs a CUDA device")]:
        out = tmp_path / value
        assert main([*train, "--out", str(out), "--device", "cpu", option, value]) == 2
        err = capsys.readouterr().err
        assert message in err and "Traceback" not in err and not out.exists()
    assert main(["study", "sorting", "--out", str(tmp_path / "s"), "--device", "cpu", "--precision", "tf32"]) == 2
    assert "needs a CUDA device" in capsys.readouterr().err and not (tmp_path / "s").exists()


@pytest.mark.parametrize("attention", ["causal", "bidirectional"])
@pytest.mark.parametrize("readout", ["last", "all", 3])
def test_the_attention_kernels_give_the_same_outputs_and_gradients(attention, readout):
    from headway.model.config import ModelConfig
    from headway.model.transformer import EnsembleTransformer

    model = EnsembleTransformer.from_seeds(ModelConfig(layers=2, heads=4, d_model=32, attention=attention),
                                           12, 9, 12, [0, 1, 2])
    tokens = torch.randint(0, 12, (3, 6, 9), generator=torch.Generator().manual_seed(0))
    results = {}
    for kernel in ("sdpa", "matmul"):
        model.use_attention_kernel(kernel)
        assert model.attention_kernel == kernel
        model.zero_grad()
        out = model(tokens, readout=readout)
        out.pow(2).sum().backward()
        results[kernel] = (out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()})
    (out_a, grads_a), (out_b, grads_b) = results["sdpa"], results["matmul"]
    assert torch.allclose(out_a, out_b, atol=1e-6)
    for name, grad in grads_a.items():
        assert torch.allclose(grad, grads_b[name], atol=1e-6, rtol=1e-4), name
    # a hooked model reads the pattern on the step-by-step path, whatever the kernel
    _, cache = model.run_with_cache(tokens, "blocks.0.attn.hook_pattern")
    assert cache["blocks.0.attn.hook_pattern"].shape == (3, 6, 4, 9, 9)


def test_the_attention_kernel_is_chosen_by_device_length_and_gradients_and_unknown_ones_are_refused(monkeypatch):
    from headway.compute import MATMUL_ATTENTION_CTX
    from headway.model.config import ModelConfig
    from headway.model.transformer import Attention, EnsembleTransformer

    auto = ComputeSettings()
    low, high = MATMUL_ATTENTION_CTX
    assert auto.resolved_attention_kernel(CPU, 17) == auto.resolved_attention_kernel(CPU, low) == "matmul"
    assert auto.resolved_attention_kernel(CPU, high) == "matmul"
    assert auto.resolved_attention_kernel(CPU, 9) == auto.resolved_attention_kernel(CPU, high + 1) == "sdpa"
    assert auto.resolved_attention_kernel(torch.device("cuda"), 17) == "sdpa"
    assert ComputeSettings(attention_kernel="sdpa").resolved_attention_kernel(CPU, 17) == "sdpa"
    assert ComputeSettings(attention_kernel="matmul").resolved_attention_kernel(CPU, 500) == "matmul"
    with pytest.raises(ConfigError, match="attention_kernel = 'flash' is unknown; choose one of auto, sdpa, matmul"):
        ComputeSettings(attention_kernel="flash")
    # a new model decides per pass: matmul where gradients are taken on a short CPU sequence, sdpa without them
    calls = []
    matmul = Attention._matmul_attention
    monkeypatch.setattr(Attention, "_matmul_attention", lambda self, *args: calls.append(1) or matmul(self, *args))
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8), 5, low, 5, [0])
    assert model.attention_kernel == "auto"
    tokens = torch.zeros(1, 3, low, dtype=torch.long)
    with torch.no_grad():
        model(tokens)
    assert calls == []
    model(tokens)
    assert calls == [1]
    model.use_attention_kernel("matmul")
    with torch.no_grad():
        model(tokens)
    assert calls == [1, 1]
    with pytest.raises(ConfigError, match="attention kernel = 'flash' is unknown"):
        model.use_attention_kernel("flash")


def test_a_compiled_cpu_training_pass_takes_the_matmul_kernel_at_short_sequences_too():
    import torch._dynamo
    from headway.compute import MATMUL_ATTENTION_CTX
    from headway.model.config import ModelConfig
    from headway.model.transformer import EnsembleTransformer

    # Inductor fuses the written-out softmax and mask, not the fused kernel (docs/performance.md)
    assert ComputeSettings(compile="on").resolved_attention_kernel(CPU, 9) == "matmul"
    assert ComputeSettings(compile="on").resolved_attention_kernel(CPU, MATMUL_ATTENTION_CTX[1] + 1) == "sdpa"
    assert ComputeSettings(compile="on").resolved_attention_kernel(torch.device("cuda"), 9) == "sdpa"
    model = EnsembleTransformer.from_seeds(ModelConfig(layers=1, heads=2, d_model=8), 5, 9, 5, [0, 1])
    tokens = torch.zeros(2, 3, 9, dtype=torch.long)
    explained = torch._dynamo.explain(model)(tokens)
    code = "".join(graph.code for graph in explained.graphs)
    assert explained.graph_break_count == 0 and "scaled_dot_product_attention" not in code and "softmax" in code
    # biases are added after a bmm, which Inductor fuses, not by baddbmm, a library call that copies the bias first
    assert "baddbmm" not in code and "bmm" in code
    with torch.no_grad():  # without gradients the fused kernel stays, compiled or not
        code = "".join(graph.code for graph in torch._dynamo.explain(model)(tokens).graphs)
    assert "scaled_dot_product_attention" in code
    torch._dynamo.reset()


def test_training_with_either_kernel_gives_the_same_numbers_and_the_summary_names_it(tmp_path):
    runs = [tiny_run(seed=s, steps=30, eval_every=10) for s in (0, 1)]
    curves = {}
    for kernel in ("sdpa", "matmul"):
        trainer = EnsembleTrainer(runs, tmp_path / kernel, progress=False, compute=ComputeSettings(attention_kernel=kernel))
        curves[kernel] = trainer.fit()
        summary = layout.read_json(tmp_path / kernel / layout.SUMMARY)
        assert summary["attention_kernel"] == kernel
        assert summary["device_name"].startswith("cpu: ") and summary["torch"] == torch.__version__
    assert curves["matmul"].val_loss.to_numpy() == pytest.approx(curves["sdpa"].val_loss.to_numpy(), rel=1e-4)
    for name, tensor in final_weights(tmp_path / "sdpa").items():
        assert torch.allclose(final_weights(tmp_path / "matmul")[name], tensor, atol=1e-5, rtol=1e-4), name
    auto = EnsembleTrainer(runs, tmp_path / "auto", progress=False)
    assert auto.attention_kernel == ComputeSettings().resolved_attention_kernel(CPU, runs[0].task.n_ctx)
    assert auto.setup()[1].attention_kernel == "auto"
