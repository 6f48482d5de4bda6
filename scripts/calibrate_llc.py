"""Calibrate the sorting study's SGLD settings on a trained ensemble: λ̂ ± standard error and MALA
acceptance over a grid of step size ε × batch size × localisation γ at chosen checkpoints, and the
setting where λ̂ is stable (moves < 10% when ε is halved and when the batch is doubled) with acceptance
above `headway.analysis.llc.MIN_ACCEPTANCE` (docs/study-sorting.md, "Calibrating SGLD").

Run: python scripts/calibrate_llc.py RUN_DIR [--instances 0,1] [--steps first,middle,last]
     [--lr 3e-6,1.5e-6,7.5e-7] [--batch-size 32,64,128] [--localization 1e4] [--scale cpu] [--out table.csv]
RUN_DIR is an ensemble of a sorting study (`<out>/runs/<ensemble>`); the other settings (nβ, chains,
draws and burn-in at the largest ε, L(w*)) are the study plan's at --scale.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import pandas as pd
import torch

from headway.analysis.llc.calibration import calibrate_sgld, choose_setting
from headway.runs.checkpoints import checkpoint_steps, load_checkpoint
from headway.runs.store import load_model, load_runs
from headway.analysis.llc.trace import training_pool
from headway.studies.sorting.plan import study_plan
from headway.train.objective import run_loss


def numbers(text: str, kind: type) -> list:
    """A comma list of numbers."""
    return [kind(float(part)) for part in text.split(",")]


def pick_steps(saved: list[int], text: str) -> list[int]:
    """Checkpoint steps from 'first', 'middle', 'last' or numbers."""
    named = {"first": saved[0], "middle": saved[len(saved) // 2], "last": saved[-1]}
    return [named[part] if part in named else int(part) for part in text.split(",")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--instances", default="0,1")
    parser.add_argument("--steps", default="first,middle,last")
    parser.add_argument("--lr", default="3e-6,1.5e-6,7.5e-7")
    parser.add_argument("--batch-size", default="32,64,128")
    parser.add_argument("--localization", default="1e4")
    parser.add_argument("--scale", default="cpu")
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None, help="CSV of the whole table")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    instances = [int(i) for i in args.instances.split(",")]
    runs = load_runs(args.run_dir)
    model = load_model(args.run_dir, instances, device="cpu")
    tokens, targets = training_pool(runs[instances[0]], len(instances), "cpu")
    loss = run_loss(runs[instances[0]].task, runs[instances[0]].train.loss)
    base = study_plan(args.scale).sgld
    started, parts = time.perf_counter(), []
    for step in pick_steps(checkpoint_steps(args.run_dir), args.steps):
        model.load_instances(load_checkpoint(args.run_dir, step, runs, model), instances)
        table = calibrate_sgld(model, loss, tokens, targets, base, numbers(args.lr, float),
                               numbers(args.batch_size, int), numbers(args.localization, float))
        table.insert(0, "step", step)
        table["run"] = [f"seed {runs[instances[i]].seed}, wd {runs[instances[i]].train.weight_decay:g}"
                        for i in table.instance]
        parts.append(table)
    table = pd.concat(parts, ignore_index=True)
    if args.out:
        table.to_csv(args.out, index=False)
    columns = ["step", "run", "lr", "batch_size", "localization", "llc_mean", "llc_se", "acceptance", "lr_change",
               "batch_change", "stable", "accepted"]
    print(table[columns].to_markdown(index=False, floatfmt=".3g"))
    chosen = choose_setting(table)
    print(f"\n{time.perf_counter() - started:.0f} s; chosen (stable and accepted): {chosen}")
    if chosen is None:
        print(f"stable only (acceptance below threshold everywhere): {choose_setting(table, acceptance=False)}")


if __name__ == "__main__":
    main()
