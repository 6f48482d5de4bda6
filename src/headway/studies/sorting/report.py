"""Writes the sorting study's outputs: `results.csv`, `mode_fractions.csv`, `llc_curve.csv`, `llc_stability.csv`,
`summary.json`, the figures and the offline HTML report, opening with the verdict on each claim."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headway.analysis.llc.study_settings import recorded_settings
from headway.analysis.llc import MIN_ACCEPTANCE
from headway.analysis.stages import StageRule
from headway.plots.circuits import plot_circuits, plot_diagonal_scores
from headway.plots.development import plot_development, plot_sgld_traces
from headway.plots.sorting import plot_ablation, plot_mode_fractions, plot_mode_map, plot_training
from headway.report.figures import fresh_figures, save_figure
from headway.report.html import Report
from headway.report.messages import said_once
from headway.runs import layout
from headway.runs.store import load_runs
from headway.studies.base import ANALYSIS, RUNS, StudyData
from headway.studies.llc_bias import bias_said, errors_text, stability_table, write_stability
from headway.studies.llc_schema import curve_csv
from headway.studies.sorting.analyse import load_circuits
from headway.studies.sorting.plan import data_label_of
from headway.studies.sorting.rise_fall import run_level, run_test
from headway.studies.sorting.rules import SortingRules
from headway.studies.sorting.tables import SortingTables, head_courses, run_title, summary_json, tables_at
from headway.studies.sorting.verdicts import CLAIMS, share_text, training_text
from headway.studies.sensitivity import status_table, sweep_texts, threshold_sensitivity
from headway.studies.verdict import Verdict, decision_rule, methods_section, verdict_callouts
from headway.analysis.sorting.modes import copy_sets


def write_outputs(data: StudyData, tables: SortingTables, verdicts: list[Verdict], out: Path) -> Path:
    """Every output of the study into `out`; return the report's path."""
    figures = fresh_figures(out)
    plan, final, rules = data.plan, tables.final, data.rules
    sensitivity = threshold_sensitivity(CLAIMS, tables, rules, lambda changed: tables_at(tables, rules, changed))
    layout.write_text(out / "results.csv", tables.final.to_csv(index=False))
    layout.write_text(out / "mode_fractions.csv", tables.fractions.to_csv(index=False))
    layout.write_text(out / "mode_sweep.csv", tables.sweep.to_csv(index=False))
    curve = data.tables["llc_curve"]
    if len(curve):
        layout.write_text(out / "llc_curve.csv", curve_csv(curve))
    write_stability(out, data.tables)

    report = Report("Structure development in list-sorting transformers",
                    f"headway study sorting · scale `{plan.scale}` · {len(final)} trained transformers")
    verdict_callouts(report, verdicts, "Each claim of the source checked by this study: its test (its null and "
                     "the effect it must detect), then the numbers, p and power. " + decision_rule(rules)
                     + " A claim that does not hold at this scale is shown as such; it is a result, not an error.",
                     sweep_texts(sensitivity, verdicts))
    _overview(report, data, final)
    _training_section(report, data.metrics, final, rules, figures)
    _modes_section(report, final, tables.fractions, [data_label_of(d) for d in plan.data], rules, figures)
    _sweep_section(report, tables, rules, sensitivity)
    _circuits_section(report, data, out, final, figures)
    _effects_section(report, tables, final, figures)
    _development_section(report, data, tables, figures)
    _methods_section(report, plan)
    methods_section(report, rules)
    report.section("All runs").table(final, "Per run: data, weight decay, seed, accuracy, mode and its quantities, LLC.")
    layout.write_json(out / "summary.json", summary_json(data, tables, verdicts, sensitivity),
                      checked=False)  # an output, never read back
    return report.write(out / "report.html")


def _overview(report: Report, data: StudyData, final: pd.DataFrame) -> None:
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


def _training_section(report: Report, metrics: pd.DataFrame, final: pd.DataFrame, rules: SortingRules,
                      figures: Path) -> None:
    section = report.section("Training")
    section.figure(save_figure(plot_training(metrics), figures / "training.png"),
                   "Validation loss and per-token accuracy (teacher forced) of every run; dotted: 95%.")
    section.paragraph(training_text(final, rules.learned))


def _modes_section(report: Report, final: pd.DataFrame, fractions: pd.DataFrame, data_order: list[str],
                   rules: SortingRules, figures: Path) -> None:
    section = report.section("Head modes")
    t = rules.mode_thresholds()
    section.paragraph(
        "Each model's mode comes from its OV and QK circuits (LayerNorm folded). A head copies number v "
        f"when its OV diagonal score (the diagonal entry's z-score within its row) exceeds {t.copy:g}, "
        f"suppresses it below −{t.copy:g}; a copier copies ≥ {t.min_fraction:.0%} of the numbers. "
        f"Copy-suppression: a suppressor whose QK circuit correlates ≥ {t.qk_similar:g} with a copier's; "
        f"splitting: ≥ 2 copiers whose copied sets overlap (Jaccard) ≤ {t.max_overlap:g} and together cover "
        f"≥ {t.min_coverage:.0%}; overlapping: ≥ 2 copiers otherwise; other: the rest.")
    section.figure(save_figure(plot_mode_map(final, data_order), figures / "mode_map.png"),
                   "The mode of every trained model: seeds (rows) × training data (columns), per weight decay.")
    section.figure(save_figure(plot_mode_fractions(fractions), figures / "mode_fractions.png"),
                   "Fraction of seeds (learned runs) in each mode against the measured mean gap δ̄, with Wilson 95% "
                   "intervals.")
    shown = fractions.assign(cell=[share_text(int(k), int(n)) for k, n in zip(fractions["count"], fractions.n)])
    section.table(shown.pivot(index=["data", "mean_gap", "weight_decay"], columns="mode", values="cell")
                  .reset_index(), "Learned runs in each mode out of the learned runs of the cell, with the Wilson "
                  "95% interval of the fraction.", float_format="{:.2f}")
    quantities = [c for c in final.columns if c.startswith(("copy_fraction", "suppress_fraction"))]
    section.table(final[["data", "weight_decay", "seed", "mode", *quantities, "overlap", "coverage",
                         "qk_similarity"]], "What the classifier measured, per model.")
    section.table(final.groupby(["mode", "weight_decay"]).settled_step.describe()[["count", "min", "50%", "max"]]
                  .reset_index(), "Step from which each model's final mode holds at every later checkpoint "
                  "(the OV/QK circuits classified at each checkpoint).", float_format="{:.0f}")


def _sweep_section(report: Report, tables: SortingTables, rules: SortingRules, sensitivity: pd.DataFrame) -> None:
    """How the modes and the verdicts that rest on them move when one swept rule moves."""
    section = report.section("Threshold sensitivity")
    swept = ", ".join(f"{name} ∈ {{{', '.join(f'{v:g}' for v in values)}}}"
                      for name, values in rules.sweeps().items())
    section.paragraph(
        f"The copy threshold ({rules.copy:g}) was fixed a priori from untrained heads of the study's shape: it is "
        "the smallest half-integer beyond which a model's diagonal scores expect fewer than 0.05 spurious copied or "
        f"suppressed numbers under noise (docs/study-sorting.md). Every swept rule ({swept}; `SortingRules`) is "
        "moved one at a time: each model's mode is recomputed from its final circuits for a mode threshold "
        "(`mode_sweep.csv`: run × threshold value → mode), and every claim is judged again, the gap and LLC "
        "findings held as they are (the gap test's power is simulated); below, the mode counts at each value, and "
        "each claim's status there, by its id.")
    sweep = tables.sweep
    if sweep.empty:
        section.paragraph("No sweep was stored with this analysis.")
    else:
        counts = sweep.groupby(["threshold", "value", "mode"], sort=False).size().unstack(fill_value=0).reset_index()
        section.table(counts, "Models in each mode when one threshold takes each swept value (the others at their "
                      "defaults).", float_format="{:g}")
    section.table(status_table(sensitivity), "Status of each claim, by its id, per swept rule value.",
                  float_format="{:g}")


def _representatives(final: pd.DataFrame) -> pd.DataFrame:
    """The first model of each mode found (lowest seed, default data first)."""
    return final.sort_values(["seed"]).groupby("mode", sort=False).head(1)


def _circuits_section(report: Report, data: StudyData, out: Path, final: pd.DataFrame, figures: Path) -> None:
    section = report.section("Circuits")
    section.paragraph("OV circuits (W_E W_V W_O W_U) and QK circuits (W_E W_Q W_Kᵀ W_Eᵀ) per head with "
                      "LayerNorm folded, for one model of each mode found, and the diagonal scores the "
                      "classifier reads.")
    index = {}
    for ensemble in data.ensembles:
        arrays, ids = load_circuits(out / ANALYSIS, ensemble, load_runs(out / RUNS / ensemble))
        index.update({run_id: (arrays, i) for i, run_id in enumerate(ids)})
    for row in _representatives(final).itertuples():
        arrays, i = index[row.run_id]
        title = f"{row.mode.replace('_', '-')}: {row.data}, wd {row.weight_decay:g}, seed {row.seed}"
        stem = f"circuits_{row.mode}"
        section.figure(save_figure(plot_circuits(arrays["ov"][i], arrays["qk"][i], title), figures / f"{stem}.png"),
                       f"OV and QK circuits per head — {title}.")
        copies, suppresses = copy_sets(arrays["scores"][i : i + 1], data.rules.mode_thresholds())
        section.figure(save_figure(plot_diagonal_scores(arrays["scores"][i], copies[0], suppresses[0], title,
                                                        data.rules.copy), figures / f"scores_{row.mode}.png"),
                       f"OV diagonal score per number and head — {title}.")


def _effects_section(report: Report, tables: SortingTables, final: pd.DataFrame, figures: Path) -> None:
    section = report.section("Ablations and direct logit attribution")
    section.paragraph("Each head ablated (zero, or mean over the analysed lists), on teacher-forced lists, split "
                      "by the gap between the target and the previous sorted number. A copy-suppression head "
                      "whose removal raises the loss but lowers the output entropy makes the model less "
                      "over-confident: that is its calibrating role.")
    ablation, dla = tables.ablation, tables.dla
    for row in _representatives(final).itertuples():
        frame = ablation[ablation.run_id == row.run_id]
        title = f"{row.mode.replace('_', '-')}: {row.data}, wd {row.weight_decay:g}, seed {row.seed}"
        section.figure(save_figure(plot_ablation(frame, title), figures / f"ablation_{row.mode}.png"),
                       f"Change in loss and output entropy when each head is ablated — {title}.")
    summary = ablation[ablation.gap_bin == "all"].merge(final[["run_id", "mode"]], on="run_id")
    summary = summary[summary["head"] >= 0].groupby(["mode", "head", "ablation"])[
        ["d_loss", "d_accuracy", "d_entropy"]].mean().reset_index()
    section.table(summary, "Mean change over all targets, averaged over the models of each mode.")
    per_mode = dla.merge(final[["run_id", "mode"]], on="run_id").groupby(["mode", "head", "gap_bin"])[
        ["dla_correct", "dla_current"]].mean().reset_index()
    section.table(per_mode, "Direct logit attribution of each head to the correct next number and to the current "
                            "number, averaged over the models of each mode (logit minus the mean logit).")


