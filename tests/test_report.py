"""The HTML report builder: embedded figures, escaping, offline-only content and byte-for-byte reproducibility."""

from __future__ import annotations

import base64
import re
from html import escape

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from headway.report.html import Report, _inline, code_span

PNG_SRC = '<img src="data:image/png;base64,'


def tiny_png(path, colour):
    """Write a 20×20-pixel line plot to `path` and return its bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(1, 1), dpi=20)
    ax.plot([0, 1], [1, 0], color=colour)
    fig.savefig(path)
    plt.close(fig)
    return path.read_bytes()


def build(tmp_path):
    """A report touching every block kind, with two figures and HTML-hostile text."""
    first, second = tmp_path / "a.png", tmp_path / "b.png"
    if not first.exists():
        tiny_png(first, "red")
        tiny_png(second, "blue")
    table = pd.DataFrame({
        "name": ["<b>x</b>", "a & b"],
        "acc": [0.123456, np.nan],
        "solved": [True, False],
        "steps": [100, 200],
    })
    return (
        Report("Depth <study>", subtitle="retrieval & hops")
        .section("Setup")
        .paragraph("We train **tiny** models with `lr < 1e-3` & <script>alert(1)</script>.")
        .key_values({"hardware": "cpu", "wall time (s)": 12.5, "seeds": 3}, caption="Run settings")
        .section("Results")
        .figure(first, "Accuracy <by depth>")
        .figure(second, "Loss curves", alt="two curves")
        .table(table, "Per-run <summary>")
        .callout("Does not reproduce at this scale: accuracy stays at chance.", kind="warning")
        .bullets(["first **point**", "second `code`"])
        .section("Results")
    )


def test_figures_are_embedded_byte_for_byte(tmp_path):
    report = build(tmp_path)
    html = report.write(tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    assert html.count(PNG_SRC) == 2
    assert report.figure_count == 2
    assert report.figures == ["Accuracy <by depth>", "Loss curves"]
    payloads = re.findall(r'data:image/png;base64,([A-Za-z0-9+/=]+)"', html)
    assert [base64.b64decode(p) for p in payloads] == [(tmp_path / "a.png").read_bytes(),
                                                        (tmp_path / "b.png").read_bytes()]
    assert "Figure 1.</strong> Accuracy &lt;by depth&gt;" in html
    assert "Figure 2.</strong> Loss curves" in html
    assert not (tmp_path / "out" / "report.html.tmp").exists()


def test_svg_figure_uses_svg_mime(tmp_path):
    svg = tmp_path / "f.svg"
    svg.write_text('<svg xmlns="http://www.w3.org/2000/svg" width="1" height="1"/>')
    html = Report("t").figure(svg, "vector").render()
    assert 'src="data:image/svg+xml;base64,' in html


def test_offline_and_escaped(tmp_path):
    html = build(tmp_path).render()
    for forbidden in ("http://", "https://", "<script", "<link", "@import", "url("):
        assert forbidden not in html
    assert '<meta charset="utf-8">' in html
    assert html.startswith("<!DOCTYPE html>")
    assert "<title>Depth &lt;study&gt;</title>" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "<strong>tiny</strong>" in html
    assert "<code>lr &lt; 1e-3</code>" in html
    assert "<li>first <strong>point</strong></li>" in html
    assert "<td>&lt;b&gt;x&lt;/b&gt;</td>" in html
    assert "<td>a &amp; b</td>" in html


def test_table_formats_cells(tmp_path):
    html = build(tmp_path).render()
    assert "Table 1.</strong> Per-run &lt;summary&gt;" in html
    assert ">0.123<" in html
    assert ">–<" in html
    assert ">yes<" in html and ">no<" in html
    assert ">100<" in html
    assert '<div class="callout warning">Does not reproduce at this scale' in html
    assert "<th>wall time (s)</th><td>12.5</td>" in html


def test_long_table_is_truncated():
    df = pd.DataFrame({"x": range(10)})
    html = Report("t").table(df, "ten", max_rows=3).render()
    assert html.count("<tr><td") == 3
    assert "7 rows left out" in html


def test_toc_links_every_section(tmp_path):
    html = build(tmp_path).render()
    anchors = re.findall(r'<h2 id="([^"]+)">', html)
    assert anchors == ["setup", "results", "results-2"]
    toc = html.split('<nav class="toc">')[1].split("</nav>")[0]
    assert re.findall(r'href="#([^"]+)"', toc) == anchors


def test_explicit_anchor_must_be_unique():
    report = Report("t").section("A", anchor="a")
    with pytest.raises(ValueError, match="'a'"):
        report.section("B", anchor="a")


def test_identical_inputs_render_identical_bytes(tmp_path):
    one = build(tmp_path).write(tmp_path / "one.html").read_bytes()
    two = build(tmp_path).write(tmp_path / "two.html").read_bytes()
    assert one == two


def test_missing_figure_raises(tmp_path):
    missing = tmp_path / "nope.png"
    with pytest.raises(FileNotFoundError, match="nope.png"):
        Report("t").figure(missing, "gone")


def test_unknown_callout_kind_raises():
    with pytest.raises(ValueError, match="'danger'.*note, warning, ok"):
        Report("t").callout("hm", kind="danger")


def test_wide_tables_scroll_inside_the_page_instead_of_widening_it():
    df = pd.DataFrame({f"a_long_column_name_{i}": [1.0] for i in range(40)})
    html = Report("t").table(df, "forty columns").key_values({"path": "x" * 300}).render()
    assert html.count('<div class="wide"><table') == 2 and html.count("</table></div>") == 2
    assert ".wide { overflow-x: auto; max-width: 100%; }" in html


@settings(derandomize=True, max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("`` a*<>&\"'b"), min_size=1, max_size=12))
def test_a_code_span_shows_any_text_exactly(text):
    """Model ids and replies go into the report as code spans: whatever backticks, spaces, stars or markup they
    hold, the span renders as exactly that text in one closed <code> element."""
    assert _inline(f"model {code_span(text)} · backend `hf`") == (
        f"model <code>{escape(text)}</code> · backend <code>hf</code>")


def cells(html: str) -> list[list[str]]:
    """The text of every body row's cells."""
    return [re.findall(r"<td[^>]*>(.*?)</td>", row) for row in re.findall(r"<tr>(<td.*?)</tr>", html)]


