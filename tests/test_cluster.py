"""`--executor ray` on a real Ray cluster: a head and a second node started by `ray start` as processes of
their own on 127.0.0.1. A sweep spread over both nodes, one whose worker is killed mid-ensemble and one
whose driver is killed must all end with the metrics and checkpoints of a local run of the same command."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
from safetensors.torch import load_file
from test_study_sorting import small_plan

from headway.cli.main import main
from headway.errors import ConfigError, JobsFailed
from headway.execution import LocalExecutor, make_executor
from headway.execution.loopback import LoopbackCluster, free_port
from headway.execution.ray_cluster import StoreCheck, TaskResources, parse_bytes, raise_failures
from headway.runs import layout
from headway.runs.checkpoints import checkpoint_steps
from headway.runs.config import expand_grid
from headway.runs.cost import training_memory
from headway.studies.sorting.study import SortingStudy
from headway.tasks.registry import scale_settings

# Two ensembles (1 and 2 layers) of two seeds, about 10 s each on one core; a resume state every 100 steps.
SWEEP = ["train", "--scale", "cpu", "--layers", "1,2", "--hops", "1", "--seed", "0,1", "--steps", "600",
         "--checkpoint-every", "100", "--no-progress"]
HEADWAY = str(Path(sys.executable).with_name("headway"))
TIMEOUT_S = 300


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """The sweep trained locally, in this process."""
    out = tmp_path_factory.mktemp("local")
    assert main([*SWEEP, "--out", str(out)]) == 0
    return out


@pytest.fixture(scope="module")
def cluster():
    with LoopbackCluster(nodes=2, cpus=1) as running:
        yield running


def driver(cluster: LoopbackCluster, out: Path, *extra: str) -> subprocess.Popen:
    """`headway train` of the sweep as a separate driver process on the cluster."""
    return subprocess.Popen([HEADWAY, *SWEEP, "--out", str(out), "--executor", "ray", "--ray-address", cluster.address,
                             *extra], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **cluster.env})


def finish(process: subprocess.Popen) -> str:
    """Wait for a driver; return its stderr after checking it succeeded."""
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 0, err
    return err


def assert_same_store(expected: Path, got: Path) -> None:
    """Same ensembles, metrics, final summaries and every checkpoint tensor, bit for bit."""
    names = sorted(d.name for d in layout.ensemble_dirs(expected))
    assert sorted(d.name for d in layout.ensemble_dirs(got)) == names
    for name in names:
        a, b = expected / name, got / name
        pd.testing.assert_frame_equal(pd.read_parquet(a / layout.METRICS), pd.read_parquet(b / layout.METRICS))
        finals = [[run["final"] for run in layout.read_json(d / layout.SUMMARY)["runs"]] for d in (a, b)]
        assert finals[0] == finals[1]
        assert checkpoint_steps(a) == checkpoint_steps(b)
        for step in checkpoint_steps(a):
            left, right = (load_file(layout.checkpoint_path(d, step)) for d in (a, b))
            assert left.keys() == right.keys()
            assert all(left[key].equal(right[key]) for key in left), f"{name} step {step} differs"


def resume_step(run_dir: Path) -> int:
    """The step of an ensemble's newest resume state (0 if none)."""
    pointer = run_dir / layout.RESUME / layout.LATEST
    try:
        return layout.read_json(pointer)["step"]
    except (OSError, ValueError, KeyError):
        return 0


