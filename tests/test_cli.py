"""The command line: JSONL export, training a grid, `show`, and one-line refusals with status 2."""

from __future__ import annotations

import json
import re

import pytest
from conftest import TINY

from headway.cli.main import main
from headway.tasks.retrieval.solver import solve


def run_cli(args, capsys):
    code = main(args)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_data_retrieval_writes_resolvable_jsonl(tmp_path, capsys):
    out = tmp_path / "data.jsonl"
    code, _, _ = run_cli(["data", "retrieval", "--hops", "3", "--chains", "2", "--vocab", "20", "--count", "50",
                          "--seed", "4", "--out", str(out)], capsys)
    assert code == 0
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(records) == 50
    for r in records:
        assert solve(r["statements"], r["query"], r["hops"]) == r["chain"]
        assert r["chain"][-1] == r["answer"] and r["hops"] == 3


def test_data_retrieval_conditional_to_stdout(capsys):
    code, out, _ = run_cli(["data", "retrieval", "--conditional", "--hops", "2", "--chains", "2",
                            "--vocab", "30", "--count", "5"], capsys)
    assert code == 0
    for line in out.splitlines():
        r = json.loads(line)
        classes = {int(k): v for k, v in r["classes"].items()}
        rules = {int(k): v for k, v in r["rules"].items()}
        assert solve(r["statements"], r["query"], r["hops"], classes, rules)[-1] == r["answer"]
        assert all(len(s) == 3 for s in r["statements"])


@pytest.mark.parametrize("args, fragment", [
    (["--hops", "0"], "hops"),
    (["--chains", "5", "--hops", "4", "--vocab", "20"], "vocab"),
    (["--layout", "diagonal"], "diagonal"),
    (["--curriculum", "sometimes"], "sometimes"),
    (["--hops", "two"], "two"),
    (["--count", "0"], "0"),
    (["-n", "5"], "--count"),
    (["-D", "2"], "--hops"),
])
def test_bad_data_arguments_exit_2_with_one_line_and_write_nothing(tmp_path, capsys, args, fragment):
    out = tmp_path / "never.jsonl"
    code, stdout, err = run_cli(["data", "retrieval", *args, "--out", str(out)], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("headway: error:") and fragment in lines[0]
    assert "Traceback" not in err and stdout == ""
    assert not out.exists() and not list(tmp_path.iterdir())


@pytest.mark.parametrize("args, fragment", [
    (["--layers", "0"], "layers"),
    (["--lr", "fast"], "fast"),
    (["--attention", "sideways"], "sideways"),
    (["--heads", "3", "--d-model", "16"], "divisible"),
    (["--scale", "huge"], "huge"),
])
def test_bad_train_arguments_exit_2_and_train_nothing(tmp_path, capsys, args, fragment):
    out = tmp_path / "runs"
    code, _, err = run_cli(["train", "--out", str(out), "--scale", "cpu", *args], capsys)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and fragment in lines[0], err
    assert not out.exists()


def test_train_grid_then_show_json(tmp_path, capsys):
    out = tmp_path / "runs"
    settings = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items() if k not in ("layers", "hops")]
    code, _, err = run_cli(["train", "--out", str(out), "--no-progress", "--layers", "1,2", "--hops", "1,2",
                            *settings, "--seed", "0..1"], capsys)
    assert code == 0, err
    assert len([d for d in out.iterdir() if d.is_dir()]) == 4  # layers × hops shapes; seeds packed
    code, stdout, _ = run_cli(["show", str(out), "--json"], capsys)
    assert code == 0
    runs = json.loads(stdout)
    assert len(runs) == 8
    for r in runs:
        assert {"layers", "hops", "seed", "curriculum", "layout"} <= set(r["config"])
        assert r["final"]["step"] == TINY["steps"]
        assert 0.0 <= r["final"]["val_accuracy"] <= 1.0 and r["final"]["val_loss"] > 0
    assert {(r["config"]["layers"], r["config"]["hops"], r["config"]["seed"]) for r in runs} == {
        (layers, hops, seed) for layers in (1, 2) for hops in (1, 2) for seed in (0, 1)}
    code, table, _ = run_cli(["show", str(out)], capsys)
    assert code == 0 and "val_accuracy" in table and len(table.strip().splitlines()) == 9


def test_show_missing_directory_is_a_one_line_error(tmp_path, capsys):
    code, _, err = run_cli(["show", str(tmp_path / "nothing")], capsys)
    assert code == 2 and "holds no runs" in err and len(err.strip().splitlines()) == 1


