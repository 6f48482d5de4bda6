"""`headway study NAME`: one command per registered study, its options generated from the study's
plan (every plan field with `axis(...)` metadata) and the run settings it lets a user override."""

from __future__ import annotations

import dataclasses
import math
import typing
from pathlib import Path
from typing import Any

import click

from headway.cli.options import (OutputPath, check_compute, check_distinct, check_training_memory, compute_params,
                                 executor_params, memory_check_params, option_flag, parse_value, parse_values,
                                 pop_compute, pop_deadline, pop_executor, renamed_options, setting_option,
                                 time_limit_params)
from headway.errors import ConfigError
from headway.limits import MAX_ANALYSIS_EXAMPLES, MAX_CHECKPOINTS, MAX_RUNS
from headway.runs.config import flat_setting_types
from headway.runs.owner import claim, study_kind
from headway.settings import check_choice, check_int, field_types, parse_setting
from headway.studies.base import Plan, Study
from headway.studies.cells import cell_name, setting_cells, write_cell_tables
from headway.studies.registry import study_class, study_names


class StudyGroup(click.Group):
    """`headway study`: a sub-command per registered study, built when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return study_names()

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in study_names():
            return None
        return study_command(study_class(name))


@click.group(cls=StudyGroup)
def study() -> None:
    """Reproduce a study end to end: train its grid, analyse every model, write a report."""


def plan_options(plan_class: type[Plan]) -> dict[str, dataclasses.Field]:
    """Option name -> plan field, for every field with axis metadata."""
    return {f.metadata.get("option") or f.name: f for f in dataclasses.fields(plan_class) if "help" in f.metadata}


def parse_field(option: str, field: dataclasses.Field, kind: Any, text: str) -> Any:
    """The value of a plan field from its option text: a special word, a comma list for tuple fields
    (`A..B` ranges for integers), or one value."""
    word = text.strip().lower()
    if word in field.metadata["words"]:
        return field.metadata["words"][word]
    flag = option.replace("_", "-")
    parse = field.metadata["parse"]
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        values = ([parse(flag, part) for part in text.split(",")] if parse is not None
                  else parse_values(flag, text, item))
        if None in values:  # 'none' stands for no value in a list only where the plan gives it a meaning (words)
            raise ConfigError(f"{option_flag(flag)} got {text!r}; give {item.__name__} values, not 'none'")
        return tuple(check_distinct(option_flag(flag), values))
    try:
        return parse(flag, text) if parse is not None else parse_value(flag, text, kind)
    except ConfigError as err:
        words = field.metadata["words"]
        if not words:
            raise
        raise ConfigError(f"{err} or {' or '.join(repr(w) for w in words)}") from None


def field_metavar(kind: Any, field: dataclasses.Field) -> str:
    """How an option's value is shown in --help: a comma list for tuple fields, else one value or its words
    (N|fixed)."""
    if typing.get_origin(kind) is tuple:
        return "V[,V…]"
    inner = [arg for arg in typing.get_args(kind) if arg is not type(None)] or [kind]
    one = "N" if inner[0] is int else "V"
    return "|".join([one, *field.metadata["words"]])


def study_command(cls: type[Study]) -> click.Command:
    """The `headway study NAME` command of study `cls`."""
    fields = plan_options(cls.plan_class)
    kinds = field_types(cls.plan_class)
    run_kinds = flat_setting_types()

    def command(scale: str, out: Path, device: str, dry_run: bool, progress: bool, max_ensemble: int | None,
                memory_check: bool, **given: str | None) -> None:
        from headway.train.capacity import check_max_ensemble

        check_max_ensemble(max_ensemble)
        executor = pop_executor(given)
        compute = pop_compute(given)
        deadline = pop_deadline(given)
        rules = parse_rules(cls, given.pop("rule"))
        plan = cls.plan_for(scale)
        overrides = {fields[name].name: parse_field(name, fields[name], kinds[fields[name].name], text)
                     for name, text in given.items() if text is not None and name in fields}
        _check_overrides(overrides, plan, {field.name: option_flag(name) for name, field in fields.items()})
        lists = {name: parse_values(name, text, run_kinds[name])
                 for name, text in given.items() if text is not None and name in cls.run_settings}
        plan = dataclasses.replace(plan, **overrides)
        cells = setting_cells(lists)  # one study per combination of the listed run settings
        plans = [plan.with_settings(**cell) for cell in cells]  # None is a value here
        runs = [run for each in plans for run in each.runs()]
        if len(runs) > MAX_RUNS:
            raise ConfigError(f"the study's grids hold {len(runs)} runs; one command trains at most {MAX_RUNS}")
        sweeping = len(cells) > 1
        if dry_run:  # it joins no cluster, and may plan for another machine: the device need not be this one's
            check_compute(compute, executor, device, here=False)
            for cell, each in zip(cells, plans, strict=True):
                if sweeping:
                    click.echo(f"cell {cell_name(cell)}:")
                _describe(each, max_ensemble)
            changed = rules.changed_from(cls.rules_class())
            if changed:
                click.echo("rules: " + ", ".join(f"{name} = {value}" for name, value in changed.items())
                           + " (the others at their defaults)")
            return
        executor.prepare(device)
        check_compute(compute, executor, device)
        for each in plans:  # the cells train one after another
            check_training_memory(each.runs(), executor, device, memory_check)
        if sweeping:
            claim(out, study_kind(cls.name))
        for cell, each in zip(cells, plans, strict=True):
            folder = out / cell_name(cell) if sweeping else out
            click.echo(f"study {cls.name}, scale {scale}: {len(each.runs())} runs into {folder}", err=True)
            report = cls(each, folder, device=device, progress=progress, executor=executor, compute=compute,
                         deadline=deadline, max_ensemble=max_ensemble, rules=rules).run()
            click.echo(verdict_table(folder / "summary.json"))
            written = {"report": report, "summary": folder / "summary.json", "results": folder / cls.results_file}
            click.echo("\n".join(f"{what}: {path}" for what, path in written.items() if Path(path).is_file()))
        if sweeping:
            click.echo("\n".join(f"cells: {path}" for path in write_cell_tables(out, cells, cls.results_file)))

    params = [
        click.Option(["--scale"], type=click.Choice(cls.scales), default=cls.scales[0], show_default=True,
                     help="Named scale of the plan (docs: " + (cls.doc or "docs/cli.md") + ")."),
        click.Option(["--out"], type=OutputPath(folder=True, kind=study_kind(cls.name)), required=True,
                     help="Study folder; re-running reuses trained runs and finished analyses."),
        click.Option(["--device"], default="auto", show_default=True, help="auto, cpu, cuda, cuda:1, …"),
        *executor_params(),
        *compute_params(),
        *time_limit_params(),
        *memory_check_params(),
    ]
    params += [setting_option(name, kinds[field.name], f"{field.metadata['help']} [default: the scale's]",
                              field_metavar(kinds[field.name], field))
               for name, field in fields.items()]
    params += [click.Option([option_flag(name), name], default=None, metavar="V",
                            help=f"Override the {name.replace('_', ' ')} of every run; a comma list (or A..B) runs one study "
                          "per value, each in a folder of its own.") for name in cls.run_settings]
    params += [
        click.Option(["--dry-run"], is_flag=True, help="Print the grid, its ensembles and its training cost; train nothing."),
        click.Option(["--progress/--no-progress"], default=True, help="Progress bars on a terminal."),
        click.Option(["--max-ensemble"], type=int, default=None, metavar="N",
                     help="At most N runs per new ensemble [default: as many as the device is measured to hold]."),
        click.Option(["--rule"], multiple=True, metavar="NAME=VALUE",
                     help="Judge by a rule other than its default, e.g. llc_bias_statistic=pooled (repeatable; every "
                          "rule, its reason and default: the report's Methods section, docs/verdicts.md). A folder "
                          "judged again needs the same rules to give the same verdicts."),
    ]
    renamed = {option_flag(field.metadata["was"] or field.name): option_flag(name)
               for name, field in fields.items() if (field.metadata["was"] or field.name) != name}
    command = renamed_options(renamed)(command)
    return click.Command(cls.name, params=params + command.__click_params__, callback=command, help=cls.summary)


def parse_rules(cls: type[Study], given: tuple[str, ...]) -> Any:
    """The study's rules with each `--rule NAME=VALUE` of `given` applied (a name it lacks, a malformed pair, a
    value of the wrong kind or out of range refused, naming it and what is allowed); its defaults when none."""
    rules = cls.rules_class()
    kinds = field_types(cls.rules_class)
    values: dict[str, Any] = {}
    for pair in given:
        name, equals, text = pair.partition("=")
        name = name.strip().replace("-", "_")
        if not equals or not name or not text.strip():
            raise ConfigError(f"--rule {pair!r} is not NAME=VALUE; e.g. --rule llc_bias_statistic=pooled")
        if name not in kinds:
            raise ConfigError(f"--rule {name!r} is no rule of study {cls.name}; its rules are {', '.join(sorted(kinds))}")
        if name in values:
            raise ConfigError(f"--rule {name} is given twice")
        values[name] = parse_setting(f"--rule {name}", text.strip(), kinds[name])
        if values[name] is None:
            raise ConfigError(f"--rule {name} got {text.strip()!r}; it needs a value ({kinds[name].__name__})")
    return rules.changed(**values) if values else rules


def verdict_table(summary: Path, width: int | None = None) -> str:
    """The verdicts a study's summary.json holds as a text table (status, p, α, power where it decides, claim
    wrapped to `width`, default the terminal's), each with its one-line reason, then the claims not run; or a line
    saying there are none."""
    import json
    import shutil
    import textwrap

    try:
        stored = json.loads(summary.read_text(encoding="utf-8"))
        verdicts, unrun = stored.get("verdicts") or [], stored.get("not_run") or []
    except (OSError, ValueError, AttributeError):
        verdicts, unrun = [], []
    if not verdicts and not unrun:
        return f"no verdicts in {summary}"
    width = width or shutil.get_terminal_size((120, 24)).columns
    head = f"{'status':<15} {'p':>7} {'α':>6} {'power':>6}  "
    heading = (f"Verdicts ({len(verdicts)} claims judged, {len(unrun)} not run; p one-sided, α family-wise, power "
               "at the stated effect, shown for null results only):")
    lines = [*textwrap.wrap(heading, width), head + "claim"]
    text = max(30, width - len(head))
    rows = [(verdict["status"], verdict.get("p_value"), verdict.get("alpha"),
             None if verdict["status"] == "reproduced" else verdict.get("power"), verdict["claim"],
             verdict.get("reason") or "") for verdict in verdicts]
    rows += [("not run", None, None, None, entry["claim"], entry["reason"]) for entry in unrun]
    for status, p_value, alpha, power, statement, reason in rows:
        cells = f"{status:<15} {_number(p_value, p=True):>7} {_number(alpha):>6} {_number(power):>6}  "
        wrapped = textwrap.wrap(statement, text) or [""]
        wrapped += textwrap.wrap(f"why: {reason}", text) if reason else []
        lines += [cells + wrapped[0], *(" " * len(head) + rest for rest in wrapped[1:])]
    return "\n".join(lines)


def _number(value: float | None, p: bool = False) -> str:
    """A p-value, level or power for the verdict table: "–" when missing, "<0.001" for a tiny p."""
    if value is None or value != value:
        return "–"
    return "<0.001" if p and value < 0.001 else f"{value:.3f}" if p else f"{value:.2f}"


# Plan fields whose given values must lie within another field of the plan (the development seeds are seeds of the
# grid, the contrast hops hops of it), and bounds on plan fields that are no run setting (run settings are checked
# when the plan's runs are built). Each plan's own checks may say the same; these hold whatever a plan checks.
SUBSET_OF = {"development_seeds": "seeds", "contrast_hops": "hops"}
FIELD_LIMITS = {"examples": (1, MAX_ANALYSIS_EXAMPLES), "llc_checkpoints": (2, MAX_CHECKPOINTS)}


def _field_choices() -> dict[str, tuple[str, ...]]:
    """Plan fields that hold a comma list of names, and the names each allows."""
    from headway.analysis.llc.masks import WEIGHT_GROUPS

    return {"llc_weights": WEIGHT_GROUPS}


def _check_overrides(overrides: dict[str, Any], plan: Plan, flags: dict[str, str]) -> None:
    """Refuse, before the plan is built, lists whose combinations (their product) exceed MAX_RUNS, a plan field
    out of its bounds, or values outside the field they must lie in (`flags`: field name -> option)."""
    lists = {name: len(value) for name, value in overrides.items()
             if isinstance(value, tuple) and value and name not in SUBSET_OF}
    if math.prod(lists.values()) > MAX_RUNS:
        raise ConfigError(f"{' × '.join(f'{flags[name]} {n}' for name, n in lists.items())} make "
                          f"{math.prod(lists.values())} combinations; a study command takes at most {MAX_RUNS}, so "
                          "split the grid into several")
    for name, (low, high) in FIELD_LIMITS.items():
        if overrides.get(name) is not None:
            check_int(flags[name], overrides[name], low, high)
    for name, allowed in _field_choices().items():
        if name in overrides:
            for part in str(overrides[name]).split(","):
                check_choice(flags[name], part.strip(), allowed)
    for name, within in SUBSET_OF.items():
        if name not in overrides:
            continue
        allowed = overrides.get(within, getattr(plan, within))
        outside = [value for value in overrides[name] if value not in allowed]
        if outside:
            raise ConfigError(f"{flags[name]} {outside[0]} is not among the {flags[within]} values of the grid "
                              f"({', '.join(map(str, allowed))}); give {flags[name]} from those")


def _describe(plan: Plan, max_ensemble: int | None = None) -> None:
    """Runs, ensembles (at most `max_ensemble` runs each when given) and approximate training FLOPs of each
    grid of `plan`, and the plan's own notes."""
    from headway.runs.config import group_runs
    from headway.runs.cost import gpu_training_seconds, training_flops
    from headway.train.capacity import ensemble_limit

    limit = ensemble_limit(None, max_ensemble)

    for name, runs in plan.grids().items():
        if not runs:
            click.echo(f"{name}: not run")
            continue
        flops = sum(training_flops(run) for run in runs)
        ensembles = list(group_runs(runs, limit).values())
        click.echo(f"{name}: {len(runs)} runs in {len(ensembles)} ensemble(s), about {flops:.2e} training "
                   f"FLOPs ({gpu_training_seconds(ensembles) / 3600:.2f} h of training on one H100, projected)")
    for line in plan.describe():
        click.echo(line)
