"""Writes the stacked-heads study's outputs: `results.csv`, `depth_table.csv`, `summary.json`, the
figures and the offline HTML report, section by section with the verdict on each claim."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from headway.plots.depth import plot_depth
from headway.plots.orders import plot_order_accuracy, varied_cells
from headway.plots.phase import plot_learning_curves, plot_phase_diagram
from headway.plots.probes import plot_probe_accuracy, plot_probe_reach
from headway.report.figures import fresh_figures
from headway.report.html import Report
from headway.files import check_replaceable
from headway.runs import layout
from headway.studies.base import RUNS, StudyData
from headway.studies.retrieval.figures import contrast_figure, emergence_figures, example_figures, pick_example
from headway.studies.retrieval.phase import cheapest_compositional
from headway.studies.retrieval.rules import FORMULATION, RetrievalRules
from headway.studies.retrieval.tables import FACETS, RetrievalTables, summary_json, tables_at
from headway.studies.retrieval.verdicts import CLAIMS, query_reach
from headway.studies.sensitivity import displayed, flips, sweep_texts, threshold_sensitivity
from headway.studies.verdict import (Verdict, decision_rule, methods_section, not_run, verdict_callouts,
                                     verdict_frame)
from headway.analysis.retrieval.mechanism import composing_heads
from headway.analysis.retrieval.probes import SAMPLES_PER_CLASS, SAMPLES_PER_FEATURE


def write_outputs(data: StudyData, tables: RetrievalTables, verdicts: list[Verdict], out: Path) -> Path:
    """Write every output of the study into `out` (its runs under `out/runs`); return the report's path."""
    figures = fresh_figures(out)
    layout.write_text(out / "results.csv", tables.results.to_csv(index=False))
    layout.write_text(out / "depth_table.csv", tables.depth.to_csv(index=False))
    for name, table in (("phase_table.csv", tables.phase), ("factor_table.csv", tables.factors),
                        ("order_table.csv", tables.orders), ("probe_order_table.csv", tables.probe_orders)):
        _write_or_clear(out / name, table)

    report = Report("Stacked attention heads on the retrieval problem",
                    f"headway study retrieval · scale `{data.plan.scale}` · {len(tables.final)} trained transformers")
    rules = data.rules
    sensitivity = threshold_sensitivity(CLAIMS, tables, rules, lambda changed: tables_at(data, tables, changed))
    shown, left_out = displayed(sensitivity, CLAIMS)
    unrun = not_run(CLAIMS, verdicts, rules)
    verdict_callouts(report, verdicts, "Each claim of the paper and its test (Methods). " + decision_rule(rules)
                     + " A claim that does not hold at this scale is shown as such; it is a result, not an error.",
                     sweep_texts(shown, verdicts), unrun)
    report.table(verdict_frame(verdicts), "Each claim's one-sided p-value, the family-wise level it was judged at "
                 "and, for a null result only, the power its design had to detect the stated effect (at the "
                 "strictest Holm level).", float_format="{:.3g}")
    _overview(report, data, tables.final)
    _depth_section(report, tables.depth, tables.minimal, figures, rules)
    _phase_section(report, data, tables, out / RUNS, figures)
    _order_section(report, tables, figures, rules)
    _factor_section(report, tables.factors, rules)
    _mechanism_section(report, out / RUNS, tables, figures)
    _emergence_section(report, tables, figures, rules)
    _probe_section(report, tables, figures, rules)
    _conditional_section(report, tables.minimal)
    _sensitivity_section(report, shown, left_out)
    _methods_section(report, rules)
    report.section("All runs").table(tables.results, "Per run: final accuracy, circuit, probe reach, emergence order.")
    layout.write_json(out / "summary.json", summary_json(data, tables, verdicts, sensitivity, unrun),
                      checked=False)  # an output, never read back
    return report.write(out / "report.html")