def test_rerun_with_an_extra_seed_trains_only_the_new_run(tmp_path, capsys):
    out = tmp_path / "runs"
    settings = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    assert run_cli(["train", "--out", str(out), "--no-progress", *settings, "--seed", "0,1"], capsys)[0] == 0
    (first,) = [d for d in out.iterdir() if d.is_dir()]
    stamp = (first / "summary.json").stat().st_mtime_ns
    code, _, err = run_cli(["train", "--out", str(out), "--no-progress", "--seed", "2,1,0", *settings], capsys)
    assert code == 0, err
    dirs = [d for d in out.iterdir() if d.is_dir()]
    assert len(dirs) == 2 and (first / "summary.json").stat().st_mtime_ns == stamp
    runs = json.loads(run_cli(["show", str(out), "--json"], capsys)[1])
    assert sorted(r["config"]["seed"] for r in runs) == [0, 1, 2]


def test_show_json_on_an_unfinished_run(tmp_path, capsys):
    out = tmp_path / "runs"
    settings = [f"--{k.replace('_', '-')}={v}" for k, v in TINY.items()]
    assert run_cli(["train", "--out", str(out), "--no-progress", *settings], capsys)[0] == 0
    (run_dir,) = [d for d in out.iterdir() if d.is_dir()]
    (run_dir / "summary.json").unlink()
    code, stdout, err = run_cli(["show", str(out), "--json"], capsys)
    assert code == 0, err
    (run,) = json.loads(stdout)
    assert run["complete"] is False and run["final"]["step"] == TINY["steps"]


@pytest.mark.parametrize("device, fragment", [("gpu7", "gpu7"), ("cuda", "no CUDA GPU")])
def test_unusable_device_is_a_one_line_error(tmp_path, capsys, device, fragment):
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("a GPU is present")
    code, _, err = run_cli(["train", "--out", str(tmp_path / "r"), "--scale", "cpu", "--device", device], capsys)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "r").exists()


def test_choice_named_none_is_a_word_not_a_missing_value():
    from headway.cli.options import parse_values

    assert parse_values("curriculum", "ic,none", str) == ["ic", "none"]
    assert parse_values("grad_clip", "none", float) == [None]


def test_a_refusal_is_not_preceded_by_the_line_announcing_the_runs(tmp_path, capsys):
    """`N run(s) → OUT` comes once the command is accepted: refused for what its folder holds (an ensemble whose
    config.json lacks its checksum), `train` prints the refusal alone, and leaves the folder as it was."""
    config = tmp_path / "runs" / "L1-S5-0123abcd" / "config.json"
    config.parent.mkdir(parents=True)
    config.write_text('{"runs": []}')
    code, _, err = run_cli(["train", "--out", str(tmp_path / "runs"), "--scale", "cpu", "--steps", "2",
                            "--device", "cpu", "--no-progress"], capsys)
    assert code == 2 and len(err.strip().splitlines()) == 1 and f"{config} is damaged" in err, err
    assert [p.name for p in (tmp_path / "runs").rglob("*")] == ["L1-S5-0123abcd", "config.json"]


def test_integers_are_read_exactly():
    """`2`, `2.0` and `2e4` are whole numbers; a value a float would round to one (`2.0000000000000001`) is not."""
    from headway.cli.options import parse_value
    from headway.errors import ConfigError

    assert [parse_value("hops", text, int) for text in ("2", " 2.0 ", "2e4", "+3", "1_000", "20e-1")] == \
        [2, 2, 20000, 3, 1000, 2]
    assert parse_value("seed", "1e30", int) == 10**30
    for text in ("2.0000000000000001", "2.5", "1e-1", "inf", "nan", "0x10", "1e400", "9" * 401, "two", ""):
        with pytest.raises(ConfigError, match="expected an integer"):
            parse_value("hops", text, int)


@pytest.mark.parametrize("args, hint", [
    (["train", "--out", "x", "--seeds", "0,1"], "option --seeds was renamed; use --seed"),
    (["demo", "--seeds", "0"], "use --seed"),
    (["study", "retrieval", "--out", "x", "--curricula", "ic", "--dry-run"], "use --curriculum"),
    (["study", "sorting", "--out", "x", "--mean-gaps", "2", "--dry-run"], "use --mean-gap"),
    (["study", "sorting", "--out", "x", "--weight-decays", "0", "--dry-run"], "use --weight-decay"),
    (["data", "sorting", "-n", "5"], "use --length (numbers per list) or --count"),
    (["data", "sorting", "--no-repeats"], "use --repeats false"),
    (["data", "prompts", "--out", "x", "-n", "5"], "use --questions"),
])
def test_old_option_spellings_are_refused_with_a_hint(tmp_path, capsys, monkeypatch, args, hint):
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(args, capsys)
    assert code == 2 and hint in err and len(err.strip().splitlines()) == 1, err
    assert out == "" and not list(tmp_path.iterdir())


