"""Recipe sweep for the conditional retrieval variant at CPU scale (results/conditional-cpu-sweep/).

Each recipe is a spec: `+`-joined parts, each a named recipe of RECIPES or a flat setting
`key=value` (`ce+bidir`, `ce+steps=12000`, `base+lr=0.003`). A recipe's settings are BASE updated
by its parts in order. Every recipe is trained for every seed with the existing trainer
(`headway.train.sweep.train_runs`: runs of one shape train together as an ensemble; rerunning
skips finished runs and resumes unfinished ones), then one CSV row per (recipe, seed) and a
markdown table per recipe are written, and an accuracy-vs-steps figure.

Run: python scripts/sweep_conditional.py --out runs/cond-sweep --results results/conditional-cpu-sweep \
         --recipes base,ce,bidir --seeds 0,1,2
     python scripts/sweep_conditional.py --out runs/cond-sweep --results DIR --recipes ... --table-only
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from headway.runs.config import RunConfig
from headway.runs.store import load_metrics
from headway.tasks.registry import scale_settings

# The conditional cell of `headway study retrieval --scale cpu` (D = 1, K = 2, 3 layers, 3000 steps),
# evaluated every 100 steps on 1024 examples; the checkpoints kept are the regular ones only.
BASE: dict[str, Any] = {
    **scale_settings("cpu", "retrieval"),
    "conditional": True, "chains": 2, "hops": 1, "layers": 3, "steps": 3000, "curriculum": "ic",
    "relations": 2, "classes": 2, "checkpoint_every": 1000, "log_checkpoints": 0,
}

# Named recipes: flat settings changed from BASE, and why they are in the sweep.
RECIPES: dict[str, tuple[dict[str, Any], str]] = {
    "base": ({}, "the study's conditional cell (MSE, lr 1e-3, R = C = 2)"),
    "plain": ({"conditional": False}, "control: the plain variant with the same model; must be learned"),
    "ce": ({"loss": "cross_entropy"}, "cross-entropy instead of MSE (larger gradient on a 16-way readout)"),
    "lr3e-3": ({"lr": 3e-3}, "3x learning rate"),
    "bidir": ({"attention": "bidirectional"}, "link positions can read every class and rule statement"),
    "layers4": ({"layers": 4}, "one layer more than the three dependent lookups need"),
    "d128": ({"d_model": 128}, "twice the width"),
    "heads8": ({"heads": 8}, "twice the heads (d_head 8)"),
    "chains1": ({"chains": 1}, "one chain: fewer distractor statements"),
    "classes1": ({"classes": 1}, "one class: the rule is one relation for every entity (no class lookup)"),
    "r4c1": ({"relations": 4, "classes": 1}, "one class, 4 relations: true link = the relation the rule names"),
    "r4c2": ({"relations": 4, "classes": 2}, "2 classes, 4 relations: two relations only on decoys"),
    "long": ({"steps": 12000}, "4x the steps"),
}

THRESHOLD = 0.9
CSV_NAME, TABLE_NAME, FIGURE_NAME = "sweep.csv", "table.md", "accuracy_vs_steps.png"


def parse_value(text: str) -> Any:
    """A flat setting's value from text: bool, int, float or the string itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def recipe_settings(spec: str, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The flat settings of a recipe spec (see the module docstring); raises KeyError on an unknown name."""
    settings = dict(BASE if base is None else base)
    for part in spec.split("+"):
        if "=" in part:
            key, value = part.split("=", 1)
            settings[key] = parse_value(value)
        elif part in RECIPES:
            settings.update(RECIPES[part][0])
        else:
            raise KeyError(f"recipe part {part!r} is neither key=value nor one of {', '.join(RECIPES)}")
    return settings


