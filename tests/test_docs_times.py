"""Every time estimate in README.md and docs/*.md is the one docs/times.toml gives (scripts/docs_times.py): marked
spans and shell-block comments agree with the table, every row is used, no estimate beside a command is left
unmarked, and every shown `--dry-run` of a study is what it prints now (its projected times)."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import docs_times  # noqa: E402

TABLE = {"make-demo": {"command": "make demo", "seconds": 259, "machine": "2 cores", "measured": "a fresh clone"},
         "study-x-cpu": {"command": "headway study x --scale cpu", "seconds": [240, 390], "machine": "2 shared cores",
                         "measured": "results/x"},
         "suite": {"what": "a long thing", "seconds": 7300, "machine": "2 cores", "measured": "once"},
         "probe": {"what": "a short thing", "seconds": 42, "machine": "one H200", "measured": "a lease"}}
TEXTS = {key: docs_times.render(row) for key, row in TABLE.items()}


def test_every_time_in_the_docs_agrees_with_the_table() -> None:
    found = docs_times.problems()
    assert not found, "run scripts/docs_times.py (after updating docs/times.toml):\n" + "\n".join(found)


def test_every_shown_dry_run_of_a_study_is_what_it_prints_now() -> None:
    found = docs_times.stale_transcripts()
    assert not found, "copy what the command prints now into the page:\n" + "\n".join(found)


def test_every_row_says_how_it_was_measured_or_what_projects_it() -> None:
    for key, row in docs_times.load().items():
        assert row.get("measured") and row.get("machine"), key
        assert ("seconds" in row) != ("projection" in row), f"{key}: give seconds or a projection, not both"
        assert ("command" in row) != ("what" in row), f"{key}: a command or a what"
        assert ("projection" in row) == ("(projected)" in row["machine"]), f"{key}: say a projection is one"


def test_a_row_renders_as_about_n_of_its_unit_on_its_machine() -> None:
    assert TEXTS == {"make-demo": "about 4.3 min on 2 cores", "study-x-cpu": "about 4–6.5 min on 2 shared cores",
                     "suite": "about 2 h on 2 cores", "probe": "about 42 s on one H200"}
    assert docs_times.render({"seconds": 2699, "machine": "m"}) == "about 45 min on m"  # halves round up


def page(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "page.md"
    path.write_text(text)
    return path


def test_a_marked_span_or_a_shell_comment_that_disagrees_is_reported_and_rewritten(tmp_path: Path) -> None:
    text = ("```\nmake demo   # the demo: about 1.5 min on 2 cores\nheadway study x --scale cpu --out o   # about 3 min "
            "on 2 shared cores; more\n```\n\nThe suite takes <!-- time:suite -->an hour<!-- /time --> and the probe "
            "<!-- time:probe -->about 42 s on one H200<!-- /time -->.\n")
    found, used = docs_times.check_page(page(tmp_path, text), TABLE, TEXTS)
    assert used == set(TABLE)
    assert [line.split(": ", 1)[1].split(":")[0] for line in found] == ["make-demo", "study-x-cpu", "time"]
    fixed = docs_times.rewrite(text, TABLE, TEXTS)
    assert "make demo   # the demo: about 4.3 min on 2 cores\n" in fixed
    assert "# about 4–6.5 min on 2 shared cores; more" in fixed and "<!-- time:suite -->about 2 h on 2 cores<" in fixed
    assert docs_times.check_page(page(tmp_path, fixed), TABLE, TEXTS) == ([], set(TABLE))


@pytest.mark.parametrize("text, problem", [
    ("`make test` runs the suite in about 20 minutes.\n", "unmarked estimate ('about 20 minutes')"),
    ("`headway study x --scale gpu` and `headway study y --scale gpu` take about 73 and 45\nminutes.\n",
     "unmarked estimate ('about 73 and 45\nminutes')".replace("\n", " ")),
    ("| `make demo` | 20–35 min |\n", "unmarked estimate ('20–35 min')"),
    ("| `--scale` | `cpu` (< 20 min on 2 cores) |\n", "unmarked estimate ('< 20 min')"),
    ("```\nheadway study y --scale cpu --out o   # 9 min on 2 cores\n```\n", "a time for a command the table lacks"),
    ("```\nmake demo   # about 4.3 min on 2 cores, about 5 min warm\n```\n", "a second time in the comment"),
    ("It takes <!-- time:nothing -->about 1 min on 2 cores<!-- /time -->.\n", "time:nothing is not a row"),
])
def test_an_estimate_outside_the_table_is_reported(tmp_path: Path, text: str, problem: str) -> None:
    found, _ = docs_times.check_page(page(tmp_path, text), TABLE, TEXTS)
    assert len(found) == 1 and problem in found[0], found


@pytest.mark.parametrize("text", [
    "The first version ran `headway study retrieval --scale cpu` in 12 min 57 s against 12 min 31 s before.\n",
    "`make demo` prints `600/1500 steps (40%), 1 min 2 s elapsed, about 1 min 33 s left` on a pipe.\n",
    "`make demo` 104 s, then `make test` 1181 s, from a fresh clone.\n",
    "Loading the model takes about 30 s on 2 cores.\n",
])
def test_a_record_or_an_estimate_beside_no_command_is_left_alone(tmp_path: Path, text: str) -> None:
    assert docs_times.check_page(page(tmp_path, text), TABLE, TEXTS) == ([], set())


def test_a_row_no_page_states_is_reported(tmp_path: Path) -> None:
    stated = page(tmp_path, "```\nmake demo   # about 4.3 min on 2 cores\n```\n")
    assert docs_times.problems([stated], {"make-demo": TABLE["make-demo"], "probe": TABLE["probe"]}) == [
        "times.toml: probe is stated by no page"]
