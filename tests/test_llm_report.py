"""The prompted-LLM figure and report: a valid PNG, and an offline report whose verdicts follow the numbers."""

from __future__ import annotations

import json
import shutil
from html import escape

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from headway.cli.main import main
from headway.errors import ConfigError
from headway.llm.backend import Backend
from headway.llm.evaluate import group_scores, summarise
from headway.llm.report import chance_tests, verdict, write_report
from headway.llm.run import BackendSettings, run_llm_eval
from headway.plots.llm import accuracy_vs_hops
from headway.runs import layout
from headway.tasks.retrieval.prompts.questions import QuestionSet, make_questions

N = 40
# Correct answers per hop (1..4) for each formulation and metric; exact_match also has unparseable replies.
CORRECT = {
    "F1": {"acc": [36, 28, 16, 10], "acc_norm": [38, 30, 20, 12], "exact_match": [30, 20, 9, 6]},
    "F3": {"acc": [40, 40, 39, 38], "acc_norm": [40, 39, 39, 37], "exact_match": [39, 38, 36, 35]},
    "F5": {"acc": [20, 10, 4, 2], "acc_norm": [22, 12, 5, 2], "exact_match": [15, 8, 3, 1]},
}
RULE = "(one-sided exact binomial test against chance, Holm-corrected over the run's {} at family-wise α = 0.05)"
ABOVE = "above chance " + RULE.format("36 cells")
UNPARSEABLE = {"F1": [1, 2, 3, 4], "F3": [0, 0, 0, 0], "F5": [5, 5, 5, 5]}
META = {"model": "tiny/test-model", "backend": "hf", "scoring": "both", "seed": 0, "questions_per_cell": N,
        "max_hops": 4, "seconds": 83.4, "cache_hits": 5, "cache_misses": 7}


def f5_chance(hops: int) -> float:
    """F5's chance: one of every person but the one asked about (4 chains of hops + 1 people)."""
    return 1 / (4 * (hops + 1) - 1)


def cell_rows(formulation: str, hops: int, n: int, correct: dict[str, int], chance: float,
              unparseable: int = 0) -> list[dict]:
    """`n` per-question rows shaped like `evaluate` output: the first `correct[metric]` are right, the last
    `unparseable` replies could not be parsed; the right option is always index 0."""
    rows = []
    for i in range(n):
        row = {"id": f"{formulation}-h{hops}-{i:04d}", "formulation": formulation, "hops": hops, "chance": chance,
               "answer_index": 0}
        for metric, count in correct.items():
            row[metric], row[f"pred_{metric}"] = i < count, 0 if i < count else 1
        if "exact_match" in correct:
            row["unparseable"] = i >= n - unparseable
            row["pred_exact_match"] = -1 if row["unparseable"] else row["pred_exact_match"]
            row["reply"] = "I am not sure." if row["unparseable"] else "The answer is <b>it</b>."
        rows.append(row)
    return rows


def synthetic_per_question(metrics: tuple[str, ...] = ("acc", "acc_norm", "exact_match")) -> pd.DataFrame:
    """Per-question rows for F1, F3 and F5 over hops 1..4 with the counts above."""
    rows = []
    for formulation, by_metric in CORRECT.items():
        for index, hops in enumerate(range(1, 5)):
            chance = f5_chance(hops) if formulation == "F5" else 0.25
            correct = {metric: by_metric[metric][index] for metric in metrics}
            rows += cell_rows(formulation, hops, N, correct, chance, UNPARSEABLE[formulation][index])
    return pd.DataFrame(rows)


@pytest.fixture(scope="module")
def questions():
    return make_questions(QuestionSet(formulations=("F1", "F5"), max_hops=2, questions=2))


def test_figure_is_a_png_of_reasonable_size(tmp_path):
    results = summarise(synthetic_per_question())
    path = accuracy_vs_hops(results, tmp_path / "sub" / "acc.png", title="synthetic")
    assert path == tmp_path / "sub" / "acc.png"
    with Image.open(path) as image:
        assert image.format == "PNG"
        width, height = image.size
    assert 900 <= width <= 3000 and 300 <= height <= 1200 and width > height


def test_figure_works_with_one_hop_and_one_metric(tmp_path):
    results = summarise(synthetic_per_question())
    single = results[(results.formulation == "F5") & (results.hops == 1) & (results.metric == "acc")]
    with Image.open(accuracy_vs_hops(single, tmp_path / "one.png")) as image:
        assert image.format == "PNG" and min(image.size) > 200


def test_figure_refuses_empty_results(tmp_path):
    with pytest.raises(ConfigError, match="empty"):
        accuracy_vs_hops(summarise(synthetic_per_question()).iloc[:0], tmp_path / "none.png")