def build_runs(specs: list[str], seeds: list[int], base: dict[str, Any] | None = None,
               ) -> list[tuple[str, RunConfig]]:
    """(recipe, run) for every recipe and seed, each a RunConfig built with RunConfig.from_flat.
    Two specs giving the same settings are trained once (the later spec is dropped)."""
    out, seen = [], set()
    for spec in specs:
        settings = recipe_settings(spec, base)
        for seed in seeds:
            run = RunConfig.from_flat({**settings, "seed": seed})
            if run.run_id not in seen:
                seen.add(run.run_id)
                out.append((spec, run))
    return out


def train(recipe_runs: list[tuple[str, RunConfig]], out: Path, device: str = "cpu", progress: bool = False) -> None:
    """Train every run under `out` (finished runs are skipped by the run store, unfinished resume)."""
    from headway.train.sweep import train_runs

    train_runs([run for _, run in recipe_runs], out, device=device, progress=progress)


def per_run_table(recipe_runs: list[tuple[str, RunConfig]], metrics: pd.DataFrame,
                  threshold: float = THRESHOLD) -> pd.DataFrame:
    """One row per (recipe, seed): final and best val accuracy, per-hop columns, steps to `threshold`."""
    rows = []
    for recipe, run in recipe_runs:
        m = metrics[metrics.run_id == run.run_id].sort_values("step") if len(metrics) else metrics
        row: dict[str, Any] = {"recipe": recipe, "seed": run.seed, "run_id": run.run_id,
                               "steps": run.train.steps, "step_reached": None, "complete": False,
                               "val_accuracy": np.nan, "best_val_accuracy": np.nan,
                               f"steps_to_{threshold:g}": np.nan}
        if len(m):
            last = m.iloc[-1]
            row.update(step_reached=int(last.step), complete=int(last.step) == run.train.steps,
                       val_accuracy=float(last.val_accuracy), best_val_accuracy=float(m.val_accuracy.max()))
            for col in sorted(c for c in m.columns if c.startswith("val_acc_hop")):
                row[col] = float(last[col])
            hit = m[m.val_accuracy >= threshold]
            if len(hit):
                row[f"steps_to_{threshold:g}"] = int(hit.step.iloc[0])
        rows.append(row)
    return pd.DataFrame(rows)


def recipe_table(runs: pd.DataFrame, threshold: float = THRESHOLD) -> pd.DataFrame:
    """One row per recipe (in first-seen order): seeds, final val accuracy mean/min/max, best, seeds at
    or above `threshold` and the median steps to reach it among those that did."""
    reach = f"steps_to_{threshold:g}"
    rows = []
    for recipe, g in runs.groupby("recipe", sort=False):
        done = g[g.complete]
        finals = done.val_accuracy
        rows.append({
            "recipe": recipe, "seeds": len(g), "complete": len(done),
            "steps": int(g.steps.max()),
            "final_mean": finals.mean() if len(done) else np.nan,
            "final_min": finals.min() if len(done) else np.nan,
            "final_max": finals.max() if len(done) else np.nan,
            "best": g.best_val_accuracy.max(),
            f"seeds_at_{threshold:g}": int((finals >= threshold).sum()),
            f"median_{reach}": g[reach].median() if g[reach].notna().any() else np.nan,
        })
    return pd.DataFrame(rows)