def _overview(report: Report, data: StudyData, final: pd.DataFrame) -> None:
    plan = data.plan
    report.section("Overview")
    report.paragraph(
        "Transformers are trained on the minimal retrieval formulation (K chains of D links among distractors; "
        "the query asks for the root of one chain) and every trained model is analysed: the depth it needs, "
        "which heads carry the answer and how they were found, when each head appears during training, and "
        "which hop distances are linearly decodable after each layer.")
    report.key_values({
        "scale": plan.scale, "runs": len(final), "ensembles": final.ensemble.nunique(),
        "depth grid": f"layers {list(plan.layers)} × hops {list(plan.hops)} × seeds {list(plan.seeds)} × "
                      f"curricula {list(plan.curricula)}",
        "variants": f"layout {list(plan.layouts)}, attention {list(plan.attentions)}, order {list(plan.orders)}",
        "conditional grid": (f"layers {list(plan.conditional_layers)} × hops {list(plan.conditional_hops)} × "
                             f"seeds {len(plan.conditional_seeds)}") if plan.conditional_hops else "not run",
        **{k: v for k, v in data.hardware.items()},
        "training time (sum over ensembles, as recorded when each finished)":
            f"{data.seconds['training_recorded_s']:.0f} s",
        "analysis time (sum over ensembles, as recorded)": f"{data.seconds['analysis_recorded_s']:.0f} s",
        "this invocation (training + analysis; finished work is reused)":
            f"{data.seconds['training_s'] + data.seconds['analysis_s']:.0f} s",
    }, "Study settings and hardware")


def _depth_section(report: Report, depth: pd.DataFrame, minimal: pd.DataFrame, figures: Path,
                   rules: RetrievalRules) -> None:
    report.section("Depth law")
    report.paragraph(
        "Final-hop validation accuracy per number of layers and hops, mean over seeds (± half the range). "
        "The red staircase is Theorem 1's bound ⌈log₃(2D)⌉; hatched cells have fewer layers than the bound that "
        "applies to their attention, order and layout (unreachable at that depth); grey cells were not trained. "
        f"A cell counts as solved at mean accuracy ≥ {rules.solved_accuracy:g}. Baselines: 1/V (a random symbol) "
        "and 1/K (a random chain root, reachable without retrieval; marked on the colour bar).")
    facets = [f for f in FACETS if f in depth.columns]
    for key, table in depth.groupby(facets):
        name = ", ".join(f"{f} {v}" for f, v in zip(facets, key))
        slug = "_".join(str(v) for v in key)
        part, curriculum, *_ = key  # the plot names the formulation from the table's columns
        path = plot_depth(table, figures / f"depth_{slug}.png",
                          title=f"Depth law: {part} task, {curriculum} curriculum")
        report.figure(path, f"Accuracy over layers × hops ({name}).")
    report.table(minimal, "Measured minimum depth per D (fewest layers whose mean accuracy is solved) beside "
                          "the bound ⌈log₃(2D)⌉; empty when no trained depth solved it.")


def _factor_section(report: Report, factors: pd.DataFrame, rules: RetrievalRules) -> None:
    """Which factor of the formulation elicits composition, where the grid trained two levels of one."""
    if factors.empty:
        return
    report.section("Which factor composes")
    report.paragraph(
        "Where the grid trains two levels of one factor (link order, supervision, attention) with the others held "
        "fixed, the runs of each D > L cell that solve it by composing links are counted per level and the levels "
        "compared by Fisher's exact test, two-sided (p: twice the smaller one-sided p). Power: the chance of "
        f"p ≤ {rules.alpha:g} if one level composed in {rules.effect_factor_high:.0%} of runs and the other in "
        f"{rules.effect_factor_low:.0%}; below {rules.power:g} a null result says nothing. These comparisons are "
        "headway's own question, not a claim of the paper, so they are not in the verdicts' Holm family. The same "
        "test on the runs that solve the cell by any mechanism, every run counted (solved_*, trained_*, p_solved), "
        "shows a level that solves by a route the classifier cannot certify.")
    report.table(factors, "Composing runs (solved and classed compositional; runs not classifiable left out) and "
                          "solving runs (all runs) per level of the factor compared.", float_format="{:.3g}")


