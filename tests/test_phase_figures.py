"""The retrieval accuracy figures read alone: titles name the formulation, mechanism marks are words,
untrained and unreachable cells and the root-guess level 1/K are in the key, and no title overlaps another."""

from __future__ import annotations

import re
from itertools import combinations

import numpy as np
import pandas as pd
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from headway.errors import ConfigError
from headway.plots.depth import depth_figure
from headway.plots.marks import NOT_TRAINED, ROOT_GUESS, UNREACHABLE
from headway.plots.phase import contrast_figure, learning_curves_figure, phase_figure
from headway.studies.retrieval.figures import contrast_figure as study_contrast_figure
from headway.studies.retrieval.phase import phase_table

SETTING = {"attention": "causal", "layout": "packed"}


def phase_rows(**extra) -> pd.DataFrame:
    """Two formulations over layers 1–2 × D 1–3: chain/dense lacks L1/D3 (not trained), L1/D2 and L1/D3 are
    unreachable, L2/D3 was solved by composition in both seeds, one L2/D2 run is not classifiable."""
    rows = []
    for order, supervision in (("chain", "dense"), ("shuffled", "query")):
        for layers in (1, 2):
            for hops in (1, 2, 3):
                if (order, layers, hops) == ("chain", 1, 3):
                    continue
                composed = order == "chain" and (layers, hops) == (2, 3)
                unknown = order == "shuffled" and (layers, hops) == (2, 2)
                reachable = 1.0 if hops <= layers or layers == 2 else 0.0
                accuracy = 1.0 if hops <= layers or composed else 0.26
                rows.append({**SETTING, "order": order, "supervision": supervision, "layers": layers, "hops": hops,
                             "accuracy": accuracy, "seeds": 2, "compositional": 2 * composed,
                             "linear": 2 * (hops <= layers) - unknown, "not_classifiable": int(unknown),
                             "reachable": reachable, "solvable": reachable == 1.0, "chance_roots": 0.25,
                             "beyond_linear": hops > layers, **extra})
    return pd.DataFrame(rows)


def results_rows() -> pd.DataFrame:
    """Per-run results of the order × supervision grid at two layers, D 1–4, chain/query not trained."""
    rows = []
    for order, supervision in (("chain", "dense"), ("shuffled", "dense"), ("shuffled", "query")):
        for hops in (1, 2, 3, 4):
            for seed in (0, 1):
                composed = order == "chain" and hops == 3
                solved = hops <= 2 or composed
                rows.append({**SETTING, "order": order, "supervision": supervision, "layers": 2, "hops": hops,
                             "seed": seed, "val_accuracy": 1.0 if solved else 0.3,
                             "mechanism": "compositional" if composed else "linear" if solved else "unsolved"})
    return pd.DataFrame(rows)


def drawn(fig: Figure) -> Figure:
    """`fig` laid out and drawn, so text positions are final."""
    FigureCanvasAgg(fig).draw()
    return fig


def legend_texts(fig: Figure) -> list[str]:
    return [text.get_text() for legend in fig.legends for text in legend.get_texts()]


def titles(fig: Figure) -> str:
    return " | ".join([fig.get_suptitle(), *(ax.get_title() for ax in fig.axes)])


def colourbar_ticks(fig: Figure) -> dict[float, str]:
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    return {round(float(t), 3): label.get_text() for t, label in zip(bar.get_yticks(), bar.get_yticklabels())}


def lines_at(ax, level: float) -> list:
    return [line for line in ax.get_lines() if np.allclose(line.get_ydata(), level)]


def assert_titles_apart(fig: Figure) -> None:
    """No two of the suptitle, the panel titles and the legends share a pixel once drawn."""
    renderer = fig.canvas.get_renderer()
    boxes = [fig._suptitle.get_window_extent(renderer)]
    boxes += [ax.title.get_window_extent(renderer) for ax in fig.axes if ax.get_title()]
    boxes += [legend.get_window_extent(renderer) for legend in fig.legends]
    for first, second in combinations(boxes, 2):
        assert not first.overlaps(second), (first, second)


def test_phase_diagram_marks_mechanisms_with_words_and_names_the_formulation():
    fig = drawn(phase_figure(phase_rows(), threshold=0.9))
    cells = [text.get_text() for ax in fig.axes for text in ax.texts]
    assert any("comp 2/2" in cell for cell in cells) and any("? 1/2" in cell for cell in cells)
    assert not any(re.search(r"\d[LC]\b", cell) for cell in cells)  # "2L" read as two layers
    assert "causal attention" in fig.get_suptitle() and "packed layout" in fig.get_suptitle()
    assert {ax.get_title() for ax in fig.axes if ax.get_title()} == {"chain order, dense supervision",
                                                                      "shuffled order, query supervision"}
    assert "masked" not in titles(fig)
    key = legend_texts(fig)
    assert NOT_TRAINED in key and any(text.startswith(UNREACHABLE) for text in key)
    assert {text.split(" n/N")[0] for text in key if " n/N" in text} == {"lin", "comp", "?"}
    assert_titles_apart(fig)


def test_phase_diagram_marks_the_root_guess_on_its_colour_bar():
    fig = drawn(phase_figure(phase_rows(), threshold=0.9))
    ticks = colourbar_ticks(fig)
    assert ROOT_GUESS in ticks[0.25] and "solved" in ticks[0.9]
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    assert lines_at(bar, 0.25)


