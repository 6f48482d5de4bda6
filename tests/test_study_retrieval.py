"""The stacked-heads study end to end at CPU scale on a small grid, through the command line."""

from __future__ import annotations

import base64
import json

import numpy as np
import pandas as pd
import pytest

from headway.cli.main import main
from headway.errors import ConfigError
from headway.runs import layout
from headway.studies.retrieval.plan import RetrievalPlan, gpu_projection, study_plan
from headway.studies.retrieval.rules import RetrievalRules
from headway.studies.retrieval.verdicts import CIRCUIT_CLAIM, COMPOSITION_CLAIM, DEPTH_CLAIM, REACH_CLAIM, STACKED_CLAIM

pytestmark = pytest.mark.slow
ARGS = ["study", "retrieval", "--scale", "cpu", "--layers", "1,2", "--hops", "1,2", "--seed", "0,1",
        "--curriculum", "ic", "--conditional-hops", "none", "--steps", "1000", "--no-progress", "--device", "cpu"]


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    out = tmp_path_factory.mktemp("study")
    assert main([*ARGS, "--out", str(out)]) == 0
    return out


def test_the_small_grid_measures_each_depth_but_cannot_test_the_law(study):
    """D = 1 and 2 are solved at the bound, but one hop per layer predicts the same: not testable."""
    summary = json.loads((study / "summary.json").read_text())
    minimum = {row["hops"]: row["measured_min_layers"] for row in summary["minimum_depth"]}
    assert minimum == {1: 1, 2: 2}
    verdicts = {v["claim"]: v for v in summary["verdicts"]}
    depth = verdicts[DEPTH_CLAIM]
    assert depth["status"] == "not testable" and "D=2: measured 2, bound 2 (not discriminating" in depth["evidence"]


def test_the_phase_diagram_classifies_every_solved_model_and_cannot_test_composition_here(study):
    """No cell has D > L and a reachable answer (one layer reaches 0% of two-hop orders), so the
    composition claim is not testable; the solved models take one hop per layer: linear."""
    phase = pd.read_csv(study / "phase_table.csv").set_index(["layers", "hops"])
    assert phase.loc[(1, 2), "reachable"] == 0.0 and not phase.loc[(1, 2), "solvable"]
    assert phase.loc[(2, 2), "reachable"] == 1.0 and phase.loc[(2, 2), "solved"]
    results = pd.read_csv(study / "results.csv")
    assert set(results[results.solved].mechanism) == {"linear"}
    assert set(results[~results.solved].mechanism) <= {"unsolved"}
    verdicts = {v["claim"]: v for v in json.loads((study / "summary.json").read_text())["verdicts"]}
    assert verdicts[COMPOSITION_CLAIM]["status"] == "not testable"
    assert (study / "figures" / "phase_diagram.png").is_file()


def test_named_heads_carry_the_answer_and_no_other_head_matters(study):
    results = pd.read_csv(study / "results.csv")
    assert len(results) == 8
    solved = results[results.solved]
    assert len(solved) >= 6  # D=1 at both depths and D=2 with two layers, both seeds
    assert (solved.circuit_heads >= 1).all()
    assert (solved.circuit_ablated_accuracy <= solved.chance + 0.1).all()
    assert (solved.max_other_head_drop < 0.05).all()
    two_hop = solved[(solved.hops == 2) & (solved.layers == 2)]
    assert len(two_hop) == 2
    assert two_hop.circuit_roles.str.contains("L2 query→hop").all()  # the last layer reads at the query
    assert (two_hop.query_reach_per_layer.str.split().str[-1].astype(int) == 2).all()
    assert (solved.faithfulness >= 0.8).all() and (solved.minimal_heads <= solved.circuit_heads).all()
    every_head = solved[solved.circuit_heads == solved.layers * 4]  # 4 heads per layer at this scale
    assert len(every_head) and (every_head.p_sufficient == 1.0).all()  # every random set of that size is the circuit


