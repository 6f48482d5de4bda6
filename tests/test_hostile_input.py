"""Hostile input: every command's options fuzzed (exit 0, or exit 2 with one line; no traceback, no hang, nothing
written on a refusal, no nonsense accepted), the bad inputs an independent sweep found, each refused in one line
before anything is allocated, and the output paths checked up front. The full sweep, one option at a time over
every command: `python tests/hostile.py` (tests/hostile.py)."""

from __future__ import annotations

import time

import pytest
from hostile import argv_for, commands, nonsense, options, run_case, values_for
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from headway.cli.main import main
from headway.cli.options import writable_problem
from headway.limits import MAX_LIST

COMMANDS = commands()
CASE_SECONDS = 30  # a case still running then is a hang: every refusal comes in well under a second


def given_options(path: str) -> st.SearchStrategy[list[tuple[str, str | None]]]:
    """Up to four distinct options of command `path`, each with a value it may be given (None: a flag alone)."""
    choices = [(option.opts[0], (None,) if option.is_flag else values_for(option)) for option in options(COMMANDS[path])]
    if path in ("show", "export tl"):
        choices.append(("ARGUMENT", ("", "afile", "afile/sub", "new", "existing")))
    pairs = st.sampled_from(choices).flatmap(lambda c: st.tuples(st.just(c[0]), st.sampled_from(c[1])))
    return st.lists(pairs, min_size=1, max_size=4, unique_by=lambda pair: pair[0])


@pytest.mark.parametrize("path", sorted(COMMANDS))
def test_fuzzed_options_exit_0_or_2_with_one_line_and_write_nothing_on_refusal(path):
    """Derandomised: the same 100 command lines per command on every run, each bounded to CASE_SECONDS."""

    @settings(max_examples=100, derandomize=True, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow])
    @given(given_options(path))
    def check(given: list[tuple[str, str | None]]) -> None:
        argv = argv_for(path, given)
        outcome = run_case(argv, CASE_SECONDS)
        assert outcome.kind in ("clean refusal", "accepted"), (argv, outcome)
        if any(value is not None and nonsense(flag, value) for flag, value in given):
            assert outcome.kind == "clean refusal", (argv, outcome)

    check()