def _phase_section(report: Report, data: StudyData, tables: RetrievalTables, runs_dir: Path, figures: Path) -> None:
    phase = tables.phase
    if phase.empty:
        return
    report.section("Depth phase diagram")
    report.paragraph(
        "Which formulations let L layers solve D > L hops. Each cell gives the mean final-hop accuracy, how many "
        "of its runs were classified compositional (comp: before the last layer its links decode hop 2 or beyond, "
        "over all links or over those the flow lets it reach in either direction, and mean-ablating the heads that "
        "compose them, at the links only, costs the answer more than ablating as many other heads of those layers, "
        "or, where they are every head of their layers, more at the queried chain's links than at another "
        "chain's), linear (lin: D ≤ L without such composition, so one hop per layer) "
        "or not classifiable (?: the final-layer query probe reads the answer well below the model's accuracy, "
        "or D > L is solved without established composition), and the share of link orders from which the information flow of its attention "
        "can reach the answer (`headway reach`, docs/depth-bound.md). A hatched cell is unreachable at its depth: "
        "even a perfect model that guesses a chain root where it cannot reach stays below the solved threshold, "
        "so failing there is not evidence against logarithmic depth. Grey cells were not trained; the colour "
        "bar marks 1/K, the accuracy of guessing a chain root without retrieval.")
    solved = data.rules.solved_accuracy
    path = plot_phase_diagram(phase, figures / "phase_diagram.png", solved)
    report.figure(path, "Depth phase diagram, one panel per formulation (the settings every panel shares are in "
                        "the title).")
    contrast = contrast_figure(tables.final, tables.mechanism_class, phase, figures, solved)
    if contrast is not None:
        path, cell = contrast
        report.figure(path, f"Link order × supervision with {cell.layers} layers: each seed's final-hop accuracy "
                            f"over hops, marked by its mechanism; shaded, D = {cell.hops}, the fewest hops beyond "
                            "one per layer that the information flow lets through.")
    beyond = phase[phase.beyond_linear & phase.solvable]
    if not beyond.empty:
        runs = data.metrics[data.metrics.run_id.isin(set(tables.final.run_id))]
        path = plot_learning_curves(runs[runs.curriculum == "ic"], beyond, figures / "phase_curves.png", solved)
        report.figure(path, "Final-hop accuracy against training steps in the solvable cells with D > L, one line "
                            "per seed: still rising at the end means the step budget, flat means the mechanism.")
    report.table(phase, "Per formulation and cell: accuracy over seeds, runs solved and their mechanism classes, "
                        "the median step at which solved runs first reached the threshold, the reachable fraction, "
                        "the accuracy ceiling and whether the cell is solvable at all.")
    run = cheapest_compositional(tables.final, tables.mechanism_class)
    if run is None:
        report.paragraph("No trained model was classified compositional, so there is no compositional circuit to show.")
        return
    heads = tables.heads
    composing = composing_heads(heads[heads.run_id == run.run_id], run.layers, data.rules.read_level)
    maps, diagram = example_figures(runs_dir, run, heads, figures, tag="compositional", also=composing)
    name = f"D = {run.hops} with {run.layers} layers ({', '.join(f'{c} {run[c]}' for c in FORMULATION)}, seed {run.seed})"
    report.paragraph(
        f"**The cheapest compositional solution found**: {name}. Its links decode hops {run.link_farthest} and "
        f"its query hops {run.farthest} after layers 1…{run.layers}; its links read {run.reads} before the last "
        f"layer (strongest head: {run.link_next:.2f} of its attention on the root-ward neighbour, "
        f"{run.link_prev:.2f} on the leaf-ward one); {_ablation_words(run)}.")
    _maps_figure(report, maps, "Attention maps of its circuit heads and of the heads that compose links (rows: "
                               "attending statement, columns: attended statement; red: the queried chain).")
    report.figure(diagram, "Its circuit, found automatically: roles per head, circuit heads outlined with their "
                           "mean-ablation accuracy drop Δ.")


def _ablation_words(run: pd.Series) -> str:
    """What ablating a run's composing heads cost, against the control that decided (`mechanism.CONTROLS`)."""
    if run.get("control") == "positions":
        return (f"mean-ablating its composing heads ({run.composing_heads}), every head of their layers, at the "
                f"queried chain's links costs {run.chain_drop:.2f} of accuracy, at another chain's links "
                f"{run.offchain_drop:.2f}")
    return (f"mean-ablating its composing heads ({run.composing_heads}) at the links costs {run.composing_drop:.2f} "
            f"of accuracy, as many other heads of their layers {run.control_drop:.2f}")


def _write_or_clear(path: Path, table: pd.DataFrame) -> None:
    """Write a table the grid may not have, or remove the one an earlier report left (it would describe other
    analyses); a device, FIFO or socket there is refused, never removed."""
    if not table.empty:
        layout.write_text(path, table.to_csv(index=False))
    elif path.is_symlink() or path.exists():
        check_replaceable(path)
        if path.is_symlink() or path.is_file():
            path.unlink()