def task_processes() -> dict[int, str]:
    """pid -> ensemble name of every Ray worker now running an ensemble task (its title is `ray::NAME`)."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            title = (entry / "cmdline").read_bytes().split(b"\0")[0].decode()
        except (OSError, ValueError):
            continue
        if title.startswith("ray::L"):
            found[int(entry.name)] = title.removeprefix("ray::").strip()
    return found


def wait_until(condition, what: str, timeout: float = TIMEOUT_S):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def mid_ensemble(out: Path):
    """(pid, ensemble) of a running task whose ensemble has saved a resume state but not finished."""
    for pid, name in task_processes().items():
        run_dir = out / name
        if 100 <= resume_step(run_dir) < 500 and not (run_dir / layout.SUMMARY).exists():
            return pid, name
    return None


@pytest.mark.slow
def test_a_sweep_over_two_nodes_equals_a_local_run(reference, cluster, tmp_path):
    err = finish(driver(cluster, tmp_path, "--progress"))
    assert "\r" not in err  # off a terminal, progress is plain lines (a short grid prints none), never a bar
    assert "2 of 2 ensemble(s) done on 2 node(s), 0 retried" in err
    assert_same_store(reference, tmp_path)
    assert not (tmp_path / ".headway-check").exists()  # the shared-store check cleans up after itself


@pytest.mark.slow
def test_a_worker_killed_mid_ensemble_is_retried_and_resumes_to_the_same_numbers(reference, cluster, tmp_path):
    process = driver(cluster, tmp_path)
    pid, name = wait_until(lambda: mid_ensemble(tmp_path), "an ensemble task past its first resume state")
    os.kill(pid, signal.SIGKILL)
    err = finish(process)
    assert "2 of 2 ensemble(s) done on" in err and "1 retried after a lost worker" in err
    assert layout.read_json(tmp_path / name / layout.SUMMARY)["resumed_from_step"] >= 100
    assert_same_store(reference, tmp_path)


@pytest.mark.slow
def test_a_lost_driver_is_resumed_by_the_same_command(reference, cluster, tmp_path):
    process = driver(cluster, tmp_path)
    _, name = wait_until(lambda: mid_ensemble(tmp_path), "an ensemble task past its first resume state")
    process.kill()
    process.communicate(timeout=60)
    wait_until(lambda: not task_processes(), "Ray to stop the lost driver's tasks", timeout=60)
    assert not (tmp_path / name / layout.SUMMARY).exists()
    finish(driver(cluster, tmp_path))
    assert layout.read_json(tmp_path / name / layout.SUMMARY)["resumed_from_step"] >= 100
    assert_same_store(reference, tmp_path)


@pytest.mark.slow
def test_without_an_address_ray_starts_on_this_machine_for_the_command(reference, tmp_path):
    env = {key: value for key, value in os.environ.items() if not key.startswith("RAY_")}
    result = subprocess.run([HEADWAY, *SWEEP, "--out", str(tmp_path), "--executor", "ray"], capture_output=True,
                            text=True, env=env, timeout=TIMEOUT_S)
    assert result.returncode == 0, result.stderr
    assert "2 of 2 ensemble(s) done on 1 node(s)" in result.stderr
    assert_same_store(reference, tmp_path)


@pytest.mark.slow
def test_a_failing_ensemble_is_reported_by_name_while_the_others_finish(reference, cluster, tmp_path):
    broken = sorted(d.name for d in layout.ensemble_dirs(reference))[0]
    runs = layout.read_json(reference / broken / layout.CONFIG)["runs"]
    other_sweep = [{**run, "seed": run["seed"] + 100} for run in runs]  # valid runs this sweep does not hold
    layout.write_json(tmp_path / broken / layout.CONFIG, {"runs": other_sweep})
    process = driver(cluster, tmp_path)
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2, err
    assert "1 of 2 ensemble(s) done" in err, err
    assert f"headway: error: {broken}: " in err and "already holds other runs" in err
    finished = [d for d in layout.ensemble_dirs(tmp_path) if d.name != broken]
    assert len(finished) == 1 and (finished[0] / layout.SUMMARY).is_file()


# A driver process running the small sorting study of test_study_sorting through Ray.
STUDY_DRIVER = """
import sys
from headway.execution import make_executor
from headway.studies.sorting.study import SortingStudy
from test_study_sorting import small_plan
SortingStudy(small_plan(), sys.argv[1], device="cpu", progress=False, executor=make_executor("ray", sys.argv[2])).run()
"""


@pytest.mark.slow
def test_a_study_through_ray_reports_what_a_local_study_reports(cluster, tmp_path):
    local = SortingStudy(small_plan(), tmp_path / "local", device="cpu", progress=False).run().parent
    spread = tmp_path / "ray"
    subprocess.run([sys.executable, "-c", STUDY_DRIVER, str(spread), cluster.address], check=True, timeout=TIMEOUT_S,
                   cwd=Path(__file__).parent, env={**os.environ, **cluster.env})
    assert pd.read_csv(local / "results.csv").equals(pd.read_csv(spread / "results.csv"))
    summaries = [json.loads((folder / "summary.json").read_text()) for folder in (local, spread)]
    assert summaries[0]["verdicts"] == summaries[1]["verdicts"]
    assert summaries[1]["hardware"]["executor"] == "ray: 2 node(s), 2 CPUs, 0 GPUs"
    assert (spread / "analysis").is_dir() and not (spread / ".headway-check").exists()


@pytest.mark.slow
def test_requests_no_node_can_hold_end_with_status_2_before_anything_runs(cluster, tmp_path):
    process = driver(cluster, tmp_path / "big", "--ray-memory", "64TiB")
    _, err = process.communicate(timeout=TIMEOUT_S)
    assert process.returncode == 2 and len(err.strip().splitlines()) == 1
    assert "each ensemble task asks for 6.554e+04 GiB of memory but the largest node of the cluster has" in err
    assert "lower --ray-memory" in err and not (tmp_path / "big").exists()


@pytest.mark.parametrize("address, message", [
    ("127.0.0.1:{free}", "no Ray cluster at --ray-address 127.0.0.1:"),  # a port free when the test runs
    ("headnode", "is not an address; write HOST:PORT"),
    ("10.0.0.5:99999", "is not an address"),
])
def test_bad_or_unreachable_addresses_end_with_status_2_and_one_line(address, message, tmp_path):
    address = address.format(free=free_port())
    result = subprocess.run([HEADWAY, *SWEEP, "--out", str(tmp_path / "out"), "--executor", "ray",
                             "--ray-address", address], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr
    assert not (tmp_path / "out").exists()


def test_ray_options_are_refused_with_the_local_executor_and_resources_are_checked():
    with pytest.raises(ConfigError, match="--ray-gpus set with --executor local; add --executor ray"):
        make_executor("local", gpus=1)
    with pytest.raises(ConfigError, match="executor = 'slurm' is not known; use one of local, ray"):
        make_executor("slurm")
    with pytest.raises(ConfigError, match="--ray-cpus got 0"):
        TaskResources.parse(0, None, None, 3)
    with pytest.raises(ConfigError, match="above 1 GPU, Ray takes whole numbers only"):
        TaskResources.parse(1, 1.5, None, 3)
    with pytest.raises(ConfigError, match="--ray-retries got -1"):
        TaskResources.parse(1, None, None, -1)
    assert TaskResources.parse(2, 0.25, "4GiB", 0) == TaskResources(2, 0.25, 4 * 2**30, 0)
    assert TaskResources.parse(1, None, "auto", 3).memory is None
    assert isinstance(make_executor(), LocalExecutor)


@pytest.mark.parametrize("text, size", [("4GiB", 4 * 2**30), ("500MB", 500 * 10**6), ("2g", 2 * 10**9),
                                        ("1.5 GiB", 3 * 2**29), ("123", 123)])
def test_memory_sizes_parse(text, size):
    assert parse_bytes("--ray-memory", text) == size


@pytest.mark.parametrize("text", ["", "4 lots", "GiB", "-1GiB", "1e9"])
def test_bad_memory_sizes_name_the_value(text):
    with pytest.raises(ConfigError, match=f"--ray-memory got {text!r}; write a size"):
        parse_bytes("--ray-memory", text)


def test_a_store_the_worker_cannot_see_is_refused(tmp_path):
    marker = tmp_path / "check"
    marker.write_text("token-a")
    StoreCheck(str(marker), "token-a").verify()
    with pytest.raises(ConfigError, match="is not shared with node"):
        StoreCheck(str(marker), "token-b").verify()
    with pytest.raises(ConfigError, match="is not shared with node"):
        StoreCheck(str(tmp_path / "elsewhere"), "token-a").verify()


def test_failed_jobs_are_reported_together_bad_input_keeping_status_2():
    with pytest.raises(ConfigError, match="L1-a: bad value; L2-b: other bad value"):
        raise_failures({"L2-b": ConfigError("other bad value"), "L1-a": ConfigError("bad value")})
    with pytest.raises(JobsFailed, match="2 ensemble.s. failed, the rest finished; re-run .* L1-a: bad value; "
                                         "L2-b: out of memory"):
        raise_failures({"L2-b": RuntimeError("trace\nout of memory"), "L1-a": ConfigError("bad value")})


@pytest.mark.slow
@pytest.mark.parametrize("axes", [{"layers": [2], "hops": [2], "seed": list(range(4))},
                                  {"layers": [3], "hops": [3], "seed": list(range(32))}])
def test_the_memory_a_task_reserves_covers_the_measured_peak_within_2x(axes, tmp_path):
    runs = expand_grid({**scale_settings("cpu", "retrieval"), "steps": 20}, axes)
    flags = [f"--{key}={','.join(map(str, values))}" for key, values in axes.items()]
    measure = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, capture_output=True); "
               "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    result = subprocess.run([sys.executable, "-c", measure, HEADWAY, "train", "--scale", "cpu", *flags, "--steps", "20",
                             "--no-progress", "--out", str(tmp_path)], capture_output=True, text=True, check=True)
    peak = int(result.stdout.split()[-1]) * 1024
    assert peak <= training_memory(runs) <= 2 * peak
