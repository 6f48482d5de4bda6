"""One home per threshold: every value a claim depends on is a field of its study's Rules, defined there
once; the analysis functions that apply it take it as an argument and hold no value of their own, so a
rule changed in the study is the rule the analysis applies (and, read at analysis, part of the cache stamp)."""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest

import headway
from headway.analysis import development
from headway.analysis.llc import diagnostics, trace, validity
from headway.analysis.modular import fourier
from headway.analysis.retrieval import composition, mechanism, probes, roles
from headway.analysis.sorting import modes
from headway.studies.llc_rules import LLCRules
from headway.studies.modular.rules import ModularRules
from headway.studies.retrieval.rules import RetrievalRules
from headway.studies.rules import Rules
from headway.studies.sorting.rules import SortingRules

SOURCE = Path(headway.__file__).parent
STUDY_RULES = (RetrievalRules(), SortingRules(), ModularRules())
# Each analysis parameter that applies a rule, and the rule it applies.
APPLIED = [
    (roles.attention_roles, "threshold", RetrievalRules, "role_score"),
    (roles.name_circuit, "min_drop", RetrievalRules, "circuit_drop"),
    (composition.composition_check, "level", RetrievalRules, "read_level"),
    (mechanism.reading_levels, "level", RetrievalRules, "read_level"),
    (mechanism.composing_heads, "level", RetrievalRules, "read_level"),
    (mechanism.link_reads, "level", RetrievalRules, "read_level"),
    (mechanism.composition_needed, "margin", RetrievalRules, "composition_margin"),
    (mechanism.farthest_hops, "threshold", RetrievalRules, "reach_accuracy"),
    (mechanism.classify, "rule", RetrievalRules, "mechanism_rule"),
    (mechanism.mechanism_table, "rule", RetrievalRules, "mechanism_rule"),
    (probes.probe_reach, "threshold", RetrievalRules, "reach_accuracy"),
    (fourier.key_frequencies, "coverage", ModularRules, "coverage"),
    (modes.copy_sets, "thresholds", SortingRules, "mode_thresholds"),
    (modes.classify_modes, "thresholds", SortingRules, "mode_thresholds"),
    (modes.threshold_sweep, "base", SortingRules, "mode_thresholds"),
    (modes.noise_threshold, "rate", SortingRules, "copy_noise"),
    (validity.invalid_reasons, "limits", LLCRules, "llc_validity"),
    (development.valid_llc, "limits", LLCRules, "llc_validity"),
    (development.development, "validity", LLCRules, "llc_validity"),
    (diagnostics.diagnose, "limits", LLCRules, "llc_validity"),
    (trace.llc_trace, "validity", LLCRules, "llc_validity"),
]
# Names the thresholds had in the analysis modules before they moved to the rules.
RETIRED = {"THRESHOLD", "MIN_DROP", "READ_LEVEL", "ADEQUACY_GAP", "CAUSAL_MARGIN", "COVERAGE", "BASIN_FRACTION",
           "MIN_VALID_ACCEPTANCE", "DIVERGE_FACTOR", "TREND_FRACTION", "TREND_SIGMAS"}


def _rule_defaults() -> dict[str, object]:
    """Every study rule's name → its default (the study-specific rules; alpha and power are common)."""
    common = {f.name for f in dataclasses.fields(Rules)}
    return {f.name: f.default for rules in STUDY_RULES for f in dataclasses.fields(rules) if f.name not in common}


def _modules() -> list[Path]:
    """The source files of the analysis and the tasks, where no rule may be defined."""
    return sorted([*(SOURCE / "analysis").rglob("*.py"), *(SOURCE / "tasks").rglob("*.py")])


@pytest.mark.parametrize(("function", "parameter", "owner", "name"), APPLIED,
                         ids=[f"{f.__name__}.{p}" for f, p, _, _ in APPLIED])
def test_an_analysis_parameter_that_applies_a_rule_has_no_value_of_its_own(function, parameter, owner, name):
    assert name in {f.name for f in dataclasses.fields(owner)} or callable(getattr(owner, name))
    default = inspect.signature(function).parameters[parameter].default
    assert default is inspect.Parameter.empty, f"{function.__name__}({parameter}=...) repeats rule {name}"