def _order_section(report: Report, tables: RetrievalTables, figures: Path, rules: RetrievalRules) -> None:
    report.section("Accuracy per link order")
    if tables.orders.empty:
        report.paragraph("These runs were analysed before the per-order table existed (analysis version 6), and "
                         "their weights were not kept, so their accuracy is not split by link order here.")
        return
    report.paragraph(
        "Each model answered fresh examples (16384, about 140 per order at D = 5), split by the order in which the "
        "queried chain's links appear (`132`: the root link 1, then link 3, then link 2; beyond five hops by order "
        "class, `<` where a link's root-ward neighbour comes first). An order is reachable when the information "
        "flow of the model's attention brings x₀ to the query within its layers (`headway reach`). A cell's "
        "accuracy in the reachable orders weighs each order the same, so a failing class counts by the orders it "
        f"holds, not by its share of the examples; `solved_in_reachable` applies the solved level "
        f"({rules.solved_accuracy:g}) to it (docs/study-retrieval.md, \"Accuracy per link order\").")
    ic = tables.orders[(tables.orders.part == "plain") & (tables.orders.curriculum == "ic")]
    if not varied_cells(ic).empty:
        path = plot_order_accuracy(ic, figures / "order_accuracy.png")
        report.figure(path, "Final-hop accuracy per link order (IC runs), one row per seed; columns sorted by the "
                            "layers the flow needs in that order; hatched orders cannot be answered at the cell's "
                            "depth.")
    report.table(tables.order_runs, "Per run: order rows, those reachable at its depth, the fewest examples of a "
                                    "row, mean accuracy over reachable and over unreachable orders, the share of "
                                    "reachable orders solved and the worst reachable order.")
    if not tables.probe_orders.empty:
        report.paragraph(
            "`probe_order_table.csv` reads the flow-gated link probes (Depth probes) per order class of each link's "
            "chain and its link number, held out: whether the links of a failing class hold, after each layer, "
            "the root-ward and leaf-ward hops the flow lets them hold there (a row exists only where it does).")


def _maps_figure(report: Report, maps: Path | None, caption: str) -> None:
    """An attention-map figure, or why there is none: a published folder keeps no checkpoints to draw from."""
    if maps is None:
        report.paragraph("Attention maps need the run's weights, and this folder keeps no checkpoints (a published "
                         "copy of a study); the study folder that trained the runs draws them.")
    else:
        report.figure(maps, caption)


def _mechanism_section(report: Report, runs_dir: Path, tables: RetrievalTables, figures: Path) -> None:
    final, heads, mechanism = tables.final, tables.heads, tables.mechanism
    report.section("Mechanism, found automatically")
    report.paragraph(
        "Every head of every model is scored from its attention on fixed examples (where attention from the "
        "query and from each link lands along the chain) and checked causally by zero ablation, mean ablation "
        "and activation patching from root-swapped examples. The rule in Methods turns scores and effects "
        "into roles; the circuit is the set of heads it names.")
    for part in ("plain", "conditional"):
        run = pick_example(final, part)
        if run is None:
            continue
        maps, diagram = example_figures(runs_dir, run, heads, figures)
        _maps_figure(report, maps, f"Attention maps of the circuit heads of one {part} model on one example "
                                   "(rows: attending statement, columns: attended statement).")
        report.figure(diagram, f"Circuit diagram of the same {part} model: roles per head, circuit heads "
                               "outlined with their mean-ablation accuracy drop Δ.")
    solved = mechanism[mechanism.solved]
    summary = (solved.groupby([*FACETS, "hops", "layers"])
               .agg(runs=("run_id", "size"), circuit_heads=("circuit_heads", "mean"),
                    minimal_heads=("minimal_heads", "mean"),
                    clean=("val_accuracy", "mean"), circuit_ablated=("circuit_ablated_accuracy", "mean"),
                    circuit_resampled=("circuit_resample_accuracy", "mean"),
                    random_ablated=("random_ablated_accuracy", "mean"),
                    faithfulness=("faithfulness", "mean"), random_rest=("random_rest_accuracy", "mean"),
                    p_necessary=("p_necessary", "max"), p_sufficient=("p_sufficient", "max"),
                    max_other_head_drop=("max_other_head_drop", "max"),
                    carries_answer=("circuit_carries_answer", "mean"),
                    common_roles=("circuit_roles", lambda s: s.value_counts().index[0]))
               .reset_index())
    report.table(summary, "Solved runs per cell: circuit size and its minimal sufficient subset; accuracy with the "
                          "circuit mean- and resample-ablated beside random head sets of the same size; faithfulness "
                          "of the circuit alone (everything else mean-ablated) and the accuracy random sets keep "
                          "alone; the largest p-values against the random sets; the costliest single head outside "
                          "the circuit; the share of runs whose circuit passes every check; the most common circuit.")
    if not tables.paths.empty:
        report.paragraph(
            "**Path patching.** The circuit heads of layer t−1 get their outputs from another example only along "
            "the path into the circuit heads of layer t (their queries, keys and values, or one of them); the "
            "accuracy lost says that layer t reads what layer t−1 wrote. Beside it: the same heads resampled along "
            "every path, and patched into the other heads of layer t instead (the null).")
        paths = (tables.paths[tables.paths.solved]
                 .pivot_table(index=["hops", "layers", "receiver_layer"], columns="channel", values="path_drop")
                 .add_prefix("path_drop_").reset_index())
        direct = (tables.paths[tables.paths.solved & (tables.paths.channel == "qkv")]
                  .groupby(["hops", "layers", "receiver_layer"])
                  .agg(direct_drop=("direct_drop", "mean"), other_drop=("other_drop", "mean")).reset_index())
        report.table(paths.merge(direct, on=["hops", "layers", "receiver_layer"]),
                     "Mean accuracy lost per solved cell and receiving layer (0-based), by channel.")


