"""docs/notebooks/retrieval_circuit.ipynb, an ARENA-style circuit walk written against TransformerLens, runs unchanged
on TransformerLens 4.x (the exported model) and on headway's single-model view, and every number it keeps agrees."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from conftest import tiny_run

from headway.train.sweep import train_runs

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "docs" / "notebooks" / "retrieval_circuit.ipynb"
sys.path.insert(0, str(ROOT / "scripts"))
from run_notebook import execute, write_outputs  # noqa: E402

pytest.importorskip("transformer_lens", reason="TransformerLens 4.x is a test extra (pip install 'headway[tl]')")
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """The notebook's kind of run, trained briefly: packed links, cross-entropy, no LayerNorm, two hops, two layers."""
    out = tmp_path_factory.mktemp("notebook")
    run = tiny_run(loss="cross_entropy", layernorm=False, hops=2, layers=2, steps=150, lr=3e-3)
    train_runs([run], out, device="cpu", progress=False)
    return out


def test_only_the_loading_cell_knows_the_backend():
    cells = [cell for cell in json.loads(NOTEBOOK.read_text())["cells"] if cell["cell_type"] == "code"]
    knowing = [i for i, cell in enumerate(cells) if "BACKEND" in "".join(cell["source"])]
    assert knowing == [0, 1], "analysis cells must be plain TransformerLens code, the same for both backends"
    assert "parameters" in cells[0]["metadata"]["tags"]


def test_the_notebook_gives_the_same_numbers_on_transformer_lens_and_headway(run_dir):
    lens, _ = execute(NOTEBOOK, {"BACKEND": "transformer_lens", "RUN_DIR": str(run_dir)})
    ours, _ = execute(NOTEBOOK, {"BACKEND": "headway", "RUN_DIR": str(run_dir)})
    assert type(lens["model"]).__name__ == "TransformerBridge" and type(ours["model"]).__name__ == "SingleModel"
    assert lens["results"].keys() == ours["results"].keys() and len(ours["results"]) >= 20
    for name, value in lens["results"].items():
        torch.testing.assert_close(torch.as_tensor(ours["results"][name]).detach().float(),
                                   torch.as_tensor(value).detach().float(), atol=1e-5, rtol=1e-4, msg=name)
    results = ours["results"]
    assert results["lens final equals output"] < 1e-5 and results["dla sums to the difference"] < 1e-5
    assert results["head patching"].abs().max() > 0.01 and results["position patching"].abs().max() > 0.01
    assert results["attribution patching"].abs().max() > 0


def test_stored_outputs_are_what_each_cell_printed(tmp_path):
    copy = tmp_path / "notebook.ipynb"
    copy.write_text(NOTEBOOK.read_text())
    printed = [f"cell {i}\n" if i % 2 else "" for i in range(len(_code_cells(copy)))]
    write_outputs(copy, printed)
    cells = _code_cells(copy)
    assert ["".join(o["text"]) for c in cells for o in c["outputs"]] == [text for text in printed if text]
    assert [c["execution_count"] for c in cells] == list(range(1, len(cells) + 1))


def _code_cells(path: Path) -> list[dict]:
    return [cell for cell in json.loads(path.read_text())["cells"] if cell["cell_type"] == "code"]
