"""Each study declares its claims once (`headway.studies.verdict.registry`): every registered claim has a unique
id, is listed by it in its study's docs and appears in the threshold-sensitivity table built from the registry;
and every committed results folder that holds a study re-summarises to the verdicts it committed."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from headway.runs.owner import inferred_kinds
from headway.runs.store import load_metrics
from headway.studies.base import RUNS, StudyData
from headway.studies.modular.verdicts import CLAIMS as MODULAR
from headway.studies.registry import study_class
from headway.studies.retrieval.verdicts import CLAIMS as RETRIEVAL
from headway.studies.rules import Rules, rule
from headway.studies.sensitivity import COLUMNS, displayed, flips, status_table, sweep_text, threshold_sensitivity
from headway.studies.sorting.verdicts import CLAIMS as SORTING
from headway.studies.verdict import StudyClaim, checked_claim, reads, registry

ROOT = Path(__file__).resolve().parents[1]
REGISTRIES = {"retrieval": RETRIEVAL, "sorting": SORTING, "modular": MODULAR}
CLAIMS = [pytest.param(study, claim, id=f"{study}-{claim.id}") for study, claims in REGISTRIES.items()
          for claim in claims]
# Every committed folder a study wrote and judged (its runs and analysis caches kept), with the study that wrote it;
# a folder whose study stopped before its verdicts (results/retrieval-gpu-logdepth: training curves only) has none.
STUDY_FOLDERS = {folder.name: kinds[0].removeprefix("study ") for folder in sorted((ROOT / "results").iterdir())
                 if (folder / RUNS).is_dir() and (folder / "summary.json").is_file()
                 and len(kinds := inferred_kinds(folder)) == 1
                 and kinds[0].startswith("study ")}
# One small committed folder per study, whose sensitivity table is built in full here.
SMALL = {"retrieval": "bidirectional-d9-cpu", "sorting": "sorting-cpu", "modular": "modular-cpu"}


def committed(name: str) -> tuple[StudyData, dict, object]:
    """The gathered data of a committed folder, read from its run tables and analysis caches as `headway study`
    gathers them (nothing trained or analysed), its summary.json, and its summarised tables (with the LLC
    estimator's bias it committed)."""
    folder = ROOT / "results" / name
    cls = study_class(STUDY_FOLDERS[name])
    summary = json.loads((folder / "summary.json").read_text())
    rules = cls.rules_class.from_dict(summary["rules"])
    plan = cls.plan_for(summary["scale"])
    if "grid" in summary:  # the grid's weight decays and, where recorded, what decides which runs were traced
        grid = summary["grid"]
        plan = plan.with_overrides(weight_decays=tuple(grid["weight_decays"]))
        if "train_fractions" in grid:  # the modular grid's fractions (another than the scale's: a confirmation's)
            plan = plan.with_overrides(train_fractions=tuple(grid["train_fractions"]))
        if "development_seeds" in grid:
            plan = plan.with_overrides(seeds=tuple(grid["seeds"]), development_seeds=tuple(grid["development_seeds"]),
                                       fresh_data=grid["fresh_data"], llc_first_step=grid["llc_first_step"],
                                       llc_burnin=grid.get("llc_burnin"), llc_draws=grid.get("llc_draws"))
            if "llc_weights" in grid:  # the weight groups traced (recorded since the per-head traces)
                plan = plan.with_overrides(llc_weights=grid["llc_weights"])
            if grid.get("settings"):  # run settings given over the recipe (recorded since --steps 3000 was given)
                plan = plan.with_settings(**grid["settings"])
    if "conditions" in summary:  # a search: its conditions, seeds and what it classified on
        plan = plan.with_overrides(**{key: tuple(summary[key]) if isinstance(summary[key], list) else summary[key]
                                      for key in ("conditions", "seeds", "examples", "classify_step", "compare_gaps")
                                      if key in summary})
    study = cls(plan, folder, rules=rules)
    ensembles = sorted(d for d in (folder / RUNS).iterdir() if d.is_dir())
    parts: dict[str, list[pd.DataFrame]] = {name: [] for name in cls.schemas}
    for ensemble in ensembles:
        tables = study.cached(ensemble)
        assert tables is not None, f"{ensemble}: its analysis cache is stale, so the study would analyse it again"
        for table, frame in tables.items():
            if len(frame):
                parts[table].append(frame)
    data = StudyData(plan, load_metrics(folder / RUNS), {k: pd.concat(v, ignore_index=True) if v else pd.DataFrame()
                                                         for k, v in parts.items()}, {}, {}, [e.name for e in ensembles],
                     rules)
    summarise = __import__(f"headway.studies.{cls.name}.tables", fromlist=["summarise"]).summarise
    bias = summary.get("llc_bias")
    takes_bias = cls.name in ("sorting", "modular")  # the studies that judge LLC claims
    tables = summarise(data, math.nan if bias is None else bias) if takes_bias else summarise(data)
    return data, summary, tables


def sensitivity_of(study: str, data: StudyData, tables: object) -> pd.DataFrame:
    """The threshold sensitivity a study's report builds, from its registry."""
    module = __import__(f"headway.studies.{study}.tables", fromlist=["tables_at"])
    if study == "sorting":
        def at(changed: Rules) -> object:
            return module.tables_at(tables, data.rules, changed)
    else:
        def at(changed: Rules) -> object:
            return module.tables_at(data, tables, changed)
    return threshold_sensitivity(REGISTRIES[study], tables, data.rules, at)


@pytest.fixture(scope="module")
def sensitivities() -> dict[str, pd.DataFrame]:
    out = {}
    for study, name in SMALL.items():
        data, _, tables = committed(name)
        out[study] = sensitivity_of(study, data, tables)
    return out


# --- the registries ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("study, claims", REGISTRIES.items())
def test_every_registered_claim_has_a_unique_id(study, claims):
    ids = [claim.id for claim in claims]
    assert len(ids) == len(set(ids)) and all(ids)
    statements = [claim.statement(study_class(study).rules_class()) for claim in claims]
    assert len(statements) == len(set(statements))  # one claim, one entry


@pytest.mark.parametrize("study, claim", CLAIMS)
def test_every_registered_claim_is_listed_by_its_id_in_its_studys_docs(study, claim):
    page = (ROOT / study_class(study).doc).read_text()
    assert f"`{claim.id}`" in page


@pytest.mark.parametrize("study, claim", CLAIMS)
def test_every_registered_claim_is_in_the_sensitivity_table_at_every_swept_value(study, claim, sensitivities):
    table = sensitivities[study]
    assert list(table.columns) == COLUMNS
    mine = table[table.claim == claim.id]
    assert set(mine.rule) == set(study_class(study).rules_class().sweeps())
    assert mine.groupby("rule").default.sum().eq(1).all()  # each sweep holds the study's value once
    assert mine.groupby("rule").rests.nunique().eq(1).all()


def test_a_registry_refuses_a_repeated_id_an_id_not_in_kebab_case_and_an_undeclared_test():
    @checked_claim("scores are high", lambda rules: "a test", runs=reads("score"))
    def high(runs: pd.DataFrame, rules: Rules, *, claim) -> None:
        return None

    with pytest.raises(ValueError, match="more than once"):
        registry(StudyClaim("high", high), StudyClaim("high", high))
    with pytest.raises(ValueError, match="lowercase words joined by hyphens"):
        StudyClaim("High scores", high)
    with pytest.raises(ValueError, match="checked_claim"):
        StudyClaim("plain", lambda runs, rules: None)


# --- the sensitivity builder ------------------------------------------------------------------------------------

def test_the_sensitivity_judges_every_claim_again_holds_the_held_ones_and_skips_values_without_tables():
    from dataclasses import dataclass, replace

    from headway.analysis.statistics import binomial_tail

    @dataclass(frozen=True)
    class ToyRules(Rules):
        level: float = rule(0.5, "score a run needs", sweep=(0.3, 0.5, 0.9))
        cut: float = rule(1.0, "a rule no claim reads", sweep=(1.0, 2.0))

    @dataclass
    class ToyTables:
        runs: pd.DataFrame

    @checked_claim("runs score high", lambda rules: f"score ≥ {rules.level:g}", runs=reads("score"))
    def high(runs: pd.DataFrame, rules: ToyRules, *, claim):
        k = int((runs.score >= rules.level).sum())
        return claim.finding(f"{k} of {len(runs)}", binomial_tail(k, len(runs), 0.5), lambda level: 0.99)

    claims = registry(StudyClaim("high", high), StudyClaim("held-high", high, held=True))
    tables, rules = ToyTables(pd.DataFrame({"score": [0.6] * 12})), ToyRules()
    table = threshold_sensitivity(claims, tables, rules,
                                  lambda changed: None if changed.cut == 2.0 else replace(tables))
    assert set(table[table.rule == "cut"].value) == {1.0}  # no tables at cut = 2: left out
    level = table[table.rule == "level"].set_index(["claim", "value"])
    assert level.loc[("high", 0.9), "status"] == "not reproduced" and level.loc[("high", 0.5), "status"] == "reproduced"
    assert (level.loc["held-high"].status == "reproduced").all()  # its finding kept at the study's rules
    assert level.loc["high"].rests.all() and not level.loc["held-high"].rests.any()
    assert flips(table) == ["high — level: reproduced at 0.3, 0.5; not reproduced at 0.9"]
    assert sweep_text(table, "high", "reproduced") == (
        "Threshold sweep: level — same status at 0.3, 0.5, not reproduced at 0.9.")
    assert sweep_text(table, "held-high", "reproduced") == ""  # rests on no rule, never flips
    assert list(status_table(table).columns) == ["rule", "value", "high", "held-high"]


def test_a_claim_whose_null_was_measured_at_the_study_values_only_is_not_shown_over_those_rules():
    @checked_claim("circuit carries the answer", lambda rules: "a test", runs=reads("score"))
    def circuit(runs: pd.DataFrame, rules: Rules, *, claim) -> None:
        return None

    claims = registry(StudyClaim("circuit", circuit, null_at_study_values=("role_score",)),
                      StudyClaim("curriculum", circuit))
    rows = [("circuit", "role_score", 0.3, False, "not testable", math.nan, math.nan, True, "no random-set null"),
            ("circuit", "role_score", 0.4, True, "not reproduced", 1.0, 0.99, True, ""),
            ("circuit", "necessary_margin", 0.1, True, "not reproduced", 1.0, 0.99, False, ""),
            ("curriculum", "role_score", 0.3, False, "reproduced", 0.001, 0.3, False, ""),
            ("curriculum", "role_score", 0.4, True, "reproduced", 0.001, 0.3, False, "")]
    shown, notes = displayed(pd.DataFrame(rows, columns=COLUMNS), claims)
    assert list(zip(shown.claim, shown.rule)) == [("circuit", "necessary_margin"), ("curriculum", "role_score"),
                                                  ("curriculum", "role_score")]
    assert shown.power.isna().tolist() == [False, True, True]  # power is no part of a rejection
    assert notes == ["circuit is not shown over role_score: its null was measured at the study's values of these "
                     "rules only, so at every other value it is not testable for want of a null, whatever the runs "
                     "show (summary.json keeps those rows)"]
    assert flips(shown) == []


def test_the_retrieval_sensitivity_agrees_with_the_one_its_committed_folder_holds(sensitivities):
    """The sweep a committed summary holds (keyed by the claim's text in older folders, by id since) gives the
    same statuses as the one the report builds from the registry, keyed by id."""
    data, summary, _ = committed(SMALL["retrieval"])
    ids = {claim.statement(data.rules): claim.id for claim in RETRIEVAL}
    before = pd.DataFrame(summary["threshold_sensitivity"])
    now = sensitivities["retrieval"].set_index(["claim", "rule", "value"]).status
    assert len(before)
    for row in before.itertuples():
        assert now[(ids.get(row.claim, row.claim), row.rule, row.value)] == row.status, row  # text or id


# --- the committed results ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", STUDY_FOLDERS)
def test_every_committed_study_folder_re_summarises_to_its_committed_verdicts(name):
    data, summary, tables = committed(name)
    verdicts = study_class(STUDY_FOLDERS[name]).verdicts(tables, data.rules)
    assert [(v.claim, v.status) for v in verdicts] == [(v["claim"], v["status"]) for v in summary["verdicts"]]
