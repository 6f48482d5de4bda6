"""scripts/gpu_session.sh: valid bash, and a bad step is refused before anything is installed or written."""

import shutil
import subprocess
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_session.sh"
BASH = shutil.which("bash")
pytestmark = pytest.mark.skipif(BASH is None, reason="bash is not installed")


def test_script_parses() -> None:
    result = subprocess.run([BASH, "-n", str(SCRIPT)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_unknown_step_is_refused_before_any_work(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = subprocess.run([BASH, str(SCRIPT), "benchmark"], capture_output=True, text=True, cwd=tmp_path,
                            env={"OUT": str(out), "PATH": "/usr/bin:/bin"})
    assert result.returncode == 2
    assert "unknown step 'benchmark'; choose bench, attention, llc, retrieval or sorting" in result.stderr
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []
