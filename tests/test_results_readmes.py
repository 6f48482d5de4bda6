"""Every committed results README is rendered from its template and the data files beside it
(scripts/results_readme.py), so none quotes a number its summary.json or CSVs do not hold."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import results_readme  # noqa: E402

FOLDERS = sorted(p for p in results_readme.RESULTS.iterdir() if p.is_dir())


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_the_readme_is_its_template_rendered_from_its_own_data(folder: Path) -> None:
    assert (folder / results_readme.TEMPLATE).is_file(), f"{folder.name} has no {results_readme.TEMPLATE}"
    assert (folder / "README.md").read_text() == results_readme.render(folder), (
        f"{folder.name}/README.md differs from its template rendered: run scripts/results_readme.py")


def test_a_placeholder_that_names_nothing_is_an_error(tmp_path: Path) -> None:
    folder = tmp_path / "study"
    folder.mkdir()
    (folder / "summary.json").write_text('{"seconds": {"training_s": 12.3}, "runs": [{"seed": 0, "acc": 0.9}, '
                                         '{"seed": 1, "acc": 0.7}]}')
    (folder / results_readme.TEMPLATE).write_text("{{ seconds.training_s | .0f }} s; best {{ max runs.acc | .2f }}; "
                                                  "seed 1 {{ runs[seed=1].acc }}; {{ runs[seed^=1].acc }}")
    assert results_readme.render(folder).endswith("12 s; best 0.90; seed 1 0.7; 0.7")
    for bad, message in [("{{ seconds.testing_s }}", "no 'testing_s'"), ("{{ runs.acc }}", "2 values"),
                         ("{{ runs[seed=5].acc }}", "nothing matches"), ("{{ median runs.acc }}", "unknown aggregate")]:
        (folder / results_readme.TEMPLATE).write_text(bad)
        with pytest.raises(results_readme.TemplateError, match=message):
            results_readme.render(folder)
