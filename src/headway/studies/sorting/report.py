"""Writes the sorting study's outputs: `results.csv`, `mode_fractions.csv`, `llc_curve.csv`,
`summary.json`, the figures and the offline HTML report, with a verdict on each claim."""

from __future__ import annotations

from math import comb
from pathlib import Path
from typing import TYPE_CHECKING, Any

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd

from headway.analysis.modes import ModeThresholds, copy_sets
from headway.analysis.stages import StageRule, label_stages, stage_boundaries
from headway.plots.circuits import plot_circuits, plot_diagonal_scores
from headway.plots.sorting import (
    MODES,
    plot_ablation,
    plot_development,
    plot_mode_fractions,
    plot_mode_map,
    plot_sgld_traces,
    plot_training,
)
from headway.report.html import Report
from headway.runs import layout
from headway.studies.sorting.analyse import load_circuits
from headway.studies.sorting.plan import data_label_of

if TYPE_CHECKING:
    from headway.studies.sorting.study import SortingStudyData

FIGURES = "figures"
LEARNED = 0.95  # per-token validation accuracy a run must reach to count as having learned to sort
LLC_FALL = 0.1  # the final LLC must sit this fraction of the peak below it for "rises, then falls"
SIGNIFICANT = 0.05  # Fisher's exact test level for "the data decide the mode"


def write_outputs(data: SortingStudyData, out: Path) -> Path:
    """Every output of the study from `data` into `out`; return the report's path."""
    figures = out / FIGURES
    figures.mkdir(parents=True, exist_ok=True)
    for stale in figures.glob("*.png"):
        stale.unlink()
    plan, metrics, tables = data.plan, data.metrics, data.tables
    data_order = [data_label_of(d) for d in plan.data]
    final = final_table(metrics, tables)
    final = final.merge(mode_settled(tables["mode_curve"]), on="run_id", how="left")
    gaps = final.groupby("data").mean_gap.first().to_dict()
    fractions = mode_fractions(final)
    final.to_csv(out / "results.csv", index=False)
    fractions.to_csv(out / "mode_fractions.csv", index=False)
    if len(tables["llc_curve"]):
        tables["llc_curve"].drop(columns="loss_trace", errors="ignore").to_csv(out / "llc_curve.csv", index=False)

    report = Report("Structure development in list-sorting transformers",
                    f"headway study sorting · scale `{plan.scale}` · {len(final)} trained transformers")
    verdicts: list[dict[str, Any]] = []
    _overview(report, data, final)
    _training_section(report, metrics, final, figures, verdicts)
    _modes_section(report, data, final, fractions, data_order, figures, verdicts)
    _circuits_section(report, data, out, final, figures)
    _effects_section(report, tables, final, figures)
    development = _development_section(report, data, figures, verdicts)
    _methods_section(report, plan)
    report.section("All runs").table(final, "Per run: data, weight decay, seed, accuracy, mode and its quantities, LLC.")
    _verdict_list(report, verdicts)
    layout.write_json(out / "summary.json", summary_json(data, final, fractions, development, verdicts, gaps))
    return report.write(out / "report.html")