def _development_section(report: Report, data: StudyData, tables: SortingTables, figures: Path) -> None:
    """Loss and LLC over training with stage boundaries, per traced run."""
    section = report.section("Development: the LLC over training")
    curve = data.tables["llc_curve"]
    if not tables.development:
        section.paragraph("No run was traced.")
        return
    chosen, groups = recorded_settings(curve, data.plan.sgld), sorted(set(curve.weights) - {"all"})
    sgld = chosen.settings
    section.paragraph(
        f"LLC estimated by SGLD at {curve.step.nunique()} log-spaced checkpoints"
        + (f" from step {data.plan.llc_first_step}" if data.plan.llc_first_step else "") + ", for the whole model"
        + (f" and for {', '.join(groups)} alone (only those weights move)" if groups else "")
        + f": ε = {sgld.lr:g}, γ = {sgld.localization:g}, "
        f"nβ = {sgld.nbeta if sgld.nbeta else 'B / ln B'}, {sgld.chains} chains × {sgld.draws} draws after "
        f"{sgld.burnin} burn-in steps, batch {sgld.batch_size}; L(w*) on "
        f"{'the whole training pool' if sgld.init_loss_batches is None else f'{sgld.init_loss_batches * sgld.init_size} lists'}"
        ". Error bars are the standard error of λ̂: the chains' spread and nβ × the standard error of L(w*). "
        "MALA acceptance is the mean Metropolis-adjusted Langevin acceptance probability of the SGLD steps "
        f"(a warning below {MIN_ACCEPTANCE:g}). Stage boundaries: red from LLC turning points, "
        "blue from the loss curve's plateaus (rule in Methods).")
    section.paragraph(f"Why these settings: {chosen.reason}.")
    section.key_values({"LLC estimator bias": bias_said(tables.llc_bias, tables.stability, data.rules,
                                                        "the rise-and-fall test")})
    stability_table(section, tables.stability)
    section.table(_rise_fall_table(tables, data.rules), "The rise-and-fall test of each traced run (its p: the larger "
                  "of p_rise and p_fall times the candidate peaks; a run passes at p ≤ "
                  f"{run_level(data.rules):.3g}; power: its chance to pass if the LLC rose and fell "
                  f"{data.rules.llc_fall:.0%} of its peak), {errors_text(tables.llc_bias, data.rules)}.",
                  float_format="{:.3g}")
    heads = head_courses(tables, data.rules)
    if len(heads):
        section.table(heads.drop(columns="run_id"), "Each head's restricted LLC over training, read by the "
                      "rise-and-fall test's rule (the run's whole-model bias weighed in; descriptive, not a claim): "
                      "its first valid, peak and last valid λ̂, the fall from the peak, the run's final mode and the "
                      "step from which that mode held.", float_format="{:.3g}")
    for traced in tables.development:
        title, frame = run_title(traced), traced.llc
        section.figure(save_figure(plot_development(traced.loss, frame, traced.boundaries, title),
                             figures / f"development_{traced.run_id}.png"), f"Loss and LLC over training — {title}.")
        section.table(traced.stages, f"Stages by the LLC — {title}.")
        whole = frame[frame.weights == "all"].sort_values("step")
        section.table(whole[["step", "llc_mean", "llc_se", "init_loss", "init_loss_se", "acceptance", "n_warnings"]],
                      f"Whole-model λ̂ per checkpoint — {title}"
                      + (f"; left out of the peak search: {traced.exclusions()}." if traced.excluded else "."),
                      float_format="{:.4g}")
        if "loss_trace" in frame.columns:
            last = frame[frame.step == frame.step.max()]
            section.figure(save_figure(plot_sgld_traces(last, f"SGLD chains at step {int(last.step.iloc[0])} — {title}"),
                                 figures / f"sgld_{traced.run_id}.png"),
                           f"Each chain's draw losses at the last checkpoint (dashed: the loss at w*) — {title}.")
        if traced.warnings:
            section.callout("SGLD diagnostics: " + " | ".join(said_once(traced.warnings)), "warning")


def _rise_fall_table(tables: SortingTables, rules: SortingRules) -> pd.DataFrame:
    """One row per traced run: why it is unusable (if so), its candidate peaks, p_rise, p_fall, its p,
    whether it passes, and its power for the stated effect."""
    rows = []
    for traced in tables.development:
        tested = run_test(traced, rules)
        rows.append({"run": run_title(traced), "unusable": tested.unusable, "candidate_peaks": tested.candidates,
                     "p_rise": traced.p_rise, "p_fall": traced.p_fall, "p": tested.p,
                     "rises_and_falls": tested.counted, "power": tested.power})
    return pd.DataFrame(rows)


def _methods_section(report: Report, plan) -> None:
    rule = StageRule()
    report.section("Methods").bullets([
        f"Recipe: {', '.join(f'{k} {v}' for k, v in plan.settings.items() if k not in ('task',))}.",
        (f"Stage rule: smooth both curves over {rule.window} checkpoints in log(step); LLC boundaries at turning "
        f"points that move the curve by ≥ {rule.min_change:.0%} of its range on both sides; loss boundaries where "
        f"the loss has fallen {rule.plateau:.0%} of its total drop and where it is within {rule.plateau:.0%} of "
        "its final value; boundaries closer than one checkpoint interval are merged."),
        "Every threshold, level and stated effect of the verdicts: the rules below. Details and the reasons "
        "for each choice: docs/study-sorting.md.",
    ])