def _emergence_section(report: Report, tables: RetrievalTables, figures: Path, rules: RetrievalRules) -> None:
    emergence, hop_emergence = tables.emergence, tables.hop_emergence
    report.section("Emergence over training")
    report.paragraph(
        "For each solved IC run, each circuit group's role score (its best head at every checkpoint) and the "
        "per-hop validation accuracy. A unit emerges at the first checkpoint from which its score stays at or "
        f"above {rules.emergence_fraction:g} of the way from its initial to its final value (no emergence when it "
        f"rises by less than {rules.emergence_rise:g}). Consistency across seeds: share of seeds with the most common "
        "order and Kendall τ between seeds; the order tests count the seeds whose units emerged at distinct "
        "checkpoints (`order_seeds`) and those in the tested order (`agreeing_seeds`).")
    for figure, (cell, units) in emergence_figures(tables.final, tables.curves, tables.hops, figures,
                                                      rules.emergence_fraction, rules.emergence_rise).items():
        report.figure(figure, f"{units} over training, per seed ({cell.part} task, D={cell.hops}, {cell.layers} "
                              "layers: the solved multi-hop cell with the most seeds); dashed: emergence step.")
    if not emergence.empty:
        report.table(emergence, "Emergence order of the circuit groups per cell (solved IC runs).")
    if not hop_emergence.empty:
        report.table(hop_emergence, "Emergence order of the hops per cell (solved IC runs).")


def _probe_section(report: Report, tables: RetrievalTables, figures: Path, rules: RetrievalRules) -> None:
    final, reach, probes = tables.final, tables.reach, tables.probes
    report.section("Depth probes (Theorem 1 made empirical)")
    report.paragraph(
        "After each layer, a linear probe (ridge regression onto one-hot symbols, held-out examples) decodes "
        "the symbol k hops down the chain, at the query and at every chain link. Reach is the largest k "
        f"decodable with accuracy ≥ {rules.reach_accuracy:g} for every k' ≤ k. Theorem 1 allows the query to reach "
        "at most ⌊3ᵗ/2⌋ hops after t layers.")
    plain = final[(final.part == "plain") & (final.curriculum == "ic")]
    if plain.empty or reach.empty:
        return
    deepest = plain[(plain.layers == plain.layers.max()) & (plain.hops == plain.hops.max())]
    ids = set(deepest.run_id)
    path = plot_probe_reach(reach[reach.run_id.isin(ids)], figures / "probe_reach.png")
    report.figure(path, f"Reach per layer for D={deepest.hops.max()}, {deepest.layers.max()} layers "
                        "(mean over seeds, min–max bars) against ⌊3ᵗ/2⌋ and 3ᵗ.")
    path = plot_probe_accuracy(probes[probes.run_id.isin(ids)], figures / "probe_accuracy.png")
    report.figure(path, "Probe accuracy per layer × hop distance at the query and at links (same runs).")
    table = (query_reach(final, reach).merge(plain[["run_id", "hops", "layers"]], on="run_id")
             .groupby(["hops", "layers", "layer"]).agg(reach_mean=("reach", "mean"), reach_min=("reach", "min"),
                                                        reach_max=("reach", "max"),
                                                        bound=("bound_theorem", "first")).reset_index())
    report.table(table, "Query reach per trained model shape and layer (IC, plain task).")