def test_the_verdicts_never_count_an_untestable_case_as_a_refutation(study):
    """At this scale circuits hold (nearly) every head, the last layer's circuit holds every head of it (no
    control for path patching) and no model can reach beyond one hop per layer with D ≤ 2: those claims are
    not testable, never "not reproduced"; every verdict carries its test, p-value, level and power."""
    summary = json.loads((study / "summary.json").read_text())
    verdicts = {v["claim"]: v for v in summary["verdicts"]}
    reach = verdicts[REACH_CLAIM]
    assert reach["status"] == "not testable" and "none with D ≥ 3" in reach["evidence"]
    stacked = verdicts[STACKED_CLAIM]
    assert stacked["status"] == "not testable" and "without a control" in stacked["evidence"]
    circuit = verdicts[CIRCUIT_CLAIM]
    assert circuit["status"] != "not reproduced" and "Left out as unable to beat their null" in circuit["evidence"]
    for verdict in summary["verdicts"]:
        assert verdict["evidence"].startswith("Test: ")
        if verdict["status"] != "not testable":
            assert verdict["alpha"] == 0.05 and None not in (verdict["p_value"], verdict["power"])
    assert summary["rules"]["solved_accuracy"] == 0.9 and summary["rules"]["random_sets"] == 49


def test_threshold_sweeps_show_where_each_verdict_flips(study):
    sweep = pd.DataFrame(json.loads((study / "summary.json").read_text())["threshold_sensitivity"])
    assert {"claim", "rule", "value", "default", "status", "p_value", "power", "rests"} <= set(sweep.columns)
    assert set(sweep.rule) <= set(RetrievalRules().sweeps())
    assert sweep.groupby(["claim", "rule"]).default.sum().eq(1).all()  # each sweep marks its default once
    naming = sweep[sweep.rule.isin(["role_score", "circuit_drop"]) & sweep.rests]
    assert len(naming) == 8 and set(naming.claim) == {"circuit"}
    assert (naming[~naming.default].status == "not testable").all()  # no random-set null away from the rule
    html = (study / "report.html").read_text()
    assert "Threshold sensitivity" in html and "Path patching" in html and "Methods: the rules" in html


def test_report_embeds_every_figure(study):
    html = (study / "report.html").read_text()
    figures = sorted((study / "figures").glob("*.png"))
    names = {f.stem for f in figures}
    assert {"depth_plain_ic_packed_causal_shuffled_query", "phase_diagram", "attention_plain", "circuit_plain",
            "emergence_heads", "emergence_hops", "probe_reach", "probe_accuracy"} <= names
    assert html.count('src="data:image/png;base64,') == len(figures)
    for figure in figures:
        assert base64.b64encode(figure.read_bytes()).decode() in html
    assert "http://" not in html and "https://" not in html
    assert "Claims checked" in html


def test_rerun_reuses_runs_and_analyses(study, capsys):
    before = {p: p.stat().st_mtime_ns for p in (study / "runs").rglob("*.safetensors")}
    done = {p: p.stat().st_mtime_ns for p in (study / "analysis").rglob("done.json")}
    assert main([*ARGS, "--out", str(study)]) == 0
    assert before == {p: p.stat().st_mtime_ns for p in (study / "runs").rglob("*.safetensors")}
    assert done == {p: p.stat().st_mtime_ns for p in (study / "analysis").rglob("done.json")}
    # a table deleted (say, because it was refused as damaged) has its ensemble analysed again, and only that one
    lost = sorted((study / "analysis").rglob("paths.parquet"))[0]
    lost.unlink()
    assert main([*ARGS, "--out", str(study)]) == 0
    assert lost.is_file()
    again = {p: p.stat().st_mtime_ns for p in (study / "analysis").rglob("done.json")}
    assert {p for p in again if again[p] != done[p]} == {lost.parent / "done.json"}


