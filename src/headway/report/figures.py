"""Figure files of a study's outputs: one folder drawn afresh each time, figures saved into it."""

from __future__ import annotations

from pathlib import Path

from matplotlib.figure import Figure

from headway.plots.marks import save_figure as plots_save_figure

FIGURES = "figures"


def fresh_figures(out: Path) -> Path:
    """`out/figures`, created, with every PNG from an earlier run removed (each is drawn again, and
    none may outlive the section that showed it)."""
    figures = out / FIGURES
    figures.mkdir(parents=True, exist_ok=True)
    for stale in figures.glob("*.png"):
        stale.unlink()
    return figures


def save_figure(fig: Figure, path: Path, dpi: int = 110) -> Path:
    """Write `fig` to `path` as a report's figure (110 dpi, uncropped) and return the path."""
    return plots_save_figure(fig, path, dpi=dpi, tight=False)