def test_boolean_settings_take_a_value_or_stand_alone(capsys):
    code, out, _ = run_cli(["data", "sorting", "--repeats", "--length", "12", "--values", "4", "--count", "3"], capsys)
    assert code == 0 and all(len(set(json.loads(line)["list"])) < 12 for line in out.splitlines())
    code, out, _ = run_cli(["data", "sorting", "--repeats", "false", "--count", "3"], capsys)
    assert code == 0 and all(len(set(json.loads(line)["list"])) == 10 for line in out.splitlines())
    code, _, err = run_cli(["data", "sorting", "--repeats", "maybe"], capsys)
    assert code == 2 and "maybe" in err


def test_study_options_come_from_the_plan(capsys):
    code, out, _ = run_cli(["study", "retrieval", "--out", "unused", "--layers", "1,2", "--hops", "1", "--seed", "0",
                            "--curriculum", "ic", "--conditional-hops", "none", "--dry-run"], capsys)
    assert code == 0 and "depth: 2 runs in 2 ensemble(s)" in out and "conditional: not run" in out
    code, out, _ = run_cli(["study", "retrieval", "--help"], capsys)
    for option in ("--seed", "--curriculum", "--layout", "--conditional-seed", "--steps", "--vocab", "--heads"):
        assert option in out
    code, _, err = run_cli(["study", "retrieval", "--out", "unused", "--layers", "2", "--hops", "1", "--seed", "0",
                            "--conditional-hops", "none", "--heads", "7", "--dry-run"], capsys)
    assert code == 2 and "heads = 7" in err and "divisible" in err
    code, _, err = run_cli(["study", "retrieval", "--out", "unused", "--layout", "diagonal", "--dry-run"], capsys)
    assert code == 2 and "diagonal" in err


def test_a_study_is_judged_by_the_rules_given_and_a_bad_rule_is_named(capsys):
    from headway.cli.study import parse_rules
    from headway.studies.sorting.study import SortingStudy

    rules = parse_rules(SortingStudy, ("llc_bias_statistic=pooled", "alpha=0.01"))
    assert (rules.llc_bias_statistic, rules.alpha, rules.llc_fall) == ("pooled", 0.01, SortingStudy.rules_class().llc_fall)
    assert parse_rules(SortingStudy, ()) == SortingStudy.rules_class()
    code, out, _ = run_cli(["study", "sorting", "--out", "unused", "--rule", "llc_bias_statistic=pooled", "--dry-run"],
                           capsys)
    assert code == 0 and "rules: llc_bias_statistic = pooled (the others at their defaults)" in out
    for bad, said in [("llc_bias_statistic=mean", "llc_bias_statistic = 'mean' is unknown; choose one of largest, pooled"),
                      ("nosuch=1", "'nosuch' is no rule of study sorting; its rules are alpha, "),
                      ("alpha", "'alpha' is not NAME=VALUE"), ("alpha=2", "rule alpha = 2.0 is invalid"),
                      ("alpha=none", "--rule alpha got 'none'; it needs a value (float)")]:
        code, _, err = run_cli(["study", "sorting", "--out", "unused", "--rule", bad, "--dry-run"], capsys)
        assert code == 2 and said in err and "Traceback" not in err
    code, _, err = run_cli(["study", "sorting", "--out", "unused", "--rule", "alpha=0.01", "--rule", "alpha=0.02",
                            "--dry-run"], capsys)
    assert code == 2 and "--rule alpha is given twice" in err


@pytest.mark.slow
def test_demo_trains_the_composing_cell_and_draws_the_phase_diagram(tmp_path, capsys):
    code, out, _ = run_cli(["demo", "--out", str(tmp_path), "--layers", "1", "--hops", "1", "--seed", "0"], capsys)
    assert code == 0, out
    assert "D=1  layers=1  acc=1.000" in out
    assert re.search(r"seed 0: acc=(0\.9[5-9]\d|1\.000)  compositional", out) and "links read root-ward" in out
    assert (tmp_path / "depth_phase.png").stat().st_size > 10_000