# The bad inputs of the sweep that found them (issue 25), each with what its one-line refusal must name.
SWEEP_FINDINGS = [
    (["train", "--out", "runs", "--seed", "0..1e12"], f"a list holds at most {MAX_LIST}"),
    (["train", "--out", "runs", "--seed", "0..1e6"], f"a list holds at most {MAX_LIST}"),
    (["train", "--out", "runs", "--seed", "0..99", "--hops", "1..99", "--layers", "1..2"], "one command trains at most"),
    (["train", "--out", "runs", "--layers", "1e12"], "layers = 1000000000000 is invalid; use an integer in 1..256"),
    (["train", "--out", "runs", "--batch-size", "1e12"], "batch_size = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--steps", "1e12"], "steps = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--vocab", "1e12"], "vocab = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--d-model", "1e12"], "d_model = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--train-size", "1e12"], "train_size = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--val-size", "1e12"], "val_size = 1000000000000 is invalid"),
    (["train", "--out", "runs", "--seed", "1e30"], "seed = 1000000000000000000000000000000 is invalid"),  # exact
    (["train", "--out", "runs", "--hops", "2.0000000000000001"], "--hops got '2.0000000000000001'; expected an integer"),
    (["train", "--out", "runs", "--seed", "1" + "0" * 400], "expected an integer"),
    (["study", "sorting", "--out", "s", "--dry-run", "--device", "foo"], "device = 'foo' is not a device"),
    (["study", "retrieval", "--out", "s", "--dry-run", "--precision", "tf32", "--device", "cpu"], "tf32"),
    (["train", "--out", "runs", "--steps", "1e8", "--checkpoint-every", "1"], "checkpoints is more than 10000"),
    (["train", "--out", "runs", "--scale", "cpu", "--train-size", "268435456"], "--no-memory-check"),
    (["train", "--out", "runs", "--lr", "inf"], "--lr got 'inf'; expected a finite number"),
    (["train", "--out", "runs", "--weight-decay", "nan"], "--weight-decay got 'nan'"),
    (["train", "--out", "runs", "--eps", "inf"], "--eps got 'inf'"),
    (["train", "--out", "runs", "--init-scale", "-inf"], "--init-scale got '-inf'"),
    (["train", "--out", "runs", "--grad-clip", "inf"], "--grad-clip got 'inf'"),
    (["train", "--out", "runs", "--relations", "-1", "--classes", "0"], "applies to the conditional variant only"),
    (["train", "--out", "runs", "--task", "sorting", "--mean-gap", "2"], "applies to gaps = 'geometric' only"),
    (["train", "--out", "runs", "--task", "modular", "--val-size", "9"], "does not apply to task modular"),
    (["train", "--out", "runs", "--final-lr-fraction", "0.5"], "applies to the linear and cosine schedules only"),
    (["train", "--out", "runs", "--seed", "0,0"], "seed lists 0 twice"),
    (["study", "recipes", "--out", "s", "--dry-run", "--probe-examples", "1e12"],
     "probe_examples = 1000000000000 is invalid; use an integer in 0..100000"),
    (["study", "sorting", "--out", "s", "--dry-run", "--rule", "llc_fall"], "--rule 'llc_fall' is not NAME=VALUE"),
    (["train", "--out", "runs", "--device", "cpu:99"], "names a CPU that torch does not have"),
    (["train", "--out", "runs", "--ray-cpus", "-5"], "--ray-cpus set with --executor local"),
    (["train", "--out", "runs", "--max-ensemble", "1e12"], "'1e12' is not a valid integer"),
    (["train", "--out", ""], "the path is empty"),
    (["train", "--out", "afile/sub"], "is a file, so afile/sub cannot be created under it"),
    (["demo", "--out", "afile"], "'afile' is a file"),
    (["data", "retrieval", "--seed", "-1"], "--seed = -1 is invalid"),
    (["data", "retrieval", "--out", ""], "the path is empty"),
    (["data", "retrieval", "--out", "existing"], "'existing' is a directory"),
    (["data", "retrieval", "--count", "1000000000"], "--count = 1000000000 is invalid"),
    (["data", "sorting", "--mean-gap", "inf"], "--mean-gap got 'inf'"),
    (["data", "prompts", "--out", "p", "--max-hops", "1000000000000"], "max_hops = 1000000000000 is invalid"),
    (["data", "prompts", "--out", "p", "--questions", "100000", "--max-hops", "8"], "at most 200000 are asked"),
    (["reach", "--layers", "1e12"], "layers = 1000000000000 is invalid"),
    (["reach", "--samples", "1000000000000"], "samples = 1000000000000 is invalid"),
    (["reach", "--hops", "1", "--layers", "1", "--csv", "afile/x.csv"], "afile is a file"),
    (["llm-eval", "--out", "l", "--backend", "http", "--retries", "1000000000000"], "retries = 1000000000000 is invalid"),
    (["llm-eval", "--out", "l", "--backend", "http", "--timeout", "1e12"], "timeout = 1000000000000.0 is invalid"),
    (["llm-eval", "--out", "l", "--backend", "http", "--base-url", "http://[::1"], "base URL 'http://[::1' is invalid"),
    (["llm-eval", "--out", "l", "--model", "m", "--timeout", "5"], "--timeout do(es) not apply to the hf backend"),
    (["llm-eval", "--out", "l", "--backend", "http", "--batch-size", "2"], "--batch-size do(es) not apply to the http"),
    (["export", "tl", "runs", "--out", "afile"], "'afile' is a file"),
    (["study", "sorting", "--out", "s", "--development-seed", "-1"], "--development-seed -1 is not among the --seed"),
    (["study", "retrieval", "--out", "s", "--contrast-hops", "99"], "--contrast-hops 99 is not among the --hops"),
    (["study", "sorting", "--out", "s", "--examples", "1e12"], "--examples = 1000000000000 is invalid"),
    (["study", "sorting", "--out", "s", "--seed", "0..9999", "--mean-gap", "1,2,3"], "a study command takes at most"),
    (["study", "modular", "--out", "s", "--seed", "0,0"], "--seed lists 0 twice"),
]


@pytest.mark.parametrize("argv, fragment", SWEEP_FINDINGS, ids=[" ".join(a)[:60] for a, _ in SWEEP_FINDINGS])
def test_the_sweeps_bad_inputs_are_refused_in_one_line_before_anything_is_written(argv, fragment):
    outcome = run_case(argv, CASE_SECONDS)
    assert outcome.kind == "clean refusal" and fragment in outcome.err, (argv, outcome)


def test_a_validation_set_that_cannot_be_filled_is_refused_in_seconds(tmp_path, capsys):
    """Two distinct examples cannot make 100,000 validation examples outside the pool: refused by the probe drawn
    before the pool (the sweep once waited 150 s for it), after the line announcing the run, and before any step
    is trained, naming the task's settings."""
    started = time.perf_counter()
    assert main(["train", "--out", str(tmp_path / "runs"), "--scale", "cpu", "--val-size", "100000", "--hops", "1",
                 "--chains", "1", "--vocab", "2", "--device", "cpu", "--no-progress"]) == 2
    assert time.perf_counter() - started < CASE_SECONDS
    err = capsys.readouterr().err.splitlines()
    assert err[-1].startswith("headway: error: 4096 examples drawn held only 2 distinct ones") and len(err) == 2, err
    assert "task retrieval has too few distinct examples for this pool: use a larger vocab" in err[-1]
    assert not list((tmp_path / "runs").rglob("*.safetensors"))


def test_a_read_only_folder_is_refused_as_a_place_to_write(tmp_path, monkeypatch):
    """os.access decides (root passes permission bits, not a read-only mount, which access() reports)."""
    monkeypatch.setattr("headway.cli.options.os.access", lambda path, mode: False)
    assert writable_problem(tmp_path / "new" / "x") == \
        f"{tmp_path} is not writable here (read-only, or not yours)"