def test_report_holds_figure_verdicts_counts_and_examples(tmp_path, questions):
    per_question = synthetic_per_question()
    results = summarise(per_question)
    path = write_report(tmp_path / "out", results, group_scores(per_question), per_question, questions, META)
    assert path == tmp_path / "out" / "report.html"
    assert (tmp_path / "out" / "figures" / "accuracy_vs_hops.png").is_file()
    html = path.read_text(encoding="utf-8")
    assert html.count('<img src="data:image/png;base64,') == 1
    for label in ("F1 assign", "F3 boxes", "F5 relatives"):
        assert label in html
    for key in ("F1", "F3", "F5"):
        for metric in CORRECT[key]:
            assert escape(verdict(results, key, metric)) in html
    # Unparseable replies per formulation: F1 1+2+3+4 = 10, F3 none, F5 4 × 5 = 20 of 160 each.
    assert "F1 assign: 10 of 160 (6.2%); F3 boxes: 0 of 160 (0.0%); F5 relatives: 20 of 160 (12.5%)" in html
    assert 'class="callout warning"' in html
    for key in ("F1", "F5"):
        example = next(q for q in questions if q.formulation == key)
        assert f"<pre><code>{escape(example.prompt)}</code></pre>" in html
        assert f"Correct answer: <strong>{escape(example.answer)}</strong>" in html
        assert example.id in html
    assert "&#x27;s mother is" in html  # F5's prompt, escaped inside the code block
    assert "The answer is &lt;b&gt;it&lt;/b&gt;." in html  # the generated reply is escaped, never markup
    for shown in ("tiny/test-model", "1 min 23 s", "scoring modes", "cache misses", "90.0%", "<th>unparseable</th>"):
        assert shown in html
    assert "<script" not in html and "http://" not in html and "https://" not in html


def test_loglik_only_report_has_no_unparseable_parts(tmp_path, questions):
    per_question = synthetic_per_question(("acc", "acc_norm"))
    results = summarise(per_question)
    html = write_report(tmp_path, results, group_scores(per_question), per_question, questions,
                        {"model": "m"}).read_text(encoding="utf-8")
    assert "Unparseable replies" not in html and "<th>unparseable</th>" not in html
    assert "acc_norm chose" in html and "Its reply" not in html


def test_verdict_reports_decline_and_the_last_hop_above_chance():
    results = summarise(synthetic_per_question())
    assert verdict(results, "F1", "acc") == (
        "F1 assign: acc 0.90 at 1 hop → 0.25 at 4 hops (chance 0.25); "
        f"{ABOVE} up to 2 hops; elsewhere, with 40 questions per cell the test detects a true accuracy of 0.55 "
        "or more with 80% power, so these null results do not rule out a lower one")
    tested = chance_tests(results).query("formulation == 'F1' and metric == 'acc' and hops == 3").iloc[0]
    assert tested.p_chance < 0.05 and not tested.above  # 16 of 40 passes alone, not among 36 cells
    statuses = chance_tests(results).set_index(["formulation", "metric", "hops"]).status
    assert statuses[("F1", "acc", 1)] == "reproduced" and statuses[("F1", "acc", 3)] == "not testable"
    assert statuses[("F3", "acc", 4)] == "reproduced"
    assert (chance_tests(results).above == (statuses == "reproduced").to_numpy()).all()
    assert verdict(results, "F3", "acc") == (
        "F3 boxes: acc 1.00 at 1 hop → 0.95 at 4 hops (chance 0.25); "
        f"{ABOVE} up to 4 hops, the most tested")
    assert verdict(results, "F5", "acc") == (
        "F5 relatives: acc 0.50 at 1 hop → 0.05 at 4 hops (chance 0.14 → 0.05); "
        f"{ABOVE} up to 2 hops; elsewhere, with 40 questions per cell the test detects a true accuracy of 0.27 "
        "at 3 hops, 0.25 at 4 hops or more with 80% power, so these null results do not rule out a lower one")