def test_plans_refuse_bad_axes():
    with pytest.raises(ConfigError, match="curricula value 'sometimes'"):
        RetrievalPlan(curricula=("sometimes",))
    with pytest.raises(ConfigError, match="scale = 'huge'"):
        study_plan("huge")
    cpu = study_plan("cpu")
    contrast = {(r.task.curriculum, r.task.hops) for r in cpu.depth_runs()}
    assert contrast == {("ic", 1), ("ic", 2), ("ic", 3), ("none", 2)}
    assert {r.task.curriculum for r in cpu.with_overrides(contrast_hops=()).depth_runs() if r.task.hops == 3} == {
        "ic", "none"}
    paper = study_plan("paper")
    assert (len(paper.seeds), max(paper.layers), paper.depth_base.get("steps", 10_000)) == (8, 8, 10_000)
    second = paper.conditional_runs()[0]
    assert (len(paper.conditional_seeds), second.train.steps, second.train.batch_size, second.train.train_size,
            second.task.curriculum) == (64, 24_000, 128, 2**18, "ic")


def test_the_gpu_plan_trains_the_separating_cells_in_about_an_hour_of_one_h100():
    """Budget (docs/study-retrieval.md): 4e16–8e16 training FLOPs, and 45–80 min projected with the analysis and
    each ensemble's overhead at the rates measured on an H100 and an H200 (a step of these small ensembles is bound
    by kernel latency)."""
    plan = study_plan("gpu")
    projected = gpu_projection(plan)
    assert 4e16 <= projected["training_flops"] <= 8e16
    assert 45 * 60 <= projected["total_s"] <= 80 * 60
    cells = {(r.task.order, r.task.supervision, r.model.layers, r.task.hops) for r in plan.depth_runs()}
    wanted = {(layers, hops) for layers in (2, 3) for hops in (3, 4, 5)}
    for formulation in [("chain", "dense"), ("shuffled", "dense"), ("shuffled", "query")]:
        assert wanted <= {cell[2:] for cell in cells if cell[:2] == formulation}
    depth = plan.depth_runs()
    assert min(r.train.steps for r in depth) >= 5000 and len(plan.seeds) >= 4
    assert {(r.model.attention, r.task.curriculum) for r in depth} == {("causal", "ic"), ("bidirectional", "ic")}
    bound = {(r.model.layers, r.task.hops, r.task.vocab, r.task.order, r.task.supervision)
             for r in depth if r.model.attention == "bidirectional"}
    assert bound == {(2, 4, 24, "shuffled", "dense"), (3, 9, 40, "shuffled", "dense")}  # Theorem 1's exact bound
    conditional = plan.conditional_runs()
    assert {(r.model.attention, r.model.d_model) for r in conditional} == {("bidirectional", 128)}
    assert 4 in {r.model.layers for r in conditional} and min(r.train.steps for r in conditional) >= 12_000


def test_bound_cells_sit_at_theorem_1s_depth_with_room_for_their_symbols_and_never_twice():
    plan = study_plan("cpu").with_overrides(bound_hops=(1, 4, 9), seeds=(0, 1), hops=(4,), layers=(2,),
                                            attentions=("bidirectional",), supervisions=("dense",), curricula=("ic",)
                                            ).with_settings(vocab=20)
    bound = plan.bound_runs()
    assert [(r.model.layers, r.task.hops, r.task.vocab) for r in bound[::2]] == [(1, 1, 20), (2, 4, 20), (3, 9, 40)]
    assert {(r.model.attention, r.task.order, r.task.supervision) for r in bound} == {
        ("bidirectional", "shuffled", "dense")}
    grid = [r for r in plan.depth_runs() if r not in bound]
    assert len(plan.depth_runs()) == 6 and len({r.run_id for r in plan.depth_runs()}) == 6  # D = 4 is a grid cell
    assert all(r.task.vocab == 20 for r in grid)
    assert study_plan("cpu").bound_runs() == []


