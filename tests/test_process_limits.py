"""The limits a process lives under (RLIMIT_AS, RLIMIT_DATA, its cgroup), a lack of memory in any allocator, and
work known up front (prompts, data) refused before it starts: each one line, never a traceback."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import time
from collections import namedtuple

import numpy as np
import pytest
import torch

from headway.cli.main import main
from headway.errors import ConfigError
from headway.execution import memory
from headway.limits import MAX_PROMPT_CHARACTERS
from headway.tasks.retrieval.prompts.questions import (QuestionSet, check_renderable, make_questions,
                                                       projected_characters)
from headway.tasks.retrieval.config import RetrievalConfig

GiB = 2**30
OUT_OF_MEMORY = ("headway: error: out of memory; lower the sizes of the command (docs/cli.md#limits) and run it again: "
                 "everything saved so far is kept\n")


def test_an_address_space_limit_bounds_the_budget_by_what_is_mapped_already(monkeypatch):
    mapped = memory._status_bytes("VmSize")
    assert mapped > 100 * 2**20  # Python and torch map hundreds of MB before any work
    limits = {resource.RLIMIT_AS: mapped + GiB, resource.RLIMIT_DATA: resource.RLIM_INFINITY}
    monkeypatch.setattr(resource, "getrlimit", lambda which: (limits.get(which, resource.RLIM_INFINITY),) * 2)
    rooms = memory.ram_rooms()
    assert "the data-segment limit (RLIMIT_DATA)" not in rooms  # a limit not set is no room
    assert GiB - 64 * 2**20 < rooms["the address-space limit (RLIMIT_AS)"] <= GiB  # what the test itself maps moves
    assert memory.available_ram() <= rooms["the address-space limit (RLIMIT_AS)"]
    limits[resource.RLIMIT_DATA] = memory._status_bytes("VmData") + GiB // 2
    assert GiB // 2 - 64 * 2**20 < memory.ram_rooms()["the data-segment limit (RLIMIT_DATA)"] <= GiB // 2
    assert memory.available_ram() <= GiB // 2
    limits[resource.RLIMIT_AS] = mapped // 2  # below what is mapped: no room at all, not a negative one
    assert memory.ram_rooms()["the address-space limit (RLIMIT_AS)"] == 0


def fake_proc(tmp_path, cgroup, mounts):
    """A /proc/self with the given cgroup and mountinfo lines."""
    proc = tmp_path / "proc"
    proc.mkdir()
    (proc / "cgroup").write_text("".join(line + "\n" for line in cgroup))
    (proc / "mountinfo").write_text("".join(line + "\n" for line in mounts))
    return proc


def cgroup_files(folder, **files):
    """A cgroup folder holding `files` (name with dots as underscores -> text)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name.replace("_", ".", 1)).write_text(text)


