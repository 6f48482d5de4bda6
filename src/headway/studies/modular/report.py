"""Writes the modular-addition study's outputs: `results.csv`, `llc_curve.csv`, `summary.json`, the
figures and the offline HTML report, opening with the verdict on each claim (its test, p, α and power)
and closing with the rules it was judged by."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headway.analysis.llc.study_settings import recorded_settings
from headway.analysis.stages import StageRule
from headway.plots.development import plot_development, plot_sgld_traces
from headway.plots.modular import plot_fourier_curves, plot_grokking, plot_spectra
from headway.report.figures import fresh_figures, save_figure
from headway.report.html import Report
from headway.report.messages import said_once
from headway.runs import layout
from headway.studies.base import StudyData
from headway.studies.llc_bias import bias_said, errors_text, stability_table, write_stability
from headway.studies.llc_schema import curve_csv
from headway.studies.modular.llc_fall import stability_points
from headway.studies.modular.rules import ModularRules
from headway.studies.modular.tables import (ModularTables, grokking_counts, grokking_sensitivity, run_title,
                                            summary_json, tables_at)
from headway.studies.modular.verdicts import CLAIMS
from headway.studies.sensitivity import flips, status_table, sweep_texts, threshold_sensitivity
from headway.studies.verdict import Verdict, decision_rule, methods_section, verdict_callouts, verdict_frame

RUN_COLUMNS = ["train_fraction", "weight_decay", "seed", "train_accuracy", "val_accuracy", "memorised_step",
               "generalised_step", "delay", "grokked", "initial_effective_frequencies", "effective_frequencies",
               "key_frequencies", "key_embedding_share", "key_logit_share", "random_logit_share"]
LLC_SHOWN = ["weight_decay", "seed", "grokked", "generalised_step", "start_step", "start", "peak_step", "peak",
             "final_step", "final", "rise", "rise_se", "fall", "fall_se", "p_rise", "p_fall", "invalid"]


def write_outputs(data: StudyData, tables: ModularTables, verdicts: list[Verdict], out: Path) -> Path:
    """Every output of the study into `out`; return the report's path."""
    figures = fresh_figures(out)
    layout.write_text(out / "results.csv", tables.runs.to_csv(index=False))
    curve = data.tables["llc_curve"]
    if len(curve):
        layout.write_text(out / "llc_curve.csv", curve_csv(curve))
    write_stability(out, data.tables)

    report = Report("Grokking modular addition",
                    f"headway study modular · scale `{data.plan.scale}` · {len(tables.runs)} trained transformers")
    rules: ModularRules = data.rules
    sensitivity = threshold_sensitivity(CLAIMS, tables, rules, lambda changed: tables_at(data, tables, changed))
    verdict_callouts(report, verdicts, "Each claim about grokking checked by this study: its test (its null or "
                     "control and the effect it must detect), the numbers behind it and its p-value. "
                     + decision_rule(rules) + " A claim that does not hold at this scale is shown as such.",
                     sweep_texts(sensitivity, verdicts))
    report.table(verdict_frame(verdicts), "The verdicts: one-sided p, family-wise α and, for a null result only, "
                 "the design's power at the stated effect (– where it does not decide or the claim could not be "
                 "tested).", float_format="{:.3g}")
    _overview(report, data, tables)
    _grokking_section(report, tables, rules, figures)
    _fourier_section(report, tables, rules, figures)
    _development_section(report, data, tables, figures)
    _sensitivity_section(report, sensitivity)
    _methods_section(report, data)
    methods_section(report, rules)
    report.section("All runs").table(tables.runs[["run_id", *RUN_COLUMNS]], "Per run: accuracies, steps, Fourier measures.")
    layout.write_json(out / "summary.json", summary_json(data, tables, verdicts, sensitivity),
                      checked=False)  # an output, never read back
    return report.write(out / "report.html")