def markdown(table: pd.DataFrame, threshold: float = THRESHOLD) -> str:
    """The recipe table as markdown; accuracies with 3 decimals, missing values as '–'."""
    def cell(value: Any) -> str:
        if isinstance(value, float):
            return "–" if np.isnan(value) else (f"{value:.3f}" if value <= 1 else f"{value:.0f}")
        return str(value)

    header = ["recipe", "settings changed", "seeds (done)", "steps", "final val acc mean [min, max]",
              "best", f"seeds ≥ {threshold:g}", f"median steps to {threshold:g}"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in table.to_dict("records"):
        changed = ", ".join(f"{k}={v}" for k, v in changed_settings(r["recipe"]).items()) or "–"
        final = f"{cell(r['final_mean'])} [{cell(r['final_min'])}, {cell(r['final_max'])}]"
        values = [r["recipe"], changed, f"{r['seeds']} ({r['complete']})", str(r["steps"]), final,
                  cell(r["best"]), f"{r[f'seeds_at_{threshold:g}']}/{r['seeds']}",
                  cell(r[f"median_steps_to_{threshold:g}"])]
        lines.append("| " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def changed_settings(spec: str) -> dict[str, Any]:
    """The settings of a recipe that differ from BASE."""
    settings = recipe_settings(spec)
    return {k: v for k, v in settings.items() if BASE.get(k) != v}


def figure(recipe_runs: list[tuple[str, RunConfig]], metrics: pd.DataFrame, path: Path,
           recipes: list[str] | None = None) -> None:
    """Val final-hop accuracy vs steps: one colour per recipe, a thin line per seed, a thick mean."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 5))
    ax = fig.subplots()
    names = list(dict.fromkeys(r for r, _ in recipe_runs if recipes is None or r in recipes))
    palette = matplotlib.colormaps["tab10"]

    def colours(i: int):
        return palette(i % 10)

    for i, name in enumerate(names):
        ids = [run.run_id for r, run in recipe_runs if r == name]
        m = metrics[metrics.run_id.isin(ids)]
        if not len(m):
            continue
        for _, g in m.groupby("run_id"):
            g = g.sort_values("step")
            ax.plot(g.step, g.val_accuracy, color=colours(i), lw=0.6, alpha=0.5)
        mean = m.groupby("step").val_accuracy.mean()
        ax.plot(mean.index, mean.values, color=colours(i), lw=2, label=name)
    ax.axhline(0.5, color="grey", ls="--", lw=1)
    ax.axhline(THRESHOLD, color="black", ls=":", lw=1)
    ax.set_xlabel("training step")
    ax.set_ylabel("val final-hop accuracy")
    ax.set_ylim(0, 1.02)
    ax.set_title("Conditional retrieval (D = 1): thin = seed, thick = mean; dashed = decoy guess 0.5")
    ax.legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def write_results(recipe_runs: list[tuple[str, RunConfig]], out: Path, results: Path,
                  threshold: float = THRESHOLD, figure_recipes: list[str] | None = None) -> pd.DataFrame:
    """CSV (per recipe and seed), markdown table (per recipe) and figure into `results`; the table."""
    results.mkdir(parents=True, exist_ok=True)
    metrics = load_metrics(out) if out.is_dir() else pd.DataFrame()
    runs = per_run_table(recipe_runs, metrics, threshold)
    runs.to_csv(results / CSV_NAME, index=False)
    table = recipe_table(runs, threshold)
    (results / TABLE_NAME).write_text(markdown(table, threshold))
    if len(metrics):
        figure(recipe_runs, metrics, results / FIGURE_NAME, figure_recipes)
    return table


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="sweep directory of the runs (resumable)")
    parser.add_argument("--results", type=Path, required=True, help="where the CSV, table and figure go")
    parser.add_argument("--recipes", default=",".join(RECIPES), help="comma list of recipe specs")
    parser.add_argument("--seeds", default="0,1,2", help="comma list of seeds")
    parser.add_argument("--threshold", type=float, default=THRESHOLD)
    parser.add_argument("--figure-recipes", default=None, help="comma list of recipes drawn (default: all)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--table-only", action="store_true", help="tabulate what is there, train nothing")
    parser.add_argument("--progress", action="store_true")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch CPU threads (1 wastes least on a shared 2-core machine)")
    args = parser.parse_args(argv)
    if args.threads > 0:
        import torch

        torch.set_num_threads(args.threads)
    specs = [s for s in args.recipes.split(",") if s]
    seeds = [int(s) for s in args.seeds.split(",")]
    recipe_runs = build_runs(specs, seeds)
    started = time.perf_counter()
    if not args.table_only:
        train(recipe_runs, args.out, args.device, args.progress)
    figure_recipes = args.figure_recipes.split(",") if args.figure_recipes else None
    table = write_results(recipe_runs, args.out, args.results, args.threshold, figure_recipes)
    print(markdown(table, args.threshold))
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
