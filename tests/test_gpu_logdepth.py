"""scripts/gpu_logdepth.py: its steps fit the minutes it is given, and what it packs leaves checkpoints behind."""

import sys
import tarfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import gpu_logdepth  # noqa: E402


def test_steps_are_sized_to_the_time_left() -> None:
    eight = tuple(range(8))
    steps, projected = gpu_logdepth.sized_steps(8.5 * 60, eight)
    assert projected <= 8.5 * 60 and steps in gpu_logdepth.STEP_CHOICES
    longer, _ = gpu_logdepth.sized_steps(60 * 60, eight)
    fewer_seeds, _ = gpu_logdepth.sized_steps(8.5 * 60, eight[:4])
    assert longer > steps and fewer_seeds >= steps


def test_the_depth_cells_are_the_gpu_scales_without_its_conditional_grid() -> None:
    options = gpu_logdepth.cell_options((0, 1), tiny=False)
    assert options[:4] == ["--scale", "gpu", "--conditional-hops", "none"] and "--seed" in options


def test_the_bound_piece_trains_theorem_1s_exact_bound_cells_at_full_length() -> None:
    options = gpu_logdepth.cell_options((0, 1), tiny=False, cells="bound")
    assert options[options.index("--bound-hops") + 1] == "9" and options[options.index("--hops") + 1] == "4"
    assert gpu_logdepth.cell_options((0,), tiny=False)[-2:] == ["--bound-hops", "none"]
    steps, projected = gpu_logdepth.sized_steps(8.5 * 60, tuple(range(8)), "bound")
    assert steps == 10_000 and projected <= 8.5 * 60


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