def _conditional_section(report: Report, minimal: pd.DataFrame) -> None:
    conditional = minimal[minimal.part == "conditional"]
    if conditional.empty:
        return
    report.section("Conditional retrieval")
    report.paragraph(
        "The same pipeline on the conditional variant (links carry a relation; each entity's class and the "
        "in-context rules select the relation to follow). Its depth heat-map is in the Depth law section, its "
        "circuit figures (when a model solved it) in the Mechanism section.")
    report.table(conditional, "Conditional task: measured minimum depth per D beside the bound.")


def _sensitivity_section(report: Report, sensitivity: pd.DataFrame, left_out: list[str]) -> None:
    """The sweep as `displayed` leaves it, and why a claim is left out of a rule's sweep."""
    if sensitivity.empty:
        return
    report.section("Threshold sensitivity")
    report.paragraph(
        "Every claim judged again (with the study-wide correction) at each value of each rule's sweep, the other "
        "rules at the study's values (marked default); claims are named by their id. The rules' values come from "
        "chance levels and the task's structure (Methods); the sweep shows how much each verdict depends on them. "
        "Power is shown for null results only. The circuit-naming rules rename the circuit, whose random-set null needs the models' "
        "forwards and was measured at the study's values only: away from them the circuit claim could only be "
        "not testable for want of a null, so its sweep over those rules is not shown. The table shows each claim "
        "over the rules it rests on (its test, evidence or p changes in their sweep); summary.json holds every "
        "claim at every value.")
    changes = flips(sensitivity)
    report.bullets([*(changes or ["No verdict changes anywhere in its sweep."]), *left_out])
    report.table(sensitivity[sensitivity.rests].drop(columns="rests"), "Verdict status, p-value and power (null "
                 "results only) per rule value, and why a claim is not testable there.", float_format="{:.3g}")


def _methods_section(report: Report, rules: RetrievalRules) -> None:
    score_text = ("**Head scores** (attention on 1024 fixed examples): `query_hop{j}` = attention from the query "
                  "to the queried chain's hop-j link; `link_next` / `link_prev` = attention from a chain link to the "
                  "next link towards / away from the root (only pairs the causal mask lets it see); conditional: "
                  "`query_class`, `query_rule`.")
    causal_text = ("**Causal checks**: zero ablation and mean ablation of the head's output (`hook_z`), and "
                   "patching it from a root-swapped example (the answer exchanged with another chain's root "
                   "everywhere); the accuracy drop, and the share of answers flipped to the swapped root.")
    drop = rules.circuit_drop
    circuit_text = (f"**Circuit**: heads whose mean ablation alone costs ≥ {drop:g} accuracy, plus heads with a role "
                    f"whose (layer, role) group, ablated together, costs ≥ {drop:g} (redundant heads) and that the "
                    f"group cannot lose without losing ≥ {drop:g} (a head that does nothing stays out). **Checks**: "
                    f"necessity (circuit ablated → chance + {rules.necessary_margin:g}), sufficiency (faithfulness ≥ "
                    f"{rules.sufficient_faithfulness:g} with everything else ablated), a minimal sufficient subset by "
                    f"greedy elimination, and {rules.random_sets} random head sets of the same size kept alone as the "
                    f"null for sufficiency (p ≤ {rules.random_set_level:g}).")
    emergence_text = (f"**Emergence step**: the first checkpoint from which the score stays ≥ initial + "
                      f"{rules.emergence_fraction:g} (final − initial); none if it rises by less than "
                      f"{rules.emergence_rise:g}.")
    probe_text = ("**Probes**: ridge regression (λ = 0.01 per sample, standardised features) onto one-hot symbols; "
                  f"70/30 split by example, on enough examples that the query probe trains on ≥ {SAMPLES_PER_FEATURE} "
                  f"samples per feature and ≥ {SAMPLES_PER_CLASS} per symbol; train and held-out accuracy per probe; "
                  f"reach threshold {rules.reach_accuracy:g}. **Mechanism**: compositional needs links decoding hop ≥ 2 "
                  f"before the last layer and the composing heads' ablation at links costing ≥ "
                  f"{rules.composition_margin:g} beyond a control; a model whose final query probe for hop D reads more "
                  f"than {rules.probe_gap:g} below its accuracy is not classifiable.")
    report.section("Methods")
    report.bullets([score_text, f"**Role**: the largest score if ≥ {rules.role_score:g}, else none.", causal_text,
                    circuit_text, emergence_text, probe_text,
                    "Details and the reasons behind each choice: `docs/study-retrieval.md` in the headway repository."])
    methods_section(report, rules)