def final_table(metrics: pd.DataFrame, tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per run: grid coordinates, measured δ̄, final accuracies, mode and its quantities, final LLC."""
    last = metrics[metrics.step == metrics.groupby("run_id").step.transform("max")]
    keep = ["run_id", "seed", "weight_decay", "val_loss", "val_accuracy", "val_list_accuracy"]
    final = tables["final"].merge(last[keep], on="run_id", how="left")
    llc = tables["llc_final"][["run_id", "llc_mean", "llc_std", "warnings"]].rename(
        columns={"llc_mean": "llc", "warnings": "llc_warnings"})
    final = final.merge(llc, on="run_id", how="left")
    front = ["run_id", "data", "mean_gap", "weight_decay", "seed", "val_accuracy", "val_list_accuracy", "mode"]
    rest = [c for c in final.columns if c not in front and c not in ("instance", "ensemble")]
    return final[front + rest].sort_values(["data", "weight_decay", "seed"], ascending=[True, False, True],
                                            ignore_index=True)


def mode_fractions(final: pd.DataFrame) -> pd.DataFrame:
    """Fraction of seeds in each mode per (data, weight decay), learned runs only."""
    learned = final[final.val_accuracy >= LEARNED]
    rows = []
    for (data, gap, wd), group in learned.groupby(["data", "mean_gap", "weight_decay"]):
        for mode in MODES:
            rows.append({"data": data, "mean_gap": gap, "weight_decay": wd, "mode": mode,
                         "count": int((group["mode"] == mode).sum()), "n": len(group),
                         "fraction": float((group["mode"] == mode).mean())})
    return pd.DataFrame(rows)


def mode_settled(curve: pd.DataFrame) -> pd.DataFrame:
    """Per run: the first checkpoint from which the mode equals the final mode at every later one."""
    rows = []
    for run_id, frame in curve.sort_values("step").groupby("run_id"):
        modes, steps = frame["mode"].to_numpy(), frame.step.to_numpy()
        last = modes[-1]
        differs = np.flatnonzero(modes != last)
        start = steps[differs[-1] + 1] if len(differs) else steps[0]
        rows.append({"run_id": run_id, "settled_step": int(start)})
    return pd.DataFrame(rows, columns=["run_id", "settled_step"])


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided p-value of Fisher's exact test on the table [[a, b], [c, d]]: the probability, with
    the margins fixed, of a table no more likely than the one seen."""
    row, col, n = a + b, a + c, a + b + c + d
    def probability(x: int) -> float:
        return comb(col, x) * comb(n - col, row - x) / comb(n, row)
    seen = probability(a)
    return min(1.0, sum(p for x in range(max(0, row + col - n), min(row, col) + 1)
                        if (p := probability(x)) <= seen * (1 + 1e-9)))


def gap_effect(fractions: pd.DataFrame) -> dict[str, Any] | None:
    """The largest change of one mode's fraction across data values at one weight decay, with the
    p-value of Fisher's exact test between the two data values that differ most."""
    best = None
    for (wd, mode), group in fractions.groupby(["weight_decay", "mode"]):
        if group.data.nunique() < 2:
            continue
        low, high = group.loc[group.fraction.idxmin()], group.loc[group.fraction.idxmax()]
        change = high.fraction - low.fraction
        if best is None or change > best["change"]:
            p = fisher_exact(int(high["count"]), int(high.n - high["count"]), int(low["count"]),
                             int(low.n - low["count"]))
            best = {"weight_decay": float(wd), "mode": mode, "change": float(change), "p_value": p,
                    "low": f"{int(low['count'])}/{int(low.n)} at {low.data}",
                    "high": f"{int(high['count'])}/{int(high.n)} at {high.data}"}
    return best


def _save(fig, path: Path) -> Path:
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _overview(report: Report, data: SortingStudyData, final: pd.DataFrame) -> None:
    plan, seconds = data.plan, data.seconds
    report.section("Overview").key_values({
        "grid": f"{len(plan.data)} data × {len(plan.weight_decays)} weight decays × {len(plan.seeds)} seeds "
                f"= {len(final)} runs in {len(data.ensembles)} ensemble(s)",
        "data": ", ".join(data_label_of(d) for d in plan.data),
        "weight decays": ", ".join(f"{w:g}" for w in plan.weight_decays),
        "training": f"{seconds['training_s']:.0f} s this session ({seconds['training_recorded_s']:.0f} s recorded)",
        "analysis": f"{seconds['analysis_s']:.0f} s this session ({seconds['analysis_recorded_s']:.0f} s recorded)",
        **data.hardware,
    })


def _training_section(report: Report, metrics, final, figures: Path, verdicts: list) -> None:
    section = report.section("Training")
    section.figure(_save(plot_training(metrics), figures / "training.png"),
                   "Validation loss and per-token accuracy (teacher forced) of every run; dotted: 95%.")
    learned = final[final.val_accuracy >= LEARNED]
    worst = final.val_accuracy.min()
    ok = len(learned) == len(final)
    text = (f"{len(learned)} of {len(final)} runs reach ≥ {LEARNED:.0%} per-token validation accuracy "
            f"(lowest {worst:.3f}; whole lists right: median {final.val_list_accuracy.median():.3f}; "
            f"greedy decoding: median per-token {final.ar_token_accuracy.median():.3f}).")
    section.paragraph(text)
    verdicts.append({"claim": "A one-layer attention-only transformer learns to sort",
                     "verdict": "reproduced" if ok else "partly", "evidence": text})


def _modes_section(report: Report, data, final, fractions, data_order, figures: Path, verdicts: list) -> None:
    section = report.section("Head modes")
    t = ModeThresholds()
    section.paragraph(
        "Each model's mode comes from its OV and QK circuits (LayerNorm folded). A head copies number v "
        f"when its OV diagonal score (the diagonal entry's z-score within its row) exceeds {t.copy:g}, "
        f"suppresses it below −{t.copy:g}; a copier copies ≥ {t.min_fraction:.0%} of the numbers. "
        f"Copy-suppression: a suppressor whose QK circuit correlates ≥ {t.qk_similar:g} with a copier's; "
        f"splitting: ≥ 2 copiers whose copied sets overlap (Jaccard) ≤ {t.max_overlap:g} and together cover "
        f"≥ {t.min_coverage:.0%}; overlapping: ≥ 2 copiers otherwise; other: the rest.")
    section.figure(_save(plot_mode_map(final, data_order), figures / "mode_map.png"),
                   "The mode of every trained model: seeds (rows) × training data (columns), per weight decay.")
    section.figure(_save(plot_mode_fractions(fractions), figures / "mode_fractions.png"),
                   "Fraction of seeds (learned runs) in each mode against the measured mean gap δ̄.")
    section.table(fractions.pivot_table(index=["data", "mean_gap", "weight_decay"], columns="mode",
                                        values="count", fill_value=0).reset_index(),
                  "Number of learned runs in each mode.", float_format="{:.2f}")
    quantities = [c for c in final.columns if c.startswith(("copy_fraction", "suppress_fraction"))]
    section.table(final[["data", "weight_decay", "seed", "mode", *quantities, "overlap", "coverage",
                         "qk_similarity"]], "What the classifier measured, per model.")
    counts = {wd: final[(final.weight_decay == wd) & (final["mode"] == "splitting")].shape[0]
              for wd in data.plan.weight_decays}
    both = all(counts.values()) and len(counts) > 1
    verdicts.append({
        "claim": "Vocabulary-splitting appears with and without weight decay",
        "verdict": "reproduced" if both else "not reproduced",
        "evidence": "; ".join(f"{'wd ' + format(wd, 'g') if wd else 'no wd'}: {n} splitting model(s)"
                              for wd, n in counts.items())})
    simple = final["mode"].isin(["splitting", "copy_suppression"]).mean()
    verdicts.append({
        "claim": "Heads settle into vocabulary-splitting or copy-suppression rather than overlapping ranges",
        "verdict": "reproduced" if simple > 0.5 else "not reproduced",
        "evidence": f"{simple:.0%} of models split or copy-suppress; "
                    + ", ".join(f"{m}: {(final['mode'] == m).sum()}" for m in MODES)})
    pairs = final[final["mode"] == "copy_suppression"]
    verdicts.append({
        "claim": "Copy-suppression (one head copies, another suppresses) is one of the two main modes",
        "verdict": "reproduced" if len(pairs) else "not reproduced at this scale",
        "evidence": f"{len(pairs)} of {len(final)} models; largest suppressed fraction of any head: "
                    f"{final.filter(like='suppress_fraction').max().max():.2f}"})
    section.table(final.groupby(["mode", "weight_decay"]).settled_step.describe()[["count", "min", "50%", "max"]]
                  .reset_index(), "Step from which each model's final mode holds at every later checkpoint "
                  "(the OV/QK circuits classified at each checkpoint).", float_format="{:.0f}")
    test = gap_effect(fractions)
    if test is not None:
        verdicts.append({
            "claim": "The gap distribution of the training data decides the final mode",
            "verdict": "reproduced" if test["p_value"] < SIGNIFICANT else "not clear at this scale",
            "evidence": f"largest change of a mode's fraction across δ̄: {test['change']:.2f} ({test['mode']}, "
                        f"{'wd ' + format(test['weight_decay'], 'g') if test['weight_decay'] else 'no wd'}: "
                        f"{test['low']} vs {test['high']}; Fisher's exact test p = {test['p_value']:.2f})"})


def _representatives(final: pd.DataFrame) -> pd.DataFrame:
    """The first model of each mode found (lowest seed, default data first)."""
    return final.sort_values(["seed"]).groupby("mode", sort=False).head(1)


def _circuits_section(report: Report, data, out: Path, final: pd.DataFrame, figures: Path) -> None:
    section = report.section("Circuits")
    section.paragraph("OV circuits (W_E W_V W_O W_U) and QK circuits (W_E W_Q W_Kᵀ W_Eᵀ) per head with "
                      "LayerNorm folded, for one model of each mode found, and the diagonal scores the "
                      "classifier reads.")
    index = {}
    for ensemble in data.ensembles:
        arrays, ids = load_circuits(out / "analysis", ensemble)
        index.update({run_id: (arrays, i) for i, run_id in enumerate(ids)})
    for row in _representatives(final).itertuples():
        arrays, i = index[row.run_id]
        title = f"{row.mode.replace('_', '-')}: {row.data}, wd {row.weight_decay:g}, seed {row.seed}"
        stem = f"circuits_{row.mode}"
        section.figure(_save(plot_circuits(arrays["ov"][i], arrays["qk"][i], title), figures / f"{stem}.png"),
                       f"OV and QK circuits per head — {title}.")
        copies, suppresses = copy_sets(arrays["scores"][i : i + 1], ModeThresholds())
        section.figure(_save(plot_diagonal_scores(arrays["scores"][i], copies[0], suppresses[0], title),
                             figures / f"scores_{row.mode}.png"),
                       f"OV diagonal score per number and head — {title}.")


def _effects_section(report: Report, tables, final: pd.DataFrame, figures: Path) -> None:
    section = report.section("Ablations and direct logit attribution")
    section.paragraph("Each head ablated (zero, or mean over the analysed lists), on teacher-forced lists, split "
                      "by the gap between the target and the previous sorted number. A copy-suppression head "
                      "whose removal raises the loss but lowers the output entropy makes the model less "
                      "over-confident: that is its calibrating role.")
    ablation, dla = tables["ablation"], tables["dla"]
    for row in _representatives(final).itertuples():
        frame = ablation[ablation.run_id == row.run_id]
        title = f"{row.mode.replace('_', '-')}: {row.data}, wd {row.weight_decay:g}, seed {row.seed}"
        section.figure(_save(plot_ablation(frame, title), figures / f"ablation_{row.mode}.png"),
                       f"Change in loss and output entropy when each head is ablated — {title}.")
    summary = ablation[ablation.gap_bin == "all"].merge(final[["run_id", "mode"]], on="run_id")
    summary = summary[summary["head"] >= 0].groupby(["mode", "head", "ablation"])[
        ["d_loss", "d_accuracy", "d_entropy"]].mean().reset_index()
    section.table(summary, "Mean change over all targets, averaged over the models of each mode.")
    per_mode = dla.merge(final[["run_id", "mode"]], on="run_id").groupby(["mode", "head", "gap_bin"])[
        ["dla_correct", "dla_current"]].mean().reset_index()
    section.table(per_mode, "Direct logit attribution of each head to the correct next number and to the current "
                            "number, averaged over the models of each mode (logit minus the mean logit).")


def _development_section(report: Report, data, figures: Path, verdicts: list) -> list[dict[str, Any]]:
    """Loss and LLC over training with stage boundaries, per traced run; returns the stages found."""
    section = report.section("Development: the LLC over training")
    curve, metrics = data.tables["llc_curve"], data.metrics
    if not len(curve):
        section.paragraph("No run was traced.")
        return []
    sgld = data.plan.sgld
    section.paragraph(
        f"LLC estimated by SGLD at {curve.step.nunique()} log-spaced checkpoints, for the whole model and for "
        f"each head alone (only that head's weights move): ε = {sgld.lr:g}, γ = {sgld.localization:g}, "
        f"nβ = {sgld.nbeta if sgld.nbeta else 'B / ln B'}, {sgld.chains} chains × {sgld.draws} draws after "
        f"{sgld.burnin} burn-in steps, batch {sgld.batch_size}. Stage boundaries: red from LLC turning points, "
        "blue from the loss curve's plateaus (rule in Methods).")
    found = []
    rises_falls = []
    for run_id, frame in curve.groupby("run_id", sort=False):
        loss = metrics[metrics.run_id == run_id].sort_values("step")
        whole = frame[frame.weights == "all"].sort_values("step")
        boundaries = stage_boundaries(loss.step.to_numpy(), loss.val_loss.to_numpy(), whole.step.to_numpy(),
                                      whole.llc_mean.to_numpy())
        stages = label_stages(boundaries[boundaries.source == "llc"], whole.step.to_numpy(),
                              whole.llc_mean.to_numpy())
        row = loss.iloc[-1]
        title = f"{frame.data.iloc[0]}, wd {row.weight_decay:g}, seed {int(row.seed)}"
        section.figure(_save(plot_development(loss, frame, boundaries, title), figures / f"development_{run_id}.png"),
                       f"Loss and LLC over training — {title}.")
        section.table(stages, f"Stages by the LLC — {title}.")
        if "loss_trace" in frame.columns:
            last = frame[frame.step == frame.step.max()]
            section.figure(_save(plot_sgld_traces(last, f"SGLD chains at step {int(last.step.iloc[0])} — {title}"),
                                 figures / f"sgld_{run_id}.png"),
                           f"Each chain's draw losses at the last checkpoint (dashed: the loss at w*) — {title}.")
        llc = whole.llc_mean.to_numpy()
        peak = int(np.nanargmax(llc))
        falls = 0 < peak < len(llc) - 1 and llc[-1] <= (1 - LLC_FALL) * llc[peak]
        rises_falls.append(falls)
        warnings = sorted({w for w in frame.warnings if w})
        if warnings:
            section.callout("SGLD diagnostics: " + " | ".join(warnings[:5]), "warning")
        found.append({"run_id": run_id, "title": title, "boundaries": boundaries.to_dict("records"),
                      "stages": stages.to_dict("records"), "llc_peak_step": int(whole.step.iloc[peak]),
                      "llc_peak": float(llc[peak]), "llc_final": float(llc[-1])})
    verdicts.append({
        "claim": "The LLC rises during initial learning and falls while the heads specialise",
        "verdict": "reproduced" if all(rises_falls) else ("partly" if any(rises_falls) else "not reproduced"),
        "evidence": "; ".join(f"{f['title']}: peak {f['llc_peak']:.1f} at step {f['llc_peak_step']}, "
                              f"final {f['llc_final']:.1f}" for f in found)})
    return found


def _methods_section(report: Report, plan) -> None:
    t, rule = ModeThresholds(), StageRule()
    report.section("Methods").bullets([
        f"Recipe: {', '.join(f'{k} {v}' for k, v in plan.settings.items() if k not in ('task',))}.",
        f"Mode thresholds: {t}.",
        (f"Stage rule: smooth both curves over {rule.window} checkpoints in log(step); LLC boundaries at turning "
        f"points that move the curve by ≥ {rule.min_change:.0%} of its range on both sides; loss boundaries where "
        f"the loss has fallen {rule.plateau:.0%} of its total drop and where it is within {rule.plateau:.0%} of "
        "its final value; boundaries closer than one checkpoint interval are merged."),
        f"Learned: per-token validation accuracy ≥ {LEARNED:.0%}; mode fractions count learned runs only.",
        f"LLC 'rises then falls': the peak is inside the trace and the final LLC is ≥ {LLC_FALL:.0%} below it.",
        "Details and the reasons for each choice: docs/study-sorting.md.",
    ])


def _verdict_list(report: Report, verdicts: list[dict[str, Any]]) -> None:
    report.section("Claims").table(pd.DataFrame(verdicts), "Each claim of the source, and what this run found.")


def summary_json(data, final: pd.DataFrame, fractions: pd.DataFrame, development: list, verdicts: list,
                 gaps: dict[str, float]) -> dict[str, Any]:
    """Machine-readable results: the grid, accuracies, mode counts, LLC trace stages, verdicts, timings."""
    plan = data.plan
    return {
        "study": "sorting", "scale": plan.scale, "runs": len(final),
        "grid": {"data": [data_label_of(d) for d in plan.data], "weight_decays": list(plan.weight_decays),
                 "seeds": list(plan.seeds)},
        "realised_mean_gap": gaps,
        "accuracy": {"min_per_token": float(final.val_accuracy.min()),
                     "median_list": float(final.val_list_accuracy.median()),
                     "learned": int((final.val_accuracy >= LEARNED).sum())},
        "modes": {m: int((final["mode"] == m).sum()) for m in MODES},
        "mode_fractions": fractions.to_dict("records"),
        "development": development,
        "sgld": plan.sgld.to_dict(),
        "verdicts": verdicts,
        "seconds": {k: round(v, 1) for k, v in data.seconds.items()},
        "hardware": data.hardware,
        "ensembles": data.ensembles,
        "run_ids": final.run_id.tolist(),
    }