def test_numbers_are_written_by_kind_and_row_numbers_left_out():
    """Counts and steps as integers (floats only because of a missing value), settings as given, rates and
    measurements with the table's format; a filtered frame's row numbers are no column, a named index is."""
    frame = pd.DataFrame({"steps": [1650.0, 1550.0, np.nan], "weight_decay": [0.005, 0.0, 0.1],
                          "val_accuracy": [1.0, 1.0, 0.5], "llc": [3.14159, 12.5, 0.25]}, index=[4, 7, 9])
    html = Report("t").table(frame, "c", float_format="{:.2f}").render()
    assert "<th>index</th>" not in html and "<th>steps</th><th>weight_decay</th>" in html
    assert cells(html) == [["1650", "0.005", "1.00", "3.14"], ["1550", "0", "1.00", "12.50"],
                           ["–", "0.1", "0.50", "0.25"]]
    named = Report("t").table(frame.rename_axis("run"), "c").render()
    assert "<th>run</th>" in named and cells(named)[0][0] == "4"


def test_repeated_diagnostics_are_said_once_with_their_ranges():
    from headway.report.messages import said_once

    said = said_once([f"instance 0: mean MALA acceptance {a} < 0.9: lower lr" for a in ("0.305", "0.209", "0.242")]
                     + ["chains disagree", "instance 0: mean MALA acceptance 0.5 < 0.9: lower lr"])
    assert said == ["instance 0: mean MALA acceptance 0.209–0.5 < 0.9: lower lr (4 times)", "chains disagree"]


def test_an_output_json_is_standard_json(tmp_path):
    """A study's summary.json is for other tools too: no NaN or Infinity, which JSON does not have."""
    import json
    import math

    from headway.runs import layout

    layout.write_json(tmp_path / "summary.json", {"p": math.nan, "runs": [1.0, math.inf], "nested": {"x": -math.inf}},
                      checked=False)
    text = (tmp_path / "summary.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    assert json.loads(text) == {"p": None, "runs": [1.0, None], "nested": {"x": None}}