def test_bad_study_option_is_one_line(tmp_path, capsys):
    assert main(["study", "retrieval", "--out", str(tmp_path), "--layout", "zigzag"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("headway: error:") and "zigzag" in err and len(err.splitlines()) == 1


def test_dry_run_prints_the_cost_and_trains_nothing(tmp_path, capsys):
    out = tmp_path / "study"
    assert main(["study", "retrieval", "--scale", "paper", "--out", str(out), "--dry-run"]) == 0
    text = capsys.readouterr().out
    assert "depth: 704 runs in 88 ensemble(s)" in text and "conditional: 768 runs in 12 ensemble(s)" in text
    assert not out.exists()
    assert main(["study", "retrieval", "--out", str(out), "--hops", "1..5", "--vocab", "24", "--dry-run"]) == 0
    assert "depth: 54 runs in 18 ensemble(s)" in capsys.readouterr().out


def test_accuracy_is_split_by_link_order_beside_what_the_flow_allows(study):
    """Two hops need two causal layers in either order: one layer reaches no order, so its runs have no reachable
    accuracy (missing, not zero) and the two-layer runs are solved in every order."""
    orders = pd.read_csv(study / "order_table.csv", dtype={"link_order": str})
    assert (orders.groupby("run_id").examples.sum() == 16384).all()
    assert set(orders[orders.hops == 2].link_order) == {"12", "21"} and set(orders[orders.hops == 1].link_order) == {"1"}
    assert (orders[(orders.hops == 2) & (orders.layers == 1)].reachable == 0).all()
    assert (orders[orders.layers >= orders.hops].reachable == 1).all()
    results = pd.read_csv(study / "results.csv")
    one_layer = results[(results.hops == 2) & (results.layers == 1)]
    assert one_layer.reachable_accuracy.isna().all() and (one_layer.unreachable_accuracy < 0.6).all()
    two = results[(results.hops == 2) & (results.layers == 2)]
    assert (two.reachable_accuracy >= 0.9).all() and (two.reachable_orders_solved == 1.0).all()
    two_hop = orders[(orders.hops == 2) & (orders.layers == 2)]
    assert (two_hop.hop1_accuracy >= 0.9).all() and np.allclose(two_hop.hop2_accuracy, two_hop.accuracy)
    assert orders[orders.hops == 1].hop2_accuracy.isna().all()
    assert (two_hop.rootward_reachable == 1.0).all()  # the query reads root-ward: two hops need no leaf-ward read
    reads = pd.read_csv(study / "results.csv", dtype={"leafward_read_per_layer": str}).leafward_read_per_layer
    assert (reads.str.split().str.len() == results.layers).all()
    assert set(reads[results.hops == 1]) <= {"–", "– –"}  # one link has no neighbour to read
    phase = pd.read_csv(study / "phase_table.csv").set_index(["layers", "hops"])
    assert phase.loc[(2, 2), "solved_in_reachable"] == True  # noqa: E712 (a nullable column read back)
    assert pd.isna(phase.loc[(1, 2), "solved_in_reachable"])
    html = (study / "report.html").read_text()
    assert "Accuracy per link order" in html and (study / "figures" / "order_accuracy.png").is_file()
    probed = pd.read_csv(study / "probe_order_table.csv", keep_default_na=False)  # gated link probes per order class
    assert set(probed.site) == {"link_rootward", "link_leafward"} and set(probed.run_id) <= set(results.run_id)
    assert set(probed[probed.hops == 2].order_class) <= {"<", ">"} and set(probed[probed.hops == 1].order_class) == {""}
    assert (probed.probe_hops <= probed.hops).all() and (probed.link <= probed.hops).all()


def test_an_analysis_from_before_the_order_table_is_read_without_it(study, tmp_path, capsys):
    """Results whose weights were not kept cannot be analysed again: a version-6 analysis stays current, its
    order table reads as missing, and the report says so instead of leaving an old table behind."""
    import shutil

    copy = tmp_path / "old"
    shutil.copytree(study, copy)
    for done in (copy / "analysis").rglob("done.json"):
        (done.parent / "orders.parquet").unlink()
        (done.parent / "probe_orders.parquet").unlink()
        layout.write_json(done, {**layout.read_json(done), "version": 6})
    for weights in (copy / "runs").rglob("*.safetensors"):
        weights.unlink()  # analysing again would now fail: the test proves it is not attempted
    assert main([*ARGS, "--out", str(copy)]) == 0
    assert not (copy / "order_table.csv").exists() and not (copy / "probe_order_table.csv").exists()
    assert "analysed before the per-order table existed" in (copy / "report.html").read_text()
    phase = pd.read_csv(copy / "phase_table.csv")
    assert phase.solved_in_reachable.isna().all() and phase.reachable_accuracy.isna().all()
