"""headway.runs.cost: the GPU step model reproduces the H100 measurements it was fitted to
(benchmarks/RESULTS.md, "GPU: one H100")."""

import pytest

from headway.runs.config import RunConfig
from headway.runs.cost import gpu_step_seconds, gpu_training_seconds

# benchmarks/bench_training.py's paper shape
PAPER = dict(hops=4, chains=4, vocab=32, layers=2, heads=8, d_model=128, batch_size=512)


def test_a_large_ensemble_step_is_bound_by_its_flops() -> None:
    """headway eager, E = 64 at the paper shape: 22.10 steps/s measured."""
    run = RunConfig.from_flat({**PAPER, "steps": 1000})
    assert gpu_step_seconds(run, 64) == pytest.approx(1 / 22.10, rel=0.1)


def test_a_small_ensemble_step_is_bound_by_latency() -> None:
    """E = 8, width 128: 8.0–11.1 ms measured at 2 layers and 10.5–15.8 ms at 3, whatever the hops."""
    for layers, low, high in [(2, 8.0e-3, 11.1e-3), (3, 10.5e-3, 15.8e-3)]:
        for hops in (3, 5):
            run = RunConfig.from_flat({**PAPER, "layers": layers, "hops": hops, "vocab": 24})
            assert low <= gpu_step_seconds(run, 8) <= high
    one = RunConfig.from_flat({**PAPER, "hops": 3, "vocab": 24})
    assert gpu_step_seconds(one, 1) == gpu_step_seconds(one, 8)  # below the floor, size costs nothing


def test_training_seconds_add_up_over_ensembles() -> None:
    small = RunConfig.from_flat({**PAPER, "vocab": 24, "hops": 3, "steps": 2000})
    large = RunConfig.from_flat({**PAPER, "steps": 500})
    expected = 2000 * gpu_step_seconds(small, 8) + 500 * gpu_step_seconds(large, 64)
    assert gpu_training_seconds([[small] * 8, [large] * 64]) == pytest.approx(expected)


def test_compilation_and_cuda_graphs_scale_a_step_as_measured_on_an_h200() -> None:
    """One H200, an 8-run three-layer depth cell of the `gpu` scale: eager 13.28 ms, compiled 7.61, CUDA graphs
    6.66 (bare trainer steps)."""
    from headway.studies.retrieval.plan import study_plan

    plan = study_plan("gpu").with_overrides(layers=(3,), hops=(4,), orders=("shuffled",), supervisions=("query",),
                                            bound_hops=(), conditional_hops=())
    cell = plan.depth_runs()[0]
    eager, compiled, graphs = (gpu_step_seconds(cell, 8, mode) for mode in ("off", "on", "graphs"))
    assert graphs < compiled < eager and graphs / eager == pytest.approx(6.66 / 13.28)
    assert (eager, compiled, graphs) == pytest.approx((13.28e-3, 7.61e-3, 6.66e-3), rel=0.15)
