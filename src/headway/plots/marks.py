"""What the retrieval accuracy figures (depth law, phase diagram, order × supervision contrast) share, so
that each reads without its caption: the formulation named in words, the marks of each mechanism, and
how untrained cells, unreachable cells and the root-guess level 1/K are drawn and named."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable, Mapping
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.colorbar import Colorbar
from matplotlib.figure import Figure
from matplotlib.patches import Patch, Rectangle

from headway.files import atomic

# The settings that make a formulation, in the order a title names them; a table may lack any of them
# (mask_unreachable is newer than some results).
SETTING_COLUMNS = ("attention", "order", "supervision", "layout")
FORMULATION_COLUMNS = (*SETTING_COLUMNS, "mask_unreachable")
# Words, not letters, for each mechanism class: "2L" read as two layers on an axis of layers L.
MECHANISM_MARKS = {"linear": "lin", "compositional": "comp", "not classifiable": "?"}
MECHANISM_MEANINGS = {"linear": "linear (one hop per layer)",
                      "compositional": "compositional (links compose, and the answer needs it)",
                      "not classifiable": "not classifiable (the evidence cannot decide)"}
NOT_TRAINED = "not trained"
UNREACHABLE = "unreachable at this depth"
ROOT_GUESS = "guess a root (1/K)"
NOT_TRAINED_COLOUR = "0.86"  # light grey: no viridis accuracy is this pale, so it cannot read as a score
UNREACHABLE_HATCH = "///"
_PLAIN_TICKS = (0.0, 0.5, 1.0)
_TICK_GAP = 0.15  # a plain colour-bar tick this close to a named one is dropped, so labels do not collide


def formulation_words(column: str, value: object, contrasted: bool = False) -> str:
    """One formulation setting in words ('causal attention', 'chain order'); unmasked targets, the task's
    default, are named only where they are `contrasted` with masked ones, and left out ('') elsewhere."""
    if column == "mask_unreachable":
        return "unreachable targets masked" if bool(value) else "all targets kept" if contrasted else ""
    return f"{value} {column}"


def describe_formulation(settings: Mapping[str, object], columns: Iterable[str] = FORMULATION_COLUMNS,
                         contrasted: bool = False) -> str:
    """The formulation of `settings` (a dict or a table row) in words, e.g. 'causal attention, chain order,
    dense supervision, packed layout'; a column `settings` lacks is left out (mask_unreachable reads as off);
    `contrasted`: the settings tell panels or lines apart, so an unmasked one is named too."""
    words = [formulation_words(column, settings[column], contrasted) for column in columns if column in settings]
    return ", ".join(word for word in words if word)


def split_formulation(table: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The formulation columns of `table` that hold one value (named once, in the figure's title) and those
    that vary (named per panel or per line)."""
    present = [c for c in FORMULATION_COLUMNS if c in table.columns]
    return [c for c in present if table[c].nunique() == 1], [c for c in present if table[c].nunique() > 1]


def mechanism_counts(counts: Mapping[str, int], runs: int) -> str:
    """How many of a cell's `runs` each mechanism took, e.g. 'comp 2/2'; '' when none was classified."""
    return " ".join(f"{MECHANISM_MARKS[kind]} {n}/{runs}" for kind, n in counts.items() if n)


def mechanism_key() -> list[str]:
    """Legend lines saying what each mechanism mark means."""
    return [f"{mark} n/N: {MECHANISM_MEANINGS[kind]} in n of the cell's N runs"
            for kind, mark in MECHANISM_MARKS.items()]


def not_trained_handle() -> Patch:
    """Legend entry of the cells (or panels) no run was trained in, drawn in `NOT_TRAINED_COLOUR`."""
    return Patch(facecolor=NOT_TRAINED_COLOUR, edgecolor="0.6", label=NOT_TRAINED)


def unreachable_handle(why: str) -> Patch:
    """Legend entry of the hatched cells the information flow cannot bring the answer to; `why` says the rule."""
    return Patch(facecolor="white", edgecolor="grey", hatch=UNREACHABLE_HATCH, label=f"{UNREACHABLE} ({why})")


def hatch_cell(ax: Axes, column: float, row: float) -> None:
    """Hatch the heat-map cell centred at (`column`, `row`) as unreachable."""
    ax.add_patch(Rectangle((column - 0.5, row - 0.5), 1, 1, fill=False, hatch=UNREACHABLE_HATCH,
                           edgecolor="grey", lw=0))


def mark_root_guess(colorbar: Colorbar, root_guess: float, threshold: float | None = None) -> None:
    """Name the root-guess level 1/K (and the solved `threshold`) on an accuracy colour bar and draw a line
    across it at 1/K: an accuracy there is a guessed chain root, no retrieval, not partial success."""
    named = {root_guess: f"{root_guess:.2f}  {ROOT_GUESS}"}
    if threshold is not None:
        named[threshold] = f"{threshold:g}  solved"
    plain = {t: f"{t:g}" for t in _PLAIN_TICKS if all(abs(t - n) >= _TICK_GAP for n in named)}
    ticks = dict(sorted({**plain, **named}.items()))
    colorbar.set_ticks(list(ticks), labels=list(ticks.values()))
    colorbar.ax.axhline(root_guess, color="white", lw=3.0)
    colorbar.ax.axhline(root_guess, color="black", lw=0.8, ls="--")


def title_lines(text: str, figure: Figure, fontsize: float) -> str:
    """`text` wrapped to the width of `figure`, so a long title breaks into lines instead of running past
    the panels (about 0.55 em a character)."""
    width = max(20, int(figure.get_figwidth() * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.fill(line, width) for line in text.split("\n"))


def save_figure(figure: Figure, path: Path | str, dpi: int = 150, tight: bool = True) -> Path:
    """Save `figure` to `path` (parents created; written atomically, never over a device or FIFO:
    `headway.files.atomic`) in the format its suffix names, and return the path; `tight` crops the margins."""
    path = Path(path)
    with atomic(path) as tmp:
        figure.savefig(tmp, format=path.suffix.lstrip(".") or "png", dpi=dpi,
                       bbox_inches="tight" if tight else None)
    return path