def test_verdict_at_chance_and_with_gaps():
    at_chance = summarise(pd.DataFrame(cell_rows("F2", 1, 100, {"acc": 26}, 0.25)
                                       + cell_rows("F2", 2, 100, {"acc": 24}, 0.25)))
    assert verdict(at_chance, "F2", "acc") == (
        "F2 code: acc 0.26 at 1 hop → 0.24 at 2 hops (chance 0.25); "
        f"not above chance at any hop count {RULE.format('2 cells')}: smallest uncorrected p = 0.45; "
        "with 100 questions per cell the test detects a true accuracy of 0.39 or more with 80% power, so these "
        "null results do not rule out a lower one")
    # 100 questions detect chance + 0.3 (the stated effect) with power ≥ 0.8: not above chance is a finding here
    assert chance_tests(at_chance).status.tolist() == ["not reproduced", "not reproduced"]
    gaps = summarise(pd.DataFrame([row for hops, count in zip(range(1, 5), (25, 60, 25, 60))
                                   for row in cell_rows("F4", hops, 100, {"acc": count}, 0.25)]))
    assert f"above chance {RULE.format('4 cells')} only at 2, 4 hops; elsewhere, with 100 questions" in verdict(
        gaps, "F4", "acc")
    single = summarise(pd.DataFrame(cell_rows("F1", 3, 50, {"acc": 45}, 0.25)))
    assert verdict(single, "F1", "acc") == (
        "F1 assign: acc 0.90 at 3 hops (chance 0.25); "
        f"above chance {RULE.format('1 cell')} up to 3 hops, the most tested")
    with pytest.raises(ConfigError, match="exact_match"):
        verdict(single, "F1", "exact_match")


class ScriptedBackend(Backend):
    """A model without weights: log-likelihoods from the option's length, replies that name a number or nothing."""

    kind, model_id = "scripted", "scripted/model"

    def loglikelihood(self, requests, progress=None):
        """Shorter options score higher, with ties broken by the first character."""
        return [-len(r.continuation) - ord(r.continuation[1]) / 1000 for r in requests]

    def generate(self, prompts, max_tokens, progress=None):
        """Every other reply is empty (unparseable), the rest name a number."""
        return ["" if i % 2 else f"The answer is {i}." for i in range(len(prompts))]


@pytest.fixture(scope="module")
def evaluated(tmp_path_factory):
    """An llm-eval folder from the scripted backend, both scoring modes, F1 and F5 at 1-2 hops."""
    out = tmp_path_factory.mktemp("llm") / "run"
    run_llm_eval(QuestionSet(formulations=("F1", "F5"), max_hops=2, questions=3, seed=4),
                 BackendSettings(backend="http"), out, scoring="both", max_tokens=4, show_progress=False,
                 backend=ScriptedBackend())
    return out


@pytest.fixture
def folder(evaluated, tmp_path):
    """A fresh copy of the evaluated folder to change."""
    return shutil.copytree(evaluated, tmp_path / "run")


def test_rewrite_report_reproduces_the_tables_and_rewrites_the_report(folder, capsys):
    tables = {name: (folder / name).read_bytes() for name in ("predictions.csv", "results.csv", "groups.csv",
                                                         "summary.json")}
    (folder / "report.html").write_text("stale", encoding="utf-8")
    (folder / "figures" / "accuracy_vs_hops.png").unlink()
    assert main(["llm-eval", "--rewrite-report", "--out", str(folder)]) == 0
    assert {name: (folder / name).read_bytes() for name in tables} == tables
    html = (folder / "report.html").read_text(encoding="utf-8")
    assert "one-sided exact binomial test against chance" in html and "with 80% power" in html
    assert "scripted/model" in html and "Its reply in generate mode" in html
    assert (folder / "figures" / "accuracy_vs_hops.png").is_file()
    captured = capsys.readouterr()
    assert captured.err == ("results.csv, groups.csv, summary.json and report.html rewritten from 12 predictions "
                            "(no model asked); "
                            f"report: {folder / 'report.html'}\n")
    assert "F5 hops=2 exact_match=" in captured.out


