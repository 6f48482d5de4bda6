"""The report's per-model figures: which model shows the circuit, which cell shows emergence, and
the drawing of both (the depth and probe figures need no choice of model)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headway.analysis.emergence import emergence_table
from headway.plots.emergence import plot_emergence, plot_hop_accuracy
from headway.plots.heads import plot_attention_maps, plot_circuit
from headway.plots.marks import FORMULATION_COLUMNS
from headway.plots.phase import plot_order_supervision_contrast
from headway.runs.store import checkpoint_steps, load_model, load_runs
from headway.studies.retrieval.analyse import ANALYSIS_SEED
from headway.studies.retrieval.tables import ic_cells
from headway.analysis.retrieval.heads import statement_patterns
from headway.tasks.retrieval.positions import map_statements
from headway.tasks.retrieval.config import RetrievalConfig
from headway.tasks.retrieval.generator import generate


def pick_example(final: pd.DataFrame, part: str) -> pd.Series | None:
    """The solved IC run of a part with the most hops at the fewest layers (lowest seed), preferring
    runs with more than one layer."""
    solved = final[(final.part == part) & (final.curriculum == "ic") & final.solved]
    if solved.empty:
        return None
    ranked = solved.assign(single=solved.layers == 1).sort_values(  # a one-layer circuit shows little stacking
        ["single", "hops", "layers", "seed"], ascending=[True, False, True, True])
    return ranked.iloc[0]


def _statement_labels(cfg: RetrievalConfig, rows: np.ndarray) -> list[str]:
    """Short labels of one example's statements: `a=b` links, `Q:a` query (conditional: relation/class/rule)."""
    labels = []
    for row in rows[:-1]:
        if not cfg.conditional:
            labels.append(f"{row[0]}={row[1]}")
            continue
        marker = row[0] - cfg.vocab
        if marker < cfg.relations:
            labels.append(f"{row[1]}-r{marker}-{row[2]}")
        elif marker == cfg.relations + cfg.classes:
            labels.append(f"{row[1]}:c{row[2] - cfg.vocab - cfg.relations}")
        else:
            labels.append(f"c{row[1] - cfg.vocab - cfg.relations}→r{row[2] - cfg.vocab}")
    query = rows[-1][1] if cfg.conditional else rows[-1][0]
    return labels + [f"Q:{query}"]


def example_figures(out_dir: Path, run: pd.Series, heads: pd.DataFrame, figures: Path, tag: str | None = None,
                    also: pd.DataFrame | None = None) -> tuple[Path | None, Path]:
    """Attention maps of the circuit heads (and the heads in `also`, e.g. those composing links) on one
    example and the circuit diagram of one run; files are named by `tag` (default: the run's part). The maps
    need the run's weights: without a checkpoint (a published folder keeps none) they are None."""
    run_dir = Path(out_dir) / run.ensemble
    mine = heads[heads.run_id == run.run_id].sort_values(["layer", "head"])
    name = f"{run.part}, D={run.hops}, {run.layers} layers, seed {run.seed}"
    tag = tag or run.part
    diagram = plot_circuit(mine, figures / f"circuit_{tag}.png", f"Circuit found automatically ({name})")
    if not checkpoint_steps(run_dir):
        return None, diagram
    members = load_runs(run_dir)
    index = [r.run_id for r in members].index(run.run_id)
    cfg = members[index].task
    batch = generate(cfg, 1, np.random.default_rng(ANALYSIS_SEED + 1))
    smap = map_statements(cfg, batch)
    patterns = statement_patterns(load_model(run_dir, index), cfg, batch.tokens)[0, 0]
    key = mine[mine.in_circuit]
    key = key if not key.empty else mine[mine.role != "none"]
    if also is not None:
        key = pd.concat([key, also]).drop_duplicates(["layer", "head"]).sort_values(["layer", "head"])
    maps = plot_attention_maps(patterns, key, _statement_labels(cfg, smap.rows[0]),
                               [int(s) for s in smap.hop_link[0] if s >= 0], figures / f"attention_{tag}.png",
                               f"Attention of the circuit heads on one example ({name}); red: queried chain")
    return maps, diagram


def emergence_figures(final: pd.DataFrame, curves: pd.DataFrame, hops: pd.DataFrame, figures: Path,
                      fraction: float, min_rise: float) -> dict[Path, tuple[Any, str]]:
    """Role-score and hop-accuracy curves of the plain IC cell with D > 1 solved by the most seeds
    (then the most hops, then the fewest layers), with emergence at `fraction` of the rise (none below `min_rise`)."""
    cells = ic_cells(final)
    cells = cells[(cells.part == "plain") & (cells.hops > 1)]
    if cells.empty:
        return {}
    cells = cells.assign(seeds=cells.run_ids.map(len)).sort_values(["seeds", "hops", "layers"],
                                                                   ascending=[False, False, True])
    cell = cells.iloc[0]
    chance = float(final[final.run_id.isin(cell.run_ids)].chance.iloc[0])
    out = {}
    mine = curves[curves.run_id.isin(cell.run_ids)]
    if not mine.empty:
        out[plot_emergence(mine, emergence_table(mine, fraction, min_rise), figures / "emergence_heads.png")] = (
            cell, "Role scores of the circuit groups")
    mine = hops[hops.run_id.isin(cell.run_ids)]
    if not mine.empty:
        table = emergence_table(mine, fraction, min_rise)
        out[plot_hop_accuracy(mine, table, figures / "emergence_hops.png", chance=chance)] = (
            cell, "Per-hop validation accuracy (dotted: chance)")
    return out


def contrast_figure(final: pd.DataFrame, mechanism_class: pd.DataFrame, phase: pd.DataFrame, figures: Path,
                    threshold: float) -> tuple[Path, pd.Series] | None:
    """The link order × supervision contrast (`plot_order_supervision_contrast`) at the cheapest cell where
    composition is testable — the fewest layers, then hops, among the solvable phase cells with D > L — with
    its attention, layout and masking; None when the grid trained one order and one supervision, or has no
    such cell or no classified run."""
    runs = final[(final.part == "plain") & (final.curriculum == "ic")]
    if runs.order.nunique() < 2 and runs.supervision.nunique() < 2:
        return None
    cells = phase[phase.beyond_linear & phase.solvable].sort_values(["layers", "hops"])
    if cells.empty:
        return None
    cell = cells.iloc[0]
    for column in [c for c in FORMULATION_COLUMNS if c not in ("order", "supervision") and c in cell.index]:
        runs = runs[runs[column] == cell[column]]
    runs = runs.merge(mechanism_class[["run_id", "mechanism"]], on="run_id")
    if runs.empty:
        return None
    path = plot_order_supervision_contrast(runs, figures / "phase_contrast.png", int(cell.layers), int(cell.hops),
                                           threshold, float(cell.chance_roots), cell.attention, cell.layout)
    return path, cell