def _overview(report: Report, data: StudyData, tables: ModularTables) -> None:
    plan, seconds, runs = data.plan, data.seconds, tables.runs
    report.section("Overview")
    report.paragraph(
        "One-layer transformers learn a + b mod p from a fixed share of the p² pairs, trained full-batch, with and "
        "without weight decay, every setting and seed in one ensemble per train fraction. For each model: when it "
        "memorises its training set and when (if ever) it generalises to the held-out pairs, the Fourier spectrum "
        "of its embedding and logits, and its local learning coefficient over training.")
    report.key_values({
        "grid": f"train fractions {list(plan.train_fractions)} × weight decays {list(plan.weight_decays)} × seeds "
                f"{list(plan.seeds)} = {len(runs)} runs in {len(data.ensembles)} ensemble(s)",
        "modulus p": ", ".join(str(p) for p in sorted(runs.modulus.unique())),
        "training": f"{seconds['training_s']:.0f} s this session ({seconds['training_recorded_s']:.0f} s recorded)",
        "analysis": f"{seconds['analysis_s']:.0f} s this session ({seconds['analysis_recorded_s']:.0f} s recorded)",
        **data.hardware,
    })


def _grokking_section(report: Report, tables: ModularTables, rules: ModularRules, figures: Path) -> None:
    section = report.section("Grokking")
    section.figure(save_figure(plot_grokking(tables.metrics, tables.runs), figures / "grokking.png"),
                   "Training-set (solid) and test (dashed) accuracy of every run; dotted: its grokking step.")
    section.table(tables.runs[RUN_COLUMNS[:9]], f"Memorised: training-set accuracy first ≥ {rules.memorised:.0%}; "
                  f"generalised: test accuracy ≥ {rules.generalised:.0%} from that step on; delay: the ratio of the "
                  f"two steps; grokked: both, the delay ≥ {rules.delay:g}.", float_format="{:.3g}")
    section.table(grokking_counts(tables.runs), "Per weight decay: runs that generalised and grokked, and the range of "
                  "their generalisation steps and delays.", float_format="{:.3g}")
    for wd in tables.weight_decays:
        section.table(grokking_sensitivity(tables.metrics, wd, rules),
                      f"Runs counted as grokked (weight decay {wd:g}) as the test-accuracy level and the delay factor "
                      "move over their sweeps.", float_format="{:g}")


def _fourier_section(report: Report, tables: ModularTables, rules: ModularRules, figures: Path) -> None:
    section = report.section("Fourier features")
    section.paragraph(
        "The embedding of the numbers 0 … p-1, centred, is split over the frequencies k of Z_p (each a cos/sin "
        "pair); the logits over all p² pairs, centred over the output, are projected on cos/sin(2πk(a+b−c)/p). "
        f"Key frequencies: the fewest holding {rules.coverage:.0%} of the embedding's norm. Effective frequencies: "
        "1 / Σ share², the number of frequencies the spectrum is spread over, without a threshold. The control of "
        "the logits' share on the key frequencies: the share as many random frequencies carry on average, "
        "n_key / K of the share on all K frequencies (`random_logit_share`).")
    runs = tables.runs
    picks = {}
    for label, rows in (("grokked", runs[runs.grokked]), ("not grokked, with decay", runs[~runs.grokked & (runs.weight_decay > 0)]),
                        ("no weight decay", runs[runs.weight_decay == 0])):
        if len(rows):
            picks[rows.iloc[0].run_id] = f"{label}: {run_title(runs, rows.iloc[0].run_id)}"
    if picks:
        section.figure(save_figure(plot_spectra(tables.spectrum, runs, picks), figures / "spectra.png"),
                       "Embedding and logit spectra per frequency (dashed: a flat spectrum).")
    section.figure(save_figure(plot_fourier_curves(tables.fourier_curve, runs), figures / "fourier_over_training.png"),
                   "Effective number of embedding frequencies and the logits' share on the final key frequencies over "
                   "training; dotted: grokking steps.")


