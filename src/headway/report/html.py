"""Self-contained HTML reports: text, callouts, tables and embedded figures in one offline file."""

from __future__ import annotations

import base64
import re
from html import escape
from pathlib import Path
from typing import Self

import pandas as pd

from headway.files import atomic

_IMAGE_TYPES = {".png": "image/png", ".svg": "image/svg+xml"}
_CALLOUT_KINDS = ("note", "warning", "ok")
_MISSING = "–"
# Words that name a column of rates (shares, probabilities, losses): written with the table's float format even
# when every value is whole (an accuracy of 1 is "1.000", not a count).
RATE_WORDS = frozenset({"accuracy", "acc", "p", "power", "alpha", "α", "fraction", "rate", "share", "loss", "chance",
                        "probability"})

_STYLE = """
body { font-family: -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; line-height: 1.55;
       color: #1f2328; background: #fff; max-width: 1000px; margin: 2rem auto; padding: 0 1.25rem;
       overflow-wrap: break-word; }
.wide { overflow-x: auto; max-width: 100%; }
h1 { font-size: 1.9rem; margin-bottom: 0.2rem; }
h2 { font-size: 1.35rem; margin-top: 2.2rem; padding-bottom: 0.2rem; border-bottom: 1px solid #d0d7de; }
.subtitle { color: #57606a; font-size: 1.1rem; margin-top: 0; }
nav.toc { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 0.6rem 1.2rem; }
nav.toc ol { margin: 0.3rem 0; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
code { font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, monospace; font-size: 0.9em;
       background: #eff1f3; padding: 0.1em 0.3em; border-radius: 4px; }
pre { background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 6px; padding: 0.7rem 1rem; overflow-x: auto; }
pre code { background: none; padding: 0; font-size: 0.85rem; }
figure { margin: 1.5rem 0; text-align: center; }
figure img { max-width: 100%; height: auto; }
figcaption, caption { color: #424a53; font-size: 0.95rem; margin: 0.4rem 0; }
table { border-collapse: collapse; margin: 1.2rem auto; font-size: 0.92rem; }
caption { caption-side: top; text-align: left; }
th, td { border: 1px solid #d0d7de; padding: 0.3rem 0.6rem; text-align: left; vertical-align: top; }
th { background: #f0f3f6; }
tbody tr:nth-child(even) { background: #f8f9fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.kv th { width: 14rem; }
.truncated { color: #57606a; font-style: italic; text-align: center; }
.callout { border-left: 5px solid; border-radius: 4px; padding: 0.7rem 1rem; margin: 1.2rem 0; }
.callout.note { background: #ddf4ff; border-color: #0969da; }
.callout.warning { background: #fff1e5; border-color: #bc4c00; }
.callout.ok { background: #dafbe1; border-color: #1a7f37; }
"""


# An inline code span: a run of backticks, then the shortest text up to a run of exactly as many (Markdown's rule).
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)")


def _inline(text: str) -> str:
    """Escape `text` for HTML, then turn `**bold**` and `` `code` `` into tags (the only markup supported). A
    span fenced by N backticks ends at the next run of exactly N, and one space is dropped inside each fence
    when there is one at both ends, so `code_span` can quote any text, backticks included."""
    out, last = [], 0
    for match in _CODE_SPAN.finditer(text):
        out.append(_bold(escape(text[last:match.start()])))
        body = match.group(2)
        if len(body) > 1 and body.startswith(" ") and body.endswith(" "):
            body = body[1:-1]
        out.append(f"<code>{escape(body)}</code>")
        last = match.end()
    out.append(_bold(escape(text[last:])))
    return "".join(out)


def _bold(escaped: str) -> str:
    return re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", escaped)