def damage(folder, how):
    """Break the folder one way: a file missing, empty, cut short, edited, or from other settings."""
    predictions = folder / "predictions.csv"
    if how == "missing":
        predictions.unlink()
    elif how == "empty":
        predictions.write_text("", encoding="utf-8")
    elif how == "cut short":
        predictions.write_text("".join(predictions.read_text(encoding="utf-8").splitlines(True)[:-1]),
                               encoding="utf-8")
    elif how == "answer edited":
        rows = pd.read_csv(predictions)
        rows.loc[2, "answer_index"] = (rows.loc[2, "answer_index"] + 1) % rows.loc[2, "choices"]
        rows.to_csv(predictions, index=False)
    elif how == "metric edited":
        rows = pd.read_csv(predictions).astype({"acc": object})
        rows.loc[0, "acc"] = "maybe"
        rows.to_csv(predictions, index=False)
    elif how == "column dropped":
        pd.read_csv(predictions).drop(columns="exact_match").to_csv(predictions, index=False)
    elif how == "other seed":
        summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
        summary["meta"]["seed"] = 5
        (folder / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    elif how == "no settings":
        (folder / "summary.json").write_text('{"meta": {"model": "m"}}', encoding="utf-8")
    elif how == "summary not json":
        (folder / "summary.json").write_text("{", encoding="utf-8")


def unchecked(folder):
    """The folder as headway wrote it before its outputs were checksummed: summary.json plain JSON."""
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary.pop(layout.DIGEST_KEY)
    summary.pop("checksums")
    (folder / "summary.json").write_text(json.dumps(summary, indent=2), encoding="utf-8")
    return folder


def rewrite_refused(folder, capsys, *extra):
    """Run `--rewrite-report` on `folder`, assert it is refused with one line and writes nothing; the line."""
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    assert main(["llm-eval", "--rewrite-report", "--out", str(folder), *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("headway: error: ") and err.count("\n") == 1, err
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    return err


@pytest.mark.parametrize(("how", "message"), [
    ("missing", "holds no llm-eval output to rewrite: predictions.csv missing"),
    ("empty", "predictions.csv is damaged (its contents differ from the checksum"),
    ("cut short", "predictions.csv is damaged (its contents differ from the checksum"),
    ("answer edited", "predictions.csv is damaged (its contents differ from the checksum"),
    ("metric edited", "predictions.csv is damaged (its contents differ from the checksum"),
    ("column dropped", "predictions.csv is damaged (its contents differ from the checksum"),
    ("other seed", "summary.json is damaged (its contents differ from its checksum"),
    ("no settings", "summary.json has no checksum: written by a headway from before"),
    ("summary not json", "summary.json is damaged (not valid JSON"),
])
def test_rewrite_report_refuses_a_damaged_folder_in_one_line(folder, capsys, how, message):
    damage(folder, how)
    assert message in rewrite_refused(folder, capsys)


def test_rewrite_report_refuses_a_summary_edited_with_its_checksum_recomputed(folder, capsys):
    summary = layout.read_json(folder / "summary.json")
    summary["meta"]["seed"] = 5
    layout.write_json(folder / "summary.json", summary)
    assert "predictions.csv does not match the questions its summary.json describes (line 2 holds" in \
        rewrite_refused(folder, capsys)


def test_rewrite_report_takes_an_unchecked_folder_only_when_adopted(folder, capsys):
    unchecked(folder)
    assert f"--rewrite-report --adopt-unchecked --out {folder}" in rewrite_refused(folder, capsys)
    assert main(["llm-eval", "--rewrite-report", "--adopt-unchecked", "--out", str(folder)]) == 0
    assert "checksums" in layout.read_json(folder / "summary.json")
    assert main(["llm-eval", "--rewrite-report", "--out", str(folder)]) == 0
    capsys.readouterr()
    assert "is not an unchecked summary to adopt" in rewrite_refused(folder, capsys, "--adopt-unchecked")


@pytest.mark.parametrize(("how", "message"), [
    ("empty", "predictions.csv cannot be read as llm-eval output (EmptyDataError"),
    ("cut short", "predictions.csv does not match the questions its summary.json describes (11 rows for 12"),
    ("answer edited", "predictions.csv does not match the questions its summary.json describes (line 4 holds"),
    ("metric edited", "predictions.csv is damaged: column(s) acc hold values of the wrong kind"),
    ("column dropped", "predictions.csv lacks the column(s) exact_match"),
    ("other seed", "predictions.csv does not match the questions its summary.json describes (line 2 holds"),
    ("no settings", "summary.json does not say which questions were asked: no formulations, max_hops"),
    ("summary not json", "summary.json cannot be read as llm-eval output (JSONDecodeError"),
])
def test_an_adopted_folder_is_still_checked_against_its_questions(folder, capsys, how, message):
    damage(unchecked(folder), how)
    assert message in rewrite_refused(folder, capsys, "--adopt-unchecked")


def test_every_single_bit_flip_of_the_predictions_is_refused(folder, capsys):
    """150 single-bit flips of predictions.csv at seeded offsets: every one is refused (the sweep found 23 of 150
    read as other results before predictions were checksummed)."""
    original = (folder / "predictions.csv").read_bytes()
    rng = np.random.default_rng(11)
    for position, bit in zip(rng.choice(len(original), 150, replace=False), rng.integers(0, 8, 150), strict=True):
        flipped = bytearray(original)
        flipped[position] ^= 1 << int(bit)
        (folder / "predictions.csv").write_bytes(bytes(flipped))
        assert "predictions.csv is damaged" in rewrite_refused(folder, capsys)


def test_rewrite_report_refuses_the_options_it_would_ignore(folder, capsys):
    argv = ["llm-eval", "--rewrite-report", "--out", str(folder), "--max-hops", "3", "--no-progress"]
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"headway: error: --rewrite-report takes every setting from {folder / 'summary.json'}; drop --max-hops, "
        "--progress/--no-progress (try 'headway llm-eval --help')\n")