def _development_section(report: Report, data: StudyData, tables: ModularTables, figures: Path) -> None:
    section = report.section("Development: the LLC over training")
    if not tables.development:
        section.paragraph("No run was traced.")
        return
    curve = data.tables["llc_curve"]
    chosen = recorded_settings(curve, data.plan.sgld)
    sgld = chosen.settings
    section.paragraph(
        f"LLC of the whole model estimated by SGLD at {curve.step.nunique()} log-spaced checkpoints on each run's "
        f"training set: ε = {sgld.lr:g}, γ = {sgld.localization:g}, nβ = {sgld.nbeta if sgld.nbeta else 'B / ln B'}, "
        f"{sgld.chains} chains × {sgld.draws} draws after {sgld.burnin} burn-in steps, batch {sgld.batch_size}. "
        "Stage boundaries: red from LLC turning points, blue from the test loss's plateaus. A checkpoint whose "
        "estimate is invalid (λ̂ ≤ 0, no standard error, a chain that diverged or left the basin) is left out; a run "
        "with an invalid checkpoint after its peak cannot carry the LLC claim.")
    section.paragraph(f"Why these settings: {chosen.reason}.")
    points = stability_points(data.rules.llc_fall_at)
    section.key_values({"LLC estimator bias": bias_said(tables.llc_bias, tables.stability, data.rules,
                                                        "the LLC claim's test", points),
                        "added to": "every λ̂'s standard error, in quadrature (bias × λ̂)"},
                       "The LLC estimator's bias the rise and fall are weighed against.")
    stability_table(section, tables.stability, points)
    section.table(tables.llc[LLC_SHOWN], "Per traced run: the first valid, peak and last valid λ̂; rise (peak − start) "
                  "/ peak and fall (peak − final) / peak with their standard errors (the chains'), development's "
                  f"one-sided p of each, {errors_text(tables.llc_bias, data.rules)}; invalid: why the run's fall "
                  "cannot be read.", float_format="{:.3g}")
    for traced in tables.development:
        title = run_title(tables.runs, traced.run_id)
        section.figure(save_figure(plot_development(traced.loss, traced.llc, traced.boundaries, title),
                             figures / f"development_{traced.run_id}.png"), f"Test loss and LLC over training — {title}.")
        section.table(traced.stages, f"Stages by the LLC — {title}.")
        if traced.excluded:
            section.callout(f"Invalid estimates left out — {title}: {traced.exclusions()}", "warning")
        last = traced.llc[traced.llc.step == traced.llc.step.max()]
        if "loss_trace" in last.columns:
            section.figure(save_figure(plot_sgld_traces(last, f"SGLD chains at step {int(last.step.iloc[0])} — {title}"),
                                 figures / f"sgld_{traced.run_id}.png"),
                           f"Each chain's draw losses at the last checkpoint (dashed: the loss at w*) — {title}.")
        if traced.warnings:
            section.callout("SGLD diagnostics: " + " | ".join(said_once(traced.warnings)), "warning")


def _sensitivity_section(report: Report, sensitivity: pd.DataFrame) -> None:
    section = report.section("Sensitivity to the rules")
    section.paragraph("Each swept rule moved over its sweep values, the others at their values: the status of every "
                      "claim, by its id (as in the verdict table). A verdict that flips within a sweep rests on that "
                      "rule.")
    changes = flips(sensitivity)
    section.bullets(changes if changes else ["No verdict changes anywhere in its sweep."])
    section.table(status_table(sensitivity), "Claim statuses as each rule moves.", float_format="{:g}")


def _methods_section(report: Report, data: StudyData) -> None:
    settings = pd.Series(data.plan.settings)
    report.section("Methods: recipe and measures").bullets([
        f"Recipe: {', '.join(f'{k} {v}' for k, v in settings.items() if k != 'task')}; every run full-batch.",
        "Memorised, generalised, grokked, sparse and the logits' share: per run, by the thresholds of the rules below; "
        "the claims about runs count them and test the count exactly (binomial, or Fisher's test against the runs "
        "without weight decay).",
        "LLC: each traced grokked run against the run of the same fraction and seed without weight decay, on valid "
        f"estimates only. Stage rule: smoothing over {StageRule().window} checkpoints in log(step), as in the sorting "
        "study.",
        "Details and the reasons for each choice: docs/study-modular.md.",
    ])