def code_span(text: str) -> str:
    """`text` as an inline code span that `_inline` shows exactly, whatever backticks or spaces it holds (a model
    id or a reply): fenced by one backtick more than its longest run of them, and padded with a space inside
    each fence where it starts or ends with a backtick or a space."""
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _slug(title: str) -> str:
    """A lower-case, hyphenated anchor name derived from a heading; "section" when nothing is left."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def _format_cell(value: object, float_format: str) -> tuple[str, bool]:
    """Escaped display text for one value and whether it is numeric (right-aligned)."""
    if pd.api.types.is_bool(value):
        return ("yes" if value else "no"), False
    if value is None or (pd.api.types.is_scalar(value) and pd.isna(value)):
        return _MISSING, False
    if pd.api.types.is_float(value):
        return escape(float_format.format(value)), True
    return escape(str(value)), pd.api.types.is_number(value)


def column_format(values: pd.Series, float_format: str) -> str:
    """How a column's floats are written, by what they are: whole numbers (counts, steps; floats only because of a
    missing value or a merge) as integers, unless the column's name says rates (`RATE_WORDS`); settings of at most
    three significant digits (a weight decay 0.005, a learning rate 1e-3) as given, where `float_format` would round
    them to another value; measurements with `float_format`."""
    numbers = pd.to_numeric(values, errors="coerce")
    finite = numbers[numbers.notna() & numbers.map(lambda v: abs(v) != float("inf"))]
    if not pd.api.types.is_float_dtype(values) or finite.empty:
        return float_format
    rates = bool(RATE_WORDS & set(re.split(r"[^a-zα]+", str(values.name).lower())))
    if not rates and (finite == finite.round()).all() and finite.abs().max() < 1e15:
        return "{:.0f}"
    rounded = [float(float_format.format(v)) for v in finite] if _parses(float_format, finite.iloc[0]) else None
    short = all(float(f"{v:.3g}") == v for v in finite)
    if short and rounded is not None and any(r != v for r, v in zip(rounded, finite)):
        return "{:g}"
    return float_format


def _parses(float_format: str, value: float) -> bool:
    """Whether `float_format` writes a plain number (not a percentage or a unit) that reads back as a float."""
    try:
        float(float_format.format(value))
    except ValueError:
        return False
    return True


class Report:
    """An ordered list of blocks rendered into one HTML document that opens offline and renders reproducibly."""

    def __init__(self, title: str, subtitle: str = "") -> None:
        self.title = title
        self.subtitle = subtitle
        self._blocks: list[str] = []
        self._sections: list[tuple[str, str]] = []
        self._figures: list[str] = []
        self._table_count = 0

    @property
    def figure_count(self) -> int:
        """How many figures have been embedded so far."""
        return len(self._figures)

    @property
    def figures(self) -> list[str]:
        """Captions of the embedded figures, in order, so callers can check every figure made it in."""
        return list(self._figures)

    def section(self, title: str, anchor: str | None = None) -> Self:
        """Start a section: an `<h2>` heading that is also listed in the table of contents."""
        taken = {existing for existing, _ in self._sections}
        if anchor is None:
            base = anchor = _slug(title)
            n = 1
            while anchor in taken:
                n += 1
                anchor = f"{base}-{n}"
        elif not anchor or re.search(r"\s", anchor) or anchor in taken:
            raise ValueError(f"section anchor {anchor!r} must be non-empty, without spaces and unique")
        self._sections.append((anchor, title))
        self._blocks.append(f'<h2 id="{escape(anchor)}">{escape(title)}</h2>')
        return self

    def extend(self, other: Report) -> Self:
        """Append every block of `other` (e.g. a body written before its summary was known); its figure
        and table numbers are kept, so `self` should hold no figures or tables of its own."""
        if self._figures or self._table_count:
            raise ValueError("extend() keeps the numbering of the appended report; add figures and tables after it")
        taken = {anchor for anchor, _ in self._sections} & {anchor for anchor, _ in other._sections}
        if taken:
            raise ValueError(f"section anchors {sorted(taken)} appear in both reports")
        self._sections += other._sections
        self._blocks += other._blocks
        self._figures += other._figures
        self._table_count += other._table_count
        return self

    def paragraph(self, text: str) -> Self:
        """A paragraph of escaped text with `**bold**` and `` `code` `` markup."""
        self._blocks.append(f"<p>{_inline(text)}</p>")
        return self

    def bullets(self, items: list[str]) -> Self:
        """An unordered list; each item takes the same inline markup as a paragraph."""
        rows = "".join(f"\n  <li>{_inline(item)}</li>" for item in items)
        self._blocks.append(f"<ul>{rows}\n</ul>")
        return self

    def code_block(self, text: str) -> Self:
        """A preformatted block of escaped text shown verbatim (e.g. a prompt), line breaks and spaces kept."""
        self._blocks.append(f"<pre><code>{escape(text)}</code></pre>")
        return self

    def callout(self, text: str, kind: str = "note") -> Self:
        """A highlighted box: "note", "warning" (e.g. a result that does not reproduce) or "ok"."""
        if kind not in _CALLOUT_KINDS:
            raise ValueError(f"unknown callout kind {kind!r}; allowed kinds: {', '.join(_CALLOUT_KINDS)}")
        self._blocks.append(f'<div class="callout {kind}">{_inline(text)}</div>')
        return self

    def figure(self, path: Path | str, caption: str, alt: str | None = None) -> Self:
        """Embed a PNG or SVG file as a base64 data URI under a numbered caption ("Figure 3. ...")."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"figure file not found: {path}")
        mime = _IMAGE_TYPES.get(path.suffix.lower())
        if mime is None:
            raise ValueError(f"figure {path} must be one of {', '.join(_IMAGE_TYPES)}")
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        self._figures.append(caption)
        self._blocks.append(
            f'<figure>\n  <img src="data:{mime};base64,{data}" alt="{escape(alt if alt is not None else caption)}">\n'
            f"  <figcaption><strong>Figure {self.figure_count}.</strong> {_inline(caption)}</figcaption>\n</figure>"
        )
        return self

    def table(self, df: pd.DataFrame, caption: str, float_format: str = "{:.3f}", max_rows: int = 200) -> Self:
        """A numbered table of `df` (first `max_rows` rows); NaN shows as "–", booleans as yes/no, and each float
        column by its kind (`column_format`): whole numbers as integers, short settings as given, measurements
        with `float_format`. A named index becomes columns; an unnamed one (row numbers) is left out."""
        if max_rows < 1:
            raise ValueError(f"max_rows must be at least 1, got {max_rows}")
        index = df.index
        named = isinstance(index, pd.MultiIndex) or index.name is not None
        df = df.reset_index(drop=not named)  # a named index is a column; a row number (a filtered frame's) is not
        self._table_count += 1
        head = "".join(f"<th>{escape(str(column))}</th>" for column in df.columns)
        lines = [
            '<div class="wide"><table>',
            f"  <caption><strong>Table {self._table_count}.</strong> {_inline(caption)}</caption>",
            f"  <thead><tr>{head}</tr></thead>",
            "  <tbody>",
        ]
        formats = [column_format(df.iloc[:, i], float_format) for i in range(df.shape[1])]
        for row in df.head(max_rows).itertuples(index=False, name=None):
            cells = (_format_cell(value, fmt) for value, fmt in zip(row, formats))
            tds = "".join(f'<td class="num">{text}</td>' if numeric else f"<td>{text}</td>" for text, numeric in cells)
            lines.append(f"    <tr>{tds}</tr>")
        lines += ["  </tbody>", "</table></div>"]
        left_out = len(df) - max_rows
        if left_out > 0:
            lines.append(f'<p class="truncated">Showing the first {max_rows} of {len(df)} rows; '
                         f"{left_out} rows left out.</p>")
        self._blocks.append("\n".join(lines))
        return self

    def key_values(self, pairs: dict[str, object], caption: str | None = None) -> Self:
        """A two-column table of names and values, for settings, hardware and timings."""
        lines = ['<div class="wide"><table class="kv">']
        if caption:
            lines.append(f"  <caption>{_inline(caption)}</caption>")
        lines.append("  <tbody>")
        for key, value in pairs.items():
            text, _ = _format_cell(value, "{:.6g}")
            lines.append(f"    <tr><th>{escape(str(key))}</th><td>{text}</td></tr>")
        lines += ["  </tbody>", "</table></div>"]
        self._blocks.append("\n".join(lines))
        return self

    def render(self) -> str:
        """The complete HTML5 document: no timestamps and no external resources, so equal inputs give equal bytes."""
        parts = [
            "<!DOCTYPE html>",
            '<html lang="en">',
            "<head>",
            '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            f"<title>{escape(self.title)}</title>",
            f"<style>{_STYLE}</style>",
            "</head>",
            "<body>",
            f"<h1>{escape(self.title)}</h1>",
        ]
        if self.subtitle:
            parts.append(f'<p class="subtitle">{_inline(self.subtitle)}</p>')
        if self._sections:
            items = "".join(f'\n  <li><a href="#{escape(anchor)}">{escape(title)}</a></li>'
                            for anchor, title in self._sections)
            parts.append(f'<nav class="toc">\n<strong>Contents</strong>\n<ol>{items}\n</ol>\n</nav>')
        parts += self._blocks
        parts += ["</body>", "</html>", ""]
        return "\n".join(parts)

    def write(self, path: Path | str) -> Path:
        """Write the rendered report atomically (`headway.files.atomic`), creating parent folders; return the path."""
        path = Path(path)
        with atomic(path) as tmp:
            tmp.write_text(self.render(), encoding="utf-8", newline="\n")
        return path