def test_one_formulation_is_named_once_in_the_title_and_masking_only_when_on():
    one = phase_rows(mask_unreachable=True)
    fig = drawn(phase_figure(one[one.order == "chain"], threshold=0.9))
    assert all(words in fig.get_suptitle() for words in ("causal attention", "chain order", "dense supervision",
                                                         "unreachable targets masked"))
    assert not any(ax.get_title() for ax in fig.axes)
    assert_titles_apart(fig)
    plain = phase_rows(mask_unreachable=False)
    assert "masked" not in titles(drawn(phase_figure(plain[plain.order == "chain"], threshold=0.9)))


def test_depth_figure_names_its_formulation_and_keys_hatched_and_grey_cells():
    rows = phase_rows()
    table = rows[rows.order == "chain"].assign(
        part="plain", curriculum="ic", accuracy_min=lambda t: t.accuracy, accuracy_max=lambda t: t.accuracy,
        chance_vocab=1 / 16, bound=lambda t: np.where(t.hops == 1, 1, 2))
    fig = drawn(depth_figure(table, "Depth law: plain task, ic curriculum"))
    assert all(words in fig.get_suptitle() for words in ("causal attention", "chain order", "dense supervision"))
    key = legend_texts(fig)
    assert NOT_TRAINED in key and any(text.startswith(UNREACHABLE) for text in key)
    assert ROOT_GUESS in colourbar_ticks(fig)[0.25]
    assert_titles_apart(fig)


def test_learning_curves_name_the_formulation_and_draw_the_root_guess():
    cells = phase_rows().query("beyond_linear and solvable")
    metrics = pd.DataFrame([{**SETTING, "order": "chain", "supervision": "dense", "layers": 2, "hops": 3,
                             "run_id": f"s{seed}", "step": step, "val_accuracy": step / 100}
                            for seed in (0, 1) for step in (0, 50, 100)])
    fig = drawn(learning_curves_figure(metrics, cells, threshold=0.9))
    assert "causal attention" in fig.get_suptitle()
    key = legend_texts(fig)
    assert "chain order, dense supervision" in key and any(text.startswith(ROOT_GUESS) for text in key)
    assert lines_at(fig.axes[0], 0.25)
    assert_titles_apart(fig)


def test_contrast_draws_each_order_and_supervision_with_an_untrained_panel():
    fig = drawn(contrast_figure(results_rows(), layers=2, hops=3, threshold=0.9, root_guess=0.25))
    panels = [ax for ax in fig.axes if ax.get_title()]
    assert len(panels) == 4
    assert "D = 3: mean 1.00, comp 2/2" in panels[0].get_title()
    assert "chain order, query supervision" in panels[1].get_title() and NOT_TRAINED in panels[1].get_title()
    assert "no run solved" in panels[2].get_title()
    assert all(lines_at(ax, 0.25) for ax in panels if ax is not panels[1])
    assert "causal attention" in fig.get_suptitle() and "2 layers" in fig.get_suptitle()
    key = legend_texts(fig)
    assert NOT_TRAINED in key and any(text.startswith(ROOT_GUESS) for text in key)
    assert any(text.startswith(UNREACHABLE) for text in key)  # two causal layers cannot reach D = 4 in chain order
    assert_titles_apart(fig)


def test_contrast_refuses_runs_that_differ_in_another_setting():
    runs = results_rows().assign(mask_unreachable=lambda t: t.seed == 1)
    with pytest.raises(ConfigError, match="mask_unreachable"):
        contrast_figure(runs, layers=2, hops=3, threshold=0.9, root_guess=0.25)


def test_the_study_draws_the_contrast_only_where_order_or_supervision_varies(tmp_path):
    runs = results_rows().assign(part="plain", curriculum="ic", run_id=lambda t: [f"r{i}" for i in t.index])
    classes = runs[["run_id", "mechanism"]]
    final = runs.drop(columns="mechanism")
    phase = phase_rows()
    path, cell = study_contrast_figure(final, classes, phase, tmp_path, 0.9)
    assert path.is_file() and (cell.layers, cell.hops) == (2, 3)
    one = final[(final.order == "chain") & (final.supervision == "dense")]
    assert study_contrast_figure(one, classes, phase, tmp_path, 0.9) is None


def test_phase_table_counts_unclassifiable_runs_and_keeps_masking_apart():
    runs = []
    for mask in (False, True):
        for seed, mechanism in enumerate(("linear", "not classifiable")):
            runs.append({**SETTING, "order": "chain", "supervision": "dense", "mask_unreachable": mask,
                         "part": "plain", "curriculum": "ic", "hops": 2, "layers": 2, "seed": seed, "chains": 4,
                         "step": 100, "val_accuracy": 1.0, "solved": True, "run_id": f"m{mask}s{seed}",
                         "mechanism": mechanism})
    final = pd.DataFrame(runs)
    metrics = final[["run_id", "step", "val_accuracy"]]
    table = phase_table(final.drop(columns="mechanism"), metrics, final[["run_id", "mechanism"]], 0.9)
    assert len(table) == 2 and set(table.mask_unreachable) == {False, True}
    assert (table.not_classifiable == 1).all() and (table.linear == 1).all()
