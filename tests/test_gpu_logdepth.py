"""scripts/gpu_logdepth.py: its steps fit the minutes it is given, and what it packs leaves checkpoints behind."""

import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import gpu_logdepth  # noqa: E402


def test_steps_are_sized_to_the_time_left() -> None:
    eight = tuple(range(8))
    steps, projected = gpu_logdepth.sized_steps(20 * 60, eight)
    assert projected <= 20 * 60 and steps in gpu_logdepth.STEP_CHOICES
    longer, _ = gpu_logdepth.sized_steps(60 * 60, eight)
    fewer_seeds, _ = gpu_logdepth.sized_steps(20 * 60, eight[:4])
    slower, _ = gpu_logdepth.sized_steps(20 * 60, eight, step_scale=2.0)
    assert longer > steps and fewer_seeds >= steps and slower < steps
    # the whole log-depth grid's 12 ensembles cost a minute each beyond their steps: one lease cannot hold it
    fewest, over = gpu_logdepth.sized_steps(8.5 * 60, eight)
    assert fewest == gpu_logdepth.STEP_CHOICES[-1] and over > 8.5 * 60


def test_the_probe_picks_the_fastest_mode_whose_warm_up_the_projection_already_counts() -> None:
    """The H200 lease's probe: graphs 0.55x the projection after 22 s, compiled 0.63x after 9 s, eager 1.10x; the
    steps are sized at the eager scale, which is what compiled study steps reached there."""
    measured = {"off": (1.10, 3.9), "graphs": (0.55, 21.9), "on": (0.63, 8.9)}
    assert gpu_logdepth.chosen_mode(measured) == ("graphs", 1.10)
    assert gpu_logdepth.chosen_mode({**measured, "graphs": (0.55, 90.0)}) == ("on", 1.10)
    assert gpu_logdepth.chosen_mode({"on": (0.63, 90.0)}) == ("off", 1.0)  # nothing affordable: eager


def test_the_depth_cells_are_the_gpu_scales_without_its_conditional_grid() -> None:
    options = gpu_logdepth.cell_options((0, 1), tiny=False)
    assert options[:4] == ["--scale", "gpu", "--conditional-hops", "none"] and "--seed" in options


def test_the_bound_piece_trains_theorem_1s_exact_bound_cells_at_full_length() -> None:
    options = gpu_logdepth.cell_options((0, 1), tiny=False, cells="bound")
    assert options[options.index("--bound-hops") + 1] == "9" and options[options.index("--hops") + 1] == "4"
    assert gpu_logdepth.cell_options((0,), tiny=False)[-2:] == ["--bound-hops", "none"]
    steps, projected = gpu_logdepth.sized_steps(8.5 * 60, tuple(range(8)), "bound")
    assert steps == 10_000 and projected <= 8.5 * 60


def test_the_lease_slice_is_three_causal_layers_on_four_and_five_shuffled_hops_under_every_supervision() -> None:
    options = gpu_logdepth.cell_options(tuple(range(8)), tiny=False, cells="lease")
    value = {name: options[options.index(name) + 1] for name in ("--layers", "--hops", "--order", "--supervision",
                                                                  "--mask-unreachable", "--bound-hops")}
    assert value == {"--layers": "3", "--hops": "4,5", "--order": "shuffled", "--supervision": "query,dense,whole-chain",
                     "--mask-unreachable": "true", "--bound-hops": "none"}
    assert gpu_logdepth.FOLDERS["lease"] == "logdepth"  # its results are the log-depth piece's, a slice of them


def test_the_latency_probe_is_read_from_its_last_line_so_a_probe_cut_short_keeps_what_it_measured() -> None:
    log = "\n".join(["| off | 12.00 |", 'latency-json: {"projected_step_s": 0.01, "modes": {"off": {"step_s": 0.012, '
                     '"warmup_s": 1.0}}}', '| graphs | 3.00 |', 'latency-json: {"projected_step_s": 0.01, "modes": '
                     '{"off": {"step_s": 0.012, "warmup_s": 1.0}, "graphs": {"step_s": 0.003, "warmup_s": 25.0}}}'])
    modes = gpu_logdepth.latency_modes(log)
    assert modes["off"] == (1.2, 1.0) and modes["graphs"][0] == 0.3 and modes["graphs"][1] == 25.0
    assert gpu_logdepth.latency_modes("killed before the first mode") == {}


def test_packing_leaves_checkpoints_and_resume_states_behind(tmp_path: Path) -> None:
    study = tmp_path / "study"
    for name in ["report.html", "runs/L2/metrics.parquet", "runs/L2/checkpoints/step_1.safetensors",
                 "runs/L2/resume/latest.json", "runs/L2/.lock"]:
        (study / name).parent.mkdir(parents=True, exist_ok=True)
        (study / name).write_text("x")
    archive = tmp_path / "out.tgz"
    gpu_logdepth.pack(study, archive)
    names = set(tarfile.open(archive).getnames())
    assert {"out/report.html", "out/runs/L2/metrics.parquet"} <= names
    assert not any("checkpoints" in n or "resume" in n or n.endswith(".lock") for n in names)


def test_pieces_that_share_a_results_folder_are_refused_before_anything_runs(tmp_path: Path, capsys) -> None:
    import pytest

    with pytest.raises(SystemExit) as stopped:
        gpu_logdepth.main(["--out", str(tmp_path / "out"), "--cells", "logdepth,lease", "--tiny"])
    assert stopped.value.code == 2 and "share a results folder (logdepth, logdepth)" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
