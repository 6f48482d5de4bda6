"""lm-evaluation-harness' conventions: `headway llm-eval` reports the per-formulation and overall group scores
lm-eval reports (checked against lm-eval 0.4.13 itself), the lm-eval command `headway data prompts` prints runs
as printed, and docs/llm-eval.md's Python lines run as written."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
from test_llm_report import ScriptedBackend

from headway.cli.main import main
from headway.llm.evaluate import group_scores
from headway.llm.run import BackendSettings, run_llm_eval
from headway.tasks.retrieval.prompts.questions import QuestionSet

DOCS = Path(__file__).resolve().parents[1] / "docs" / "llm-eval.md"


def test_group_scores_count_every_question_once():
    rows = [{"formulation": f, "hops": h, "chance": 0.25, "acc": right, "acc_norm": not right}
            for f, h, right in [("F1", 1, True), ("F1", 1, False), ("F1", 2, True), ("F1", 2, True),
                                ("F5", 1, False), ("F5", 1, False), ("F5", 2, True), ("F5", 2, False)]]
    groups = group_scores(pd.DataFrame(rows)).set_index(["group", "metric"])
    assert groups.loc[("headway_retrieval_f1_assign", "acc"), "accuracy"] == 0.75
    assert groups.loc[("headway_retrieval_f5_relatives", "acc_norm"), "accuracy"] == 0.75
    overall = groups.loc[("headway_retrieval", "acc")]
    assert overall.formulation == "all" and overall.n == 8 and overall.correct == 4 and overall.accuracy == 0.5
    assert overall.ci_low < 0.5 < overall.ci_high


def test_llm_eval_prints_and_writes_the_group_scores(tmp_path, capsys):
    out = tmp_path / "run"
    result = run_llm_eval(QuestionSet(formulations=("F1", "F5"), max_hops=2, questions=3, seed=4),
                          BackendSettings(backend="http"), out, scoring="loglik", show_progress=False,
                          backend=ScriptedBackend())
    assert list(result.groups.group.unique()) == ["headway_retrieval_f1_assign", "headway_retrieval_f5_relatives",
                                                  "headway_retrieval"]
    assert (out / "groups.csv").is_file() and "Per formulation and overall" in (out / "report.html").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["groups"] == result.groups.to_dict(orient="records")
    capsys.readouterr()
    assert main(["llm-eval", "--rewrite-report", "--out", str(out)]) == 0
    printed = capsys.readouterr().out.splitlines()
    overall = result.groups.set_index(["group", "metric"]).loc[("headway_retrieval", "acc")]
    assert f"all hops=all acc={overall.accuracy:.3f} [{overall.ci_low:.3f}, {overall.ci_high:.3f}] " \
           f"chance={overall.chance:.3f} n=12 (headway_retrieval)" in printed


def test_the_printed_lm_eval_command_gives_headways_group_scores(tmp_path, capsys):
    """`headway data prompts` prints an lm-eval command; run as printed (lm-eval's `dummy` model, which picks at
    random, in place of MODEL), lm-eval's group scores equal headway's aggregation of the same picks."""
    pytest.importorskip("lm_eval", reason="lm-eval is a test extra (pip install 'lm-eval[hf]')")
    assert main(["data", "prompts", "--formulations", "F1,F5", "--max-hops", "2", "--questions", "3",
                 "--out", str(tmp_path / "prompts")]) == 0
    hint = capsys.readouterr().err.strip().splitlines()[-1]
    assert hint.startswith("lm-eval run --model hf --model_args pretrained=MODEL --include_path ")
    argv = shlex.split(hint.replace("--model hf --model_args pretrained=MODEL", "--model dummy"))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TQDM_DISABLE": "1",
           "HF_DATASETS_CACHE": str(tmp_path / "datasets-cache")}
    done = subprocess.run([sys.executable, "-m", "lm_eval", *argv[1:], "--output_path", str(tmp_path / "lm-eval"),
                           "--log_samples", "--seed", "0"], env=env, cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    results = json.loads(next((tmp_path / "lm-eval").rglob("results_*.json")).read_text())["results"]
    samples = [json.loads(line) for path in (tmp_path / "lm-eval").rglob("samples_*.jsonl")
               for line in path.read_text().splitlines()]
    picks = pd.DataFrame([{"formulation": s["doc"]["formulation"], "hops": s["doc"]["hops"],
                           "chance": s["doc"]["chance"], "acc": bool(s["acc"]), "acc_norm": bool(s["acc_norm"])}
                          for s in samples])
    assert len(picks) == 12 and picks.acc.any()  # the dummy picks some right: a score of 0 would prove little
    for row in group_scores(picks).itertuples():
        assert results[row.group][f"{row.metric},none"] == pytest.approx(row.accuracy), (row.group, row.metric)


def test_the_documented_python_lines_run_as_written(tmp_path, monkeypatch):
    class Scripted(ScriptedBackend):
        """SmolLM2's stand-in: what HFBackend takes, a scripted model."""

        def __init__(self, model: str, **settings: object) -> None:
            self.model_id = model

    monkeypatch.setattr("headway.llm.hf.HFBackend", Scripted)
    monkeypatch.chdir(tmp_path)
    code = re.search(r"## Python\n\n```python\n(.*?)```", DOCS.read_text(), re.S).group(1)
    scope: dict = {}
    exec(code, scope)  # noqa: S102 - the documentation's own lines
    assert len(scope["result"].per_question) == 2 * 2 * 10 and (tmp_path / "runs" / "llm" / "groups.csv").is_file()