def test_the_classifiers_threshold_objects_take_every_value_from_the_rules():
    for holder, rules in ((mechanism.MechanismRule, RetrievalRules()), (modes.ModeThresholds, SortingRules())):
        fields = dataclasses.fields(holder)
        assert all(f.default is dataclasses.MISSING for f in fields), f"{holder.__name__} holds defaults"
    assert dataclasses.asdict(RetrievalRules().mechanism_rule()) == {"decode": 0.9, "level": 0.3, "gap": 0.1,
                                                                     "margin": 0.2}
    rules = SortingRules()
    assert all(getattr(rules.mode_thresholds(), f.name) == getattr(rules, f.name)
               for f in dataclasses.fields(modes.ModeThresholds))


def test_no_analysis_or_task_module_defines_a_rule():
    """No module-level constant named after a rule (or a retired threshold name), and no constant or
    parameter named like a rule whose literal default is that rule's value: a second home for it."""
    defaults = _rule_defaults()
    found = []
    for path in _modules():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, ast.AnnAssign) else []
            for target in targets:
                if isinstance(target, ast.Name) and (target.id in RETIRED or target.id.lower() in defaults):
                    found.append(f"{path.relative_to(SOURCE)}: constant {target.id}")
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            arguments = node.args.args + node.args.kwonlyargs
            values = [None] * (len(node.args.args) - len(node.args.defaults)) + node.args.defaults \
                + node.args.kw_defaults
            for argument, value in zip(arguments, values, strict=True):
                if (isinstance(value, ast.Constant) and argument.arg in defaults
                        and value.value == defaults[argument.arg]):
                    found.append(f"{path.relative_to(SOURCE)}: {node.name}({argument.arg}={value.value!r})")
    assert not found, "thresholds defined outside their study's rules: " + "; ".join(found)


def test_the_llc_validity_limits_are_rules_of_every_llc_study_and_part_of_the_analysis_stamp():
    """The estimator's `ValidityLimits` hold the one copy of each default; the LLC studies carry each limit as a
    rule with its reason — analysis-stage where the sampler's stored judgement depends on it, summary-stage for the
    two judged on stored columns (ceiling, max_shortfall) — and the limits they hand on are their rules' values;
    besides the limits, one rule says which estimates the claims read and one what they weigh as the estimator's
    bias."""
    assert all(isinstance(rules, LLCRules) for rules in (SortingRules(), ModularRules()))
    limits = [f.name for f in dataclasses.fields(validity.ValidityLimits)]
    stored = {"ceiling", "max_shortfall"}
    for rules in (SortingRules(), ModularRules()):
        assert rules.llc_validity() == validity.ValidityLimits()
        stamp = rules.stamp("analysis")
        assert all(stamp[f"llc_{name}"] == getattr(validity.ValidityLimits(), name) for name in limits
                   if name not in stored)
        assert not any(f"llc_{name}" in stamp for name in stored)
        doubled = {name: min(2 * getattr(validity.ValidityLimits(), name), 1.0) if name == "max_shortfall"
                   else 2 * getattr(validity.ValidityLimits(), name) for name in limits}
        changed = rules.changed(**{f"llc_{name}": value for name, value in doubled.items()})
        assert changed.llc_validity() == validity.ValidityLimits(**doubled)
        assert changed.stamp("analysis") != stamp
    own = {f.name for f in dataclasses.fields(LLCRules)} - {f.name for f in dataclasses.fields(Rules)}
    # and which estimates the claims read and what bias they weigh: summary rules (judged on the stored columns
    # and the stored stability, no sampling again)
    assert own == {f"llc_{name}" for name in limits} | {"llc_resolved_only", "llc_bias_source", "llc_bias_statistic"}
    assert all(not {"llc_resolved_only", "llc_bias_source", "llc_bias_statistic"} & set(rules.stamp("analysis"))
               for rules in (SortingRules(), ModularRules()))
