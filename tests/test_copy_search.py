"""The copy-suppression search (`headway study copy_search`, headway.studies.copy_search): a hand-set
copy/suppress model is counted, the per-condition test says found / absent / not testable as its power allows,
conditions are variant specs refused in one line when wrong, and a tiny search trains, resumes, classifies at an
earlier step and writes its tables; the committed search re-judges to the verdicts it committed."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import torch

from headway.cli.main import main
from headway.errors import ConfigError
from headway.model.config import ModelConfig
from headway.model.transformer import EnsembleTransformer
from headway.runs import layout
from headway.studies.copy_search.plan import SearchPlan
from headway.studies.copy_search.report import rejudge, write_tables
from headway.studies.copy_search.rules import SearchRules
from headway.studies.copy_search.study import CopySearchStudy, model_modes
from headway.studies.copy_search.tables import fractions, screen_ranking
from headway.studies.copy_search.verdicts import condition_tests, search_findings
from headway.studies.verdict import judge
from headway.tasks.sorting import SortingConfig

RULES = SearchRules()
TASK = SortingConfig(length=6, values=21)
V = TASK.values
ROOT = Path(__file__).resolve().parents[1]
# A tiny recipe over the sorting model's shape (1 layer, attention-only): seconds to train.
TINY = {"task": "sorting", "length": 6, "values": 21, "layers": 1, "heads": 2, "d_model": 16, "d_mlp": 0,
        "batch_size": 32, "steps": 20, "train_size": 1024, "val_size": 128, "eval_every": 10,
        "checkpoint_every": 10, "log_checkpoints": 3, "weight_decay": 0.005}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: a second thread only slows them


def _noise(seed: int, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)) * scale


def _hand_model() -> EnsembleTransformer:
    """2 instances, 2 heads, LayerNorm on, one-hot token embeddings: instance 0 has head 0 copying the
    low half and head 1 the high half (splitting); instance 1 has head 0 copying every number and
    head 1, with the same QK weights, suppressing every number (copy-suppression)."""
    d = 32
    model = EnsembleTransformer(ModelConfig(layers=1, heads=2, d_model=d, d_head=d, d_mlp=0), TASK.d_vocab,
                                TASK.n_ctx, TASK.d_out, 2)
    keep = [[range(10), range(10, V)], [range(V), range(V)]]
    sign = [[1, 1], [1, -1]]
    with torch.no_grad():
        model.embed.W_E[:, :, : TASK.d_vocab] = torch.eye(TASK.d_vocab)
        model.pos_embed.W_pos[:, :, TASK.d_vocab :] = _noise(1, 2, TASK.n_ctx, d - TASK.d_vocab)
        model.unembed.W_U[:, :V, :V] = torch.eye(V)
        attn = model.blocks[0].attn
        attn.W_Q.copy_(_noise(2, 2, 2, d, d, scale=0.2))
        attn.W_K.copy_(_noise(3, 2, 2, d, d, scale=0.2))
        attn.W_Q[1, 1], attn.W_K[1, 1] = attn.W_Q[1, 0], attn.W_K[1, 0]
        for e in range(2):
            for h in range(2):
                diagonal = torch.zeros(d)
                diagonal[list(keep[e][h])] = 1.0
                attn.W_V[e, h] = torch.diag(diagonal)
                attn.W_O[e, h] = sign[e][h] * torch.eye(d)
    return model


def _table(modes: list[str], condition: str = "c", accuracy: float = 1.0) -> pd.DataFrame:
    return pd.DataFrame({"condition": condition, "mode": modes, "val_accuracy": accuracy, "mean_gap": 2.0,
                         "weight_decay": 0.005})


def test_a_hand_set_copy_suppression_model_is_classified_and_counted():
    modes = model_modes(_hand_model(), TASK, 200, RULES)
    assert modes["mode"].tolist() == ["splitting", "copy_suppression"]
    assert (modes.copier.iloc[1], modes.suppressor.iloc[1]) == (0, 1)
    assert modes.cs_at_copy.isna().iloc[0] and modes.cs_at_copy.iloc[1] == 2.0  # CS at every copy threshold swept
    assert modes.min_diagonal_score.iloc[0] > -1.0 and modes.min_diagonal_score.iloc[1] < -3.5
    # the suppressor is the copier with the sign flipped: it removes all of the copier's effect, at every gap
    cs = modes.iloc[1]
    assert (cs.suppression, cs.suppressed_share) == (pytest.approx(1.0), 1.0)
    assert [cs.removed_all, cs.removed_near, cs.removed_far] == pytest.approx([1.0, 1.0, 1.0])
    assert modes.removed_all.iloc[0] < 0  # a splitter's other head adds to the correct number, removes nothing
    table = pd.concat([_table([m], "hand") for m in modes["mode"]], ignore_index=True)
    shares = fractions(table, RULES).set_index("mode")
    assert shares.loc["copy_suppression", "count"] == 1 and shares.loc["copy_suppression", "n"] == 2
    assert shares.loc["copy_suppression", "ci_low"] < 0.5 < shares.loc["copy_suppression", "ci_high"]
    tests = condition_tests(table, RULES)
    assert tests.copy_suppression.tolist() == [1]


def test_the_conditions_are_judged_together_and_refuted_only_with_power():
    table = pd.concat([_table(["copy_suppression"] * 4 + ["splitting"] * 4, "found"),
                       _table(["splitting"] * 8, "absent"),
                       _table(["splitting"] * 3, "few"),
                       _table(["copy_suppression"] * 3, "unlearned", accuracy=0.5)], ignore_index=True)
    tests = condition_tests(table, RULES).set_index("condition")
    # 3 testable conditions: the strictest Holm level is 0.05 / 3; 8 learned seeds need 3 CS models (power 0.86
    # at rate 0.5), 3 seeds cannot reach that level at all
    assert tests.status.to_dict() == {"found": "reproduced", "absent": "not reproduced", "few": "not testable",
                                      "unlearned": "not testable"}
    assert tests.loc["absent", "critical"] == 3 and tests.loc["absent", "power"] == pytest.approx(0.855, abs=1e-3)
    assert tests.loc["found", "p_value"] == pytest.approx(1 - sum(
        __import__("math").comb(8, i) * 0.05 ** i * 0.95 ** (8 - i) for i in range(4)))
    assert tests.loc["unlearned", "learned"] == 0 and tests.loc["unlearned", "runs"] == 3
    alone = condition_tests(_table(["splitting"] * 4, "absent"), RULES)  # 4 seeds: 2 needed at α, power 0.69 at rate 0.5
    assert alone.status.tolist() == ["not testable"] and alone.power.iloc[0] == pytest.approx(11 / 16)
    rare = condition_tests(_table(["copy_suppression"] + ["splitting"] * 15), RULES)
    assert rare.status.tolist() == ["not reproduced"]  # one in 16 is not above a rare rate, and 16 runs had power


def test_a_tiny_search_trains_resumes_classifies_and_writes_its_tables(tmp_path):
    plan = SearchPlan("cpu", conditions=("distinct", "repeats+weight_decay=0"), seeds=(0, 1), settings=TINY,
                      examples=100)
    assert list(plan.grids()) == ["distinct", "repeats+weight_decay=0"]
    report = CopySearchStudy(plan, tmp_path, device="cpu", progress=False).run()
    ensembles = layout.ensemble_dirs(tmp_path / "runs")
    stamp = {p: p.stat().st_mtime_ns for d in ensembles for p in (d / "checkpoints").iterdir()}
    analysed = {p: p.stat().st_mtime_ns for p in (tmp_path / "analysis").rglob("*.parquet")}
    CopySearchStudy(plan, tmp_path, device="cpu", progress=False).run()  # done: nothing trained or analysed again
    assert {p: p.stat().st_mtime_ns for d in ensembles for p in (d / "checkpoints").iterdir()} == stamp
    assert {p: p.stat().st_mtime_ns for p in (tmp_path / "analysis").rglob("*.parquet")} == analysed
    table = pd.read_csv(tmp_path / "models.csv")
    assert table.condition.tolist() == ["distinct"] * 2 + ["repeats+weight_decay=0"] * 2
    assert table.repeats.tolist() == [False, False, True, True] and table.weight_decay.tolist()[2:] == [0.0, 0.0]
    assert {"run_id", "seed", "val_accuracy", "learned", "mode", "cs_at_copy", "repeat_share",
            "suppress_fraction_h1", "suppression", "suppressed_share", "removed_near", "removed_far"} <= set(table.columns)
    assert (table.step == 20).all() and not table.learned.any()  # 20 steps learn nothing
    assert table.repeat_share.iloc[0] == 0.0 and table.repeat_share.iloc[2] > 0.0
    assert table.accuracy_gap0.iloc[:2].isna().all() and table.accuracy_gap0.iloc[2:].between(0, 1).all()
    assert table.accuracy_gap_other.between(0, 1).all()
    tests = pd.read_csv(tmp_path / "tests.csv")
    assert tests.condition.tolist() == ["distinct", "repeats+weight_decay=0"] and set(tests.status) == {"not testable"}
    assert "repeats True, weight_decay 0.0" in report.read_text()
    early = tmp_path / "early"  # a search stopped at step 10: its models classified there, from the same runs
    CopySearchStudy(SearchPlan("cpu", plan.conditions, plan.seeds, TINY, 100, classify_step=10), early,
                    device="cpu", progress=False).run()
    assert (pd.read_csv(early / "models.csv").step == 10).all()

    table["val_accuracy"] = 1.0  # count the modes anyway to check the tables
    layout.write_text(tmp_path / "models.csv", table.to_csv(index=False))
    rejudged = rejudge(tmp_path).read_text()  # from models.csv alone, as for a committed folder
    shares = pd.read_csv(tmp_path / "mode_fractions.csv")
    assert list(shares.columns) == ["condition", "mean_gap", "weight_decay", "mode", "count", "n", "fraction",
                                    "ci_low", "ci_high"]
    assert shares.groupby("condition")["count"].sum().to_dict() == {"distinct": 2, "repeats+weight_decay=0": 2}
    assert "re-judged from models.csv" in rejudged and "| distinct | 2 |" in rejudged


def test_the_committed_search_rejudges_to_the_verdicts_it_committed(tmp_path):
    committed = ROOT / "results" / "sorting-copy-search-cpu"
    for name in ("models.csv",):
        (tmp_path / name).write_bytes((committed / name).read_bytes())
    rejudge(tmp_path)
    assert pd.read_csv(tmp_path / "tests.csv").equals(pd.read_csv(committed / "tests.csv"))
    assert pd.read_csv(tmp_path / "mode_fractions.csv").equals(pd.read_csv(committed / "mode_fractions.csv"))


@pytest.mark.parametrize("spec, message", [
    ("nonesuch", "'nonesuch' is neither a key=value setting nor one of distinct, repeats"),
    ("repeats+", "has an empty part"),
    ("repeats+lr=fast", "lr got 'fast'; expected a number"),
    ("distinct+colour=1", "'colour' is no run setting"),
    ("distinct+seed=3", "sets the seed; the study's seeds are its --seed axis"),
])
def test_a_bad_condition_is_refused_in_one_line_before_anything_trains(tmp_path, capsys, spec, message):
    code = main(["study", "copy_search", "--out", str(tmp_path / "s"), "--condition", spec, "--dry-run"])
    error = capsys.readouterr().err
    assert code != 0 and message in error and "Traceback" not in error and len(error.strip().splitlines()) == 1
    assert not (tmp_path / "s").exists()


def test_two_conditions_with_the_same_runs_are_refused():
    with pytest.raises(ConfigError, match="two conditions give the same runs"):
        SearchPlan("cpu", conditions=("distinct", "distinct+weight_decay=0.005"), seeds=(0,), settings=TINY)


def test_the_screen_ranks_conditions_by_its_declared_selection_rule():
    def rows(condition, modes, suppressors, strength, accuracy=1.0):
        return pd.DataFrame({"condition": condition, "mode": modes, "val_accuracy": accuracy,
                             "n_suppressors": suppressors, "suppression": strength})

    models = pd.concat([
        rows("pairs", ["splitting"] * 3, [1, 1, 0], [0.3, 0.25, 0.05]),
        rows("one cs", ["copy_suppression", "splitting", "splitting"], [1, 0, 0], [0.4, 0.0, 0.0]),
        rows("strong", ["splitting"] * 3, [0, 0, 0], [0.19, 0.1, 0.0]),
        rows("weak", ["splitting"] * 3, [0, 0, 0], [0.05, 0.1, 0.0]),
        rows("unlearned", ["copy_suppression"] * 3, [1, 1, 1], [0.9] * 3, accuracy=0.5),
        rows("one learned", ["copy_suppression", "splitting", "splitting"], [1, 1, 1], [0.9] * 3)
        .assign(val_accuracy=[1.0, 0.5, 0.5]),
    ], ignore_index=True)
    ranking = screen_ranking(models, RULES)
    assert ranking.condition.tolist()[:4] == ["one cs", "pairs", "strong", "weak"]
    assert ranking["rank"].tolist()[:4] == [1, 2, 3, 4] and ranking["rank"].iloc[4:].isna().all()
    assert set(ranking.condition.iloc[4:]) == {"unlearned", "one learned"}  # fewer than 2 of 3 runs learned
    assert ranking.set_index("condition").loc["pairs", "suppressing_pair"] == 2


def test_the_gap_claim_is_judged_over_conditions_that_differ_in_their_data_only(tmp_path):
    with pytest.raises(ConfigError, match="compares data only, but conditions 'distinct' and 'repeats\\+weight_decay=0' "
                                          "also differ in weight_decay"):
        SearchPlan("cpu", conditions=("distinct", "repeats+weight_decay=0"), seeds=(0,), settings=TINY,
                   compare_gaps=True)
    with pytest.raises(ConfigError, match="at least two conditions"):
        SearchPlan("cpu", conditions=("distinct",), seeds=(0,), settings=TINY, compare_gaps=True)
    SearchPlan("cpu", conditions=("distinct", "distinct+gaps=geometric+mean_gap=1.5+data_seed=1"), seeds=(0,),
               settings=TINY, compare_gaps=True)  # data settings only: accepted

    def condition(name, mean_gap, modes):
        return pd.DataFrame({"condition": name, "mode": modes, "val_accuracy": 1.0, "mean_gap": mean_gap,
                             "weight_decay": 0.005})

    # one mode at the small δ̄, the other at the large one: the gap test finds it, with power (about 0.9 for 20 runs
    # a condition), judged with the conditions' copy-suppression tests by Holm (3 claims)
    models = pd.concat([condition("narrow", 4.7, ["splitting"] * 20),
                        condition("wide", 18.0, ["overlapping"] * 16 + ["splitting"] * 4)], ignore_index=True)
    rules = RULES.changed(gap_permutations=999, gap_power_studies=100, gap_power_permutations=199)
    judged = judge(search_findings(models, rules, compare_gaps=True), rules)
    gap = judged[-1]
    assert len(judged) == 3 and gap.claim.startswith("The gap distribution") and gap.status == "reproduced"
    assert gap.p_value < 0.01 and gap.power > 0.8 and "χ²" in gap.evidence
    assert condition_tests(models, rules, compare_gaps=True).status.tolist() == ["not reproduced"] * 2
    mixed = models.assign(mode=["splitting", "overlapping"] * 20)  # the same shares at both δ̄: not reproduced
    assert judge(search_findings(mixed, rules, compare_gaps=True), rules)[-1].status == "not reproduced"
    folder = tmp_path / "search"  # the tables and report, from a real search's rows relabelled
    rows = pd.read_csv(ROOT / "results" / "sorting-copy-search-cpu" / "models.csv").assign(
        condition=["distinct"] * 16 + ["distinct+values=200"] * 16, mean_gap=[4.7] * 16 + [18.0] * 16, weight_decay=0.005,
        val_accuracy=1.0, mode=["splitting"] * 16 + ["overlapping"] * 16)
    write_tables(folder, rows, rules, "test", compare_gaps=True)
    assert "## The gap claim over these conditions" in (folder / "report.md").read_text()
    layout.write_json(folder / "summary.json", {"compare_gaps": True}, checked=False)
    assert "The gap distribution" in rejudge(folder, rules).read_text()  # rejudged as the search was judged