def test_cgroup_v2_room_is_the_least_over_the_group_and_its_parents(tmp_path):
    mount = tmp_path / "cg"
    proc = fake_proc(tmp_path, ["0::/user.slice/job"], [f"30 25 0:26 / {mount} rw,nosuid - cgroup2 cgroup2 rw"])
    cgroup_files(mount / "user.slice" / "job", memory_max=str(2 * GiB), memory_current=str(GiB),
                 memory_stat=f"anon {GiB}\ninactive_file {100 * 2**20}\n")
    cgroup_files(mount / "user.slice", memory_max="max\n", memory_current=str(3 * GiB))
    assert memory.cgroup_room(proc) == GiB + 100 * 2**20  # reclaimable page cache counts as room
    cgroup_files(mount / "user.slice", memory_max=str(3 * GiB + GiB // 4))
    assert memory.cgroup_room(proc) == GiB // 4  # the parent's limit binds
    cgroup_files(mount / "user.slice", memory_max="max")
    cgroup_files(mount / "user.slice" / "job", memory_max="max")
    assert memory.cgroup_room(proc) is None  # no limit anywhere


def test_cgroup_v2_seen_from_inside_a_container_is_the_mount_itself(tmp_path):
    mount = tmp_path / "cg"
    proc = fake_proc(tmp_path, ["0::/docker/abc"], [f"30 25 0:26 /docker/abc {mount} rw - cgroup2 cgroup2 rw"])
    cgroup_files(mount, memory_max=str(GiB), memory_current=str(GiB // 4))
    assert memory.cgroup_room(proc) == 3 * GiB // 4


def test_cgroup_v1_memory_controller_is_the_fallback(tmp_path):
    v1, v2 = tmp_path / "memory", tmp_path / "unified"
    proc = fake_proc(tmp_path, ["4:memory:/job", "0::/"],
                     [f"35 31 0:32 / {v1} rw,relatime - cgroup cgroup rw,memory",
                      f"30 25 0:26 / {v2} rw - cgroup2 cgroup2 rw"])
    v2.mkdir()  # a hybrid machine: cgroup2 mounted, memory under v1
    cgroup_files(v1 / "job", memory_limit_in_bytes=str(2 * GiB), memory_usage_in_bytes=str(GiB),
                 memory_stat="cache 5\ntotal_inactive_file 1024\n")
    assert memory.cgroup_room(proc) == GiB + 1024
    cgroup_files(v1 / "job", memory_limit_in_bytes="9223372036854771712")  # v1's "no limit"
    assert memory.cgroup_room(proc) is None


def test_a_refusal_names_the_limit_that_binds(monkeypatch):
    monkeypatch.setattr(memory, "machine_ram", lambda: 64 * GiB)
    monkeypatch.setattr(memory, "cgroup_room", lambda: GiB)
    with pytest.raises(ConfigError) as refused:
        memory.check_fits(2 * GiB, "cpu", "this work", "--count")
    assert str(refused.value) == ("this work needs about 2.0 GiB, more than the 0.8 GiB cpu can give now (the cgroup's "
                                  "memory limit leaves this process 1.0 GiB); lower --count, or add --no-memory-check "
                                  "to try anyway")
    monkeypatch.setattr(memory, "memory_budget", lambda device: 16 * GiB)  # a budget the cgroup does not explain
    with pytest.raises(ConfigError, match=r"more than the 16\.0 GiB cpu can give now; lower --count"):
        memory.check_fits(20 * GiB, "cpu", "this work", "--count")
    monkeypatch.undo()
    monkeypatch.setattr(memory, "cgroup_room", lambda: None)
    monkeypatch.setattr(memory, "machine_ram", lambda: GiB)
    with pytest.raises(ConfigError, match=r"more than the 0\.8 GiB cpu can give now; lower --count"):
        memory.check_fits(2 * GiB, "cpu", "this work", "--count")


@pytest.mark.skipif(memory.machine_ram() < 8 * GiB, reason="the estimate must fit the free RAM for the limit to bind")
def test_train_under_an_address_space_limit_is_refused_before_anything_is_allocated(tmp_path):
    """`headway train` whose estimate (4.7 GiB) fits this machine's free RAM but not a 2.5 GB address space."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (2_500_000_000, 2_500_000_000))

    out = tmp_path / "runs"
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "headway.cli.main", "train", "--batch-size", "16000", "--steps", "1",
                           "--out", str(out)], preexec_fn=limit, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert done.returncode == 2, done.stderr
    assert done.stderr.count("\n") == 1 and done.stderr.startswith("headway: error: training one run like ")
    assert "more than the" in done.stderr and "(the address-space limit (RLIMIT_AS) leaves this process" in done.stderr
    assert "lower batch_size" in done.stderr
    assert not out.exists() or not any(out.rglob("config.json"))
    assert time.monotonic() - start < 60


def allocate(how):
    """A `draw` that fails to allocate as `how` says, the way each allocator does."""
    def draw(self, n, rng, validation=False):
        if how == "torch-cpu":
            torch.empty(2**60, dtype=torch.uint8)  # torch's own RuntimeError, nothing allocated
        if how == "torch-cuda":
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB (GPU 0; 79.1 GiB total)")
        if how == "numpy":
            np.empty(2**60, dtype=np.uint8)
        if how == "compiled":
            try:
                torch.empty(2**60, dtype=torch.uint8)
            except RuntimeError as err:
                raise RuntimeError("backend='inductor' raised an error while compiling") from err
        raise RuntimeError("Expected all tensors to be on the same device, but found at least two devices")
    return draw


@pytest.mark.parametrize("how", ["torch-cpu", "torch-cuda", "numpy", "compiled"])
def test_any_allocator_failing_inside_a_command_is_the_one_line_out_of_memory(monkeypatch, capsys, how):
    monkeypatch.setattr(RetrievalConfig, "draw", allocate(how))
    assert main(["data", "retrieval", "--count", "5"]) == 1
    captured = capsys.readouterr()
    assert captured.err == OUT_OF_MEMORY and captured.out == ""


def test_another_runtime_error_is_not_taken_for_a_lack_of_memory(monkeypatch):
    monkeypatch.setattr(RetrievalConfig, "draw", allocate("other"))
    with pytest.raises(RuntimeError, match="same device"):
        main(["data", "retrieval", "--count", "5"])


def test_the_projected_prompt_text_is_what_is_drawn():
    spec = QuestionSet(formulations=("F1", "F4", "F5"), max_hops=4, chains=6, questions=20, seed=3)
    drawn = sum(len(question.body) for question in make_questions(spec))
    assert abs(projected_characters(spec) - drawn) < 0.02 * drawn


@pytest.mark.parametrize("command", ["data prompts", "llm-eval --backend http --base-url http://127.0.0.1:9/v1"])
@pytest.mark.parametrize("options, said", [
    ("-f F1 --max-hops 11 --chains 64 --questions 3125",
     "F1 assign at 11 hops × 64 chains: 704 variable names needed but only 676 are available; use fewer hops or chains"),
    ("--max-hops 64 --chains 64 --questions 625",
     "F1 assign at 64 hops × 64 chains: 4096 variable names needed but only 676 are available"),
    ("-f F3 --chains 32 --max-hops 1 --questions 1", "F3 boxes at 1 hops × 32 chains: 32 rooms needed but only 24"),
    ("-f F2 --max-hops 15 --chains 64 --questions 3125",
     "1 formulation(s) × hops 1..15 × 64 chains × 3125 questions render about 571 M characters of prompts; at most "
     "100 M are drawn in one run (docs/cli.md#limits); lower --questions, --max-hops or --chains"),
])
def test_questions_that_cannot_be_drawn_are_refused_before_drawing(tmp_path, capsys, command, options, said):
    out = tmp_path / "out"
    start = time.monotonic()
    assert main([*command.split(), *options.split(), "--out", str(out)]) == 2  # no server is asked, none runs
    assert time.monotonic() - start < 10  # drawing them took over a minute
    err = capsys.readouterr().err
    assert err.startswith(f"headway: error: {said}") and err.count("\n") == 1
    assert not out.exists()


def test_the_default_questions_are_far_inside_the_bound_on_prompt_text():
    assert projected_characters(QuestionSet()) < MAX_PROMPT_CHARACTERS / 5
    check_renderable(QuestionSet())  # not refused


def test_data_whose_lines_the_disk_cannot_hold_is_refused_before_drawing(monkeypatch, tmp_path, capsys):
    import shutil

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(10**6, 10**6 - 50_000, 50_000))
    drawn = []
    original = RetrievalConfig.draw

    def counting(self, n, rng, validation=False):
        drawn.append(n)
        return original(self, n, rng, validation)

    monkeypatch.setattr(RetrievalConfig, "draw", counting)
    out = tmp_path / "examples.jsonl"
    assert main(["data", "retrieval", "--count", "1000", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headway: error: --count 1000 examples write about 0.") and err.count("\n") == 1
    assert " MB to " in err and "more than the 0.1 MB free on its disk; lower --count or free space" in err
    assert drawn == [256] and not out.exists()  # only the sample that measures a line
