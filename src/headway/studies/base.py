"""What every study shares: a plan of runs, one driver (train the plan, analyse each ensemble once,
gather the tables), typed verdicts computed from tables, and the outputs.

A study subclasses `Study` and registers with `headway.studies.registry.register_study`; its plan is
a frozen dataclass subclassing `Plan`, whose fields carry `axis(...)` metadata so that
`headway study NAME` builds its options from them. The pipeline:

    plan.runs() → train (shared run store) → analyse(ensemble) per ensemble, cached in
    <out>/analysis/<ensemble>/ with a done.json → summarise(data) → verdicts(tables, rules) → report(...)

Every threshold the study judges by lives in one frozen `Rules` object (`rules_class`,
headway.studies.rules), handed to each step; the rules read during analysis are part of the cache's
stamp. `verdicts` is a pure function of the summarised tables and the rules, so every claim check is
unit-testable without training anything.

The steps after the analysis live in the study's package, one module each, and `Study` calls them by
name: `plan.study_plan(scale)`, `tables.summarise(data)`, `verdicts.verdicts(tables, rules)` and
`report.write_outputs(data, tables, verdicts, out)`. They are imported when first called, so that
`headway study NAME --help` loads neither torch nor the plots. A study whose LLC is also traced over
training subclasses `TracingStudy`, which adds the trace, its cache stamp and the estimator's bias.
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import math
import os
import platform
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, Self

from headway.compute import ComputeSettings
from headway.errors import TimeLimitReached
from headway.execution import Executor, Job, LocalExecutor
from headway.files import landing
from headway.runs import layout
from headway.runs.config import RunConfig
from headway.runs.schema import TableSchema
from headway.studies.analysis_time import begin_leg, end_legs, recorded_seconds
from headway.studies.rules import Rules
from headway.studies.verdict import Verdict

if TYPE_CHECKING:  # torch and pandas load with the first training or analysis, not with `headway --help`
    import pandas as pd
    import torch

    from headway.analysis.llc import SGLDSettings
    from headway.analysis.llc.study_settings import StudySettings

DONE = "done.json"  # written next to an ensemble's analysis tables when they are complete
RUNS = "runs"  # a study's trained ensembles, under its output folder
ANALYSIS = "analysis"  # its cached per-ensemble analysis tables
LLC_TRACE = "llc_trace"  # a `TracingStudy`'s saved trace checkpoints, in an ensemble's analysis folder


def axis(help: str, option: str | None = None, words: dict[str, Any] | None = None,
         parse: Callable[[str, str], Any] | None = None, was: str | None = None) -> dict[str, Any]:
    """Field metadata making a plan field a `headway study` option: `option` is the option name
    (default: the field name; use the run setting's name where the field sweeps one), `words` maps
    special words to values (e.g. {"none": ()}), `parse(option, text)` parses one list item, and `was`
    is an old spelling refused with a hint (default: the field name when `option` differs)."""
    return {"help": help, "option": option, "words": words or {}, "parse": parse, "was": was}


@dataclass(frozen=True)
class Plan(ABC):
    """What a study trains and measures at one scale. Subclasses are frozen dataclasses whose
    option fields carry `axis(...)` metadata; `runs()` lists every run of the plan."""

    scale: str

    def runs(self) -> list[RunConfig]:
        """Every run of the plan."""
        return [run for runs in self.grids().values() for run in runs]

    @abstractmethod
    def grids(self) -> dict[str, list[RunConfig]]:
        """The plan's runs by grid name (one grid unless the study trains several)."""

    @abstractmethod
    def with_settings(self, **settings: Any) -> Self:
        """A copy with flat run settings (e.g. steps) set in every grid; None leaves one as it is."""

    def with_overrides(self, **values: Any) -> Self:
        """A copy with the given fields replaced (None leaves a field as it is)."""
        return dataclasses.replace(self, **{k: v for k, v in values.items() if v is not None})

    def describe(self) -> list[str]:
        """Lines about the plan beyond its grids, for `--dry-run`."""
        return []


@dataclass
class StudyData:
    """What a report is made from: the plan, the training metrics of its runs, the gathered analysis
    tables, timings, hardware and the ensembles that hold the runs."""

    plan: Plan
    metrics: pd.DataFrame
    tables: dict[str, pd.DataFrame]
    seconds: dict[str, float]
    hardware: dict[str, str]
    ensembles: list[str]
    rules: Rules


class Study(ABC):
    """One paper experiment end to end. Subclasses set the class attributes and implement `analyse`; the
    other steps are the study package's modules (see the module's docstring)."""

    name: ClassVar[str]  # `headway study NAME`
    summary: ClassVar[str]  # one line for --help
    doc: ClassVar[str] = ""  # its documentation page
    plan_class: ClassVar[type[Plan]]
    scales: ClassVar[tuple[str, ...]]  # named scales of `plan_for`; the first is the default
    run_settings: ClassVar[tuple[str, ...]] = ("steps",)  # run settings `headway study` can override in every grid
    schemas: ClassVar[dict[str, TableSchema]]  # each per-ensemble analysis table's columns, checked on write and read
    version: ClassVar[int]  # bump when an analysis changes, so cached tables are recomputed
    # tables added by a version bump that changed nothing else (or only added optional columns and rows the
    # readers do without): version → the tables it added. A cache of an earlier version (results whose weights
    # were not kept cannot be analysed again) stays current without them, and reads them as empty tables
    added_tables: ClassVar[dict[int, tuple[str, ...]]] = {}
    rules_class: ClassVar[type[Rules]] = Rules  # the study's rules (its thresholds, levels and effects)
    results_file: ClassVar[str] = "results.csv"  # its per-run table, which a sweep of cells gathers (`studies.cells`)

    def __init__(self, plan: Plan, out: Path | str, device: str = "auto", progress: bool = True,
                 executor: Executor | None = None, compute: ComputeSettings | None = None,
                 deadline: float | None = None, max_ensemble: int | None = None, rules: Rules | None = None) -> None:
        from headway.errors import ConfigError
        from headway.train.capacity import check_max_ensemble

        self.plan, self.out, self.device, self.progress = plan, landing(out).resolve(), device, progress  # no loop
        self.executor = executor or LocalExecutor()
        self.compute = compute or ComputeSettings()  # precision and compilation of training and LLC sampling
        self.deadline = deadline  # time.time() after which training stops (saved) and no analysis starts
        self.max_ensemble = check_max_ensemble(max_ensemble)  # runs per new ensemble; None: the measured capacity
        self.rules = self.rules_class() if rules is None else rules
        if not isinstance(self.rules, self.rules_class):
            raise ConfigError(f"study {self.name} judges by {self.rules_class.__name__}, not {type(self.rules).__name__}")

    # --- what a study defines -----------------------------------------------------------------

    @abstractmethod
    def analyse(self, run_dir: Path, runs: list[RunConfig], folder: Path, device: torch.device) -> dict[str, pd.DataFrame]:
        """Every table of `schemas` for the ensemble at `run_dir` (its `runs`), rows tagged with run_id
        (see `tag`); artefacts other than tables may be written to `folder`."""

    @classmethod
    def step(cls, module: str, name: str) -> Callable[..., Any]:
        """The function `name` of the study package's `module` (`plan`, `tables`, `verdicts`, `report`),
        imported now: the package is the one holding the study's class."""
        package = cls.__module__.rpartition(".")[0]
        return getattr(importlib.import_module(f"{package}.{module}"), name)

    @classmethod
    def plan_for(cls, scale: str) -> Plan:
        """The plan of a named scale: the package's `plan.study_plan(scale)`."""
        return cls.step("plan", "study_plan")(scale)

    def summarise(self, data: StudyData) -> Any:
        """The study's derived tables from the gathered data (what verdicts and the report read): the package's
        `tables.summarise(data)`."""
        return self.step("tables", "summarise")(data)

    @classmethod
    def verdicts(cls, tables: Any, rules: Rules) -> list[Verdict]:
        """The verdict on each claim, computed from the summarised tables and the rules alone: the package's
        `verdicts.verdicts(tables, rules)`."""
        return cls.step("verdicts", "verdicts")(tables, rules)

    def report(self, data: StudyData, tables: Any, verdicts: list[Verdict]) -> Path:
        """Write the outputs (figures, tables, summary.json, report.html) into `out` and return the report: the
        package's `report.write_outputs(data, tables, verdicts, out)`."""
        return self.step("report", "write_outputs")(data, tables, verdicts, self.out)

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        """What an ensemble's cached analysis depends on (with `rules`, one of `Rules.stamps`, in place of
        today's rules stamp); a different stamp analyses it again."""
        return {"runs": [run.run_id for run in runs], "version": self.version,
                "rules": self.rules.stamp("analysis") if rules is None else rules, **self.precision_stamp()}

    def precision_stamp(self) -> dict[str, str]:
        """An explicitly chosen precision, which LLC estimates depend on ({} for the default `auto`)."""
        return {} if self.compute.precision == "auto" else {"precision": self.compute.precision}

    def tag_columns(self, run: RunConfig) -> dict[str, Any]:
        """Columns (besides run_id) added to every analysis row of `run`."""
        return {}

    # --- the shared driver ----------------------------------------------------------------------

    def run(self) -> Path:
        """Train, analyse, summarise, judge and report; everything already in `out` is reused."""
        data = self.gather()
        tables = self.summarise(data)
        return self.report(data, tables, self.verdicts(tables, self.rules))

    def gather(self) -> StudyData:
        """Train the plan's runs under `out/runs`, analyse every ensemble holding one of them (cached;
        both by the study's executor) and gather the tables of those runs."""
        from headway.runs.owner import claim, study_kind
        from headway.runs.store import load_runs
        from headway.train.sweep import train_runs

        runs = self.plan.runs()
        claim(self.out, study_kind(self.name))  # refused when another kind of command wrote `out`
        started = time.perf_counter()
        metrics = train_runs(runs, self.out / RUNS, device=self.device, progress=self.progress, executor=self.executor,
                             compute=self.compute, deadline=self.deadline, max_ensemble=self.max_ensemble)
        trained = time.perf_counter()
        wanted = {run.run_id for run in runs}
        ensembles = [d for d in layout.ensemble_dirs(self.out / RUNS) if {r.run_id for r in load_runs(d)} & wanted]
        job_device = self.executor.prepare(self.device)
        job_progress = self.progress and self.executor.jobs_show_progress
        jobs = [Job(d.name, analyse_ensemble, (self, d.resolve(), job_device, job_progress)) for d in ensembles]
        self.executor.run(jobs, "analysing", self.out, job_device, self.progress)
        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.schemas}
        recorded, devices = [0.0, 0.0], set()
        for run_dir in ensembles:
            tables = self.cached(run_dir)
            if tables is None:
                raise RuntimeError(f"the analysis of {run_dir.name} ended without writing its tables")
            for name, frame in tables.items():
                if len(frame):
                    parts[name].append(frame[frame.run_id.isin(wanted)])
            recorded = [a + b for a, b in zip(recorded, self._recorded_seconds(run_dir))]
            devices.add(trained_on_device(run_dir))
        gathered = joined(parts)
        seconds = {"training_s": trained - started, "analysis_s": time.perf_counter() - trained,
                   "training_recorded_s": recorded[0], "analysis_recorded_s": recorded[1]}
        # where the ensembles trained, beside where this command ran: a folder judged again elsewhere keeps both
        hardware = {**hardware_description(self.device, self.executor), "trained_on": ", ".join(sorted(devices))}
        return StudyData(self.plan, metrics, gathered, seconds, hardware, [d.name for d in ensembles], self.rules)

    def analysed(self, run_dir: Path, device: torch.device) -> None:
        """Analyse one ensemble unless its cache is current: `analyse`, then the tables, then done.json.
        Past the deadline it is not started (TimeLimitReached; `analyse` may also stop inside, keeping its parts)."""
        from headway.runs.store import load_runs

        if self.is_cached(run_dir):
            return
        TimeLimitReached.check(self.deadline, f"before analysing {run_dir.name}")
        folder = self.out / ANALYSIS / run_dir.name
        runs = load_runs(run_dir)
        started = time.perf_counter()
        folder.mkdir(parents=True, exist_ok=True)
        earlier = begin_leg(folder)  # the seconds of legs stopped before this one
        tables = self.analyse(run_dir, runs, folder, device)
        for name in self.schemas:
            layout.write_table(folder / f"{name}.parquet", tables[name], self.schemas[name])
        seconds = round(earlier + time.perf_counter() - started, 2)
        layout.write_json(folder / DONE, {**self.analysis_stamp(runs), "seconds": seconds})
        end_legs(folder)

    def is_cached(self, run_dir: Path) -> bool:
        """Whether the analysis tables of one ensemble are cached under the current stamp, every one of them there
        (a table deleted because it was damaged has the ensemble analysed again)."""
        from headway.runs.store import load_runs

        folder = self.out / ANALYSIS / run_dir.name
        done = folder / DONE
        if not done.is_file():
            return False
        stamp = {k: v for k, v in layout.read_json(done).items() if k != "seconds"}
        version = stamp.get("version")
        lacking = self.lacks(version) if isinstance(version, int) else None
        if lacking is None or not all((folder / f"{name}.parquet").is_file()
                                      for name in self.schemas if name not in lacking):
            return False
        runs = load_runs(run_dir)
        return any({**stamp, "version": self.version} == self.analysis_stamp(runs, rules)
                   for rules in self.rules.stamps("analysis"))

    @classmethod
    def lacks(cls, version: int) -> set[str] | None:
        """The tables an analysis of `version` may lack and still be current: none at the study's version, those
        `added_tables` names for every later bump when each bump only added tables; None (stale) otherwise."""
        later = range(version + 1, cls.version + 1)
        if version > cls.version or any(v not in cls.added_tables for v in later):
            return None
        return {name for v in later for name in cls.added_tables[v]}

    def cached(self, run_dir: Path) -> dict[str, pd.DataFrame] | None:
        """The analysis tables of one ensemble from its cache, or None when absent or stale; a table its version
        predates (`added_tables`) is read as an empty table."""
        if not self.is_cached(run_dir):
            return None
        import pandas as pd

        folder = self.out / ANALYSIS / run_dir.name
        return {name: (layout.read_table(path, schema) if (path := folder / f"{name}.parquet").is_file()
                       else pd.DataFrame())
                for name, schema in self.schemas.items()}

    def tag(self, frame: pd.DataFrame, runs: list[RunConfig], members: list[int]) -> pd.DataFrame:
        """`frame` (rows of a sub-ensemble, `instance` indexing `members`) with the run's id, the
        study's tag columns and the instance's position in the whole ensemble."""
        frame = frame.copy()
        frame["run_id"] = [runs[members[i]].run_id for i in frame.instance]
        for column in self.tag_columns(runs[members[0]]):
            frame[column] = [self.tag_columns(runs[members[i]])[column] for i in frame.instance]
        frame["instance"] = [members[i] for i in frame.instance]
        return frame

    def tagged_by_task(self, runs: list[RunConfig], analyse_members: Callable[[list[int]], dict[str, pd.DataFrame]]
                       ) -> dict[str, list[pd.DataFrame]]:
        """Each table's parts over the ensemble's groups of one task (`by_task`): `analyse_members(members)`
        gives a group's tables (`instance` indexing `members`), which are tagged (`tag`)."""
        parts: dict[str, list[pd.DataFrame]] = {name: [] for name in self.schemas}
        for members in by_task(runs).values():
            for name, frame in analyse_members(members).items():
                parts[name].append(self.tag(frame, runs, members))
        return parts

    def _recorded_seconds(self, run_dir: Path) -> tuple[float, float]:
        """Training seconds (as the ensemble's summary recorded them) and analysis seconds of one ensemble."""
        summary, done = run_dir / layout.SUMMARY, self.out / ANALYSIS / run_dir.name / DONE
        train = recorded_seconds(summary, "seconds_this_session") if summary.is_file() else 0.0
        analyse = recorded_seconds(done, "seconds") if done.is_file() else 0.0
        return train, analyse


def trained_on_device(run_dir: Path) -> str:
    """The device an ensemble's summary says it trained on, with torch's version where it recorded them (older
    summaries name the device type alone)."""
    summary = layout.read_json(run_dir / layout.SUMMARY) if (run_dir / layout.SUMMARY).is_file() else {}
    where = str(summary.get("device_name") or summary.get("device") or "not recorded")
    return f"{where} (torch {summary['torch']})" if "torch" in summary else where



class TracedPlan(Protocol):
    """What a `TracingStudy`'s plan holds: the SGLD settings, how many checkpoints to trace (None: every
    saved one) and which runs to trace."""

    sgld: SGLDSettings
    llc_checkpoints: int | None
    llc_first_step: int  # the first training step the trace visits (earlier checkpoints are not traced)
    llc_budget: int | None  # SGLD steps a chain within which settings are chosen per ensemble; None: `sgld` as given

    def development_runs(self) -> list[RunConfig]:
        """The runs whose LLC is traced over training."""


class TracingStudy(Study):
    """A study that also traces the LLC over training of its plan's `development_runs()` (`llc_trace`) into
    its `llc_curve` table, at SGLD settings chosen once per ensemble within the plan's `llc_budget`
    (`llc_settings`), and allows for the estimator's bias beside those estimates: the package's
    `tables.summarise(data, llc_bias)` takes it."""

    plan: TracedPlan

    def analysis_stamp(self, runs: list[RunConfig], rules: dict[str, Any] | None = None) -> dict[str, Any]:
        """The base stamp with the SGLD settings, the traced runs, the number of traced checkpoints, the first step
        traced (absent when 0, as before it could be set) and the step budget settings are chosen within (absent for
        the plan's own settings, as before there was a choice): a trace made otherwise is made again."""
        return {**super().analysis_stamp(runs, rules), "sgld": self.plan.sgld.stored_dict(), "development": self.traced(runs),
                "llc_checkpoints": self.plan.llc_checkpoints,
                **({"llc_first_step": self.plan.llc_first_step} if self.plan.llc_first_step else {}),
                **({} if self.plan.llc_budget is None else {"llc_budget": self.plan.llc_budget})}

    def traced(self, runs: list[RunConfig]) -> list[str]:
        """Ids of the runs of `runs` whose LLC is traced over training."""
        return sorted({run.run_id for run in self.plan.development_runs()} & {run.run_id for run in runs})

    def traced_instances(self, runs: list[RunConfig]) -> list[int]:
        """Positions in `runs` (one ensemble's) of the runs whose LLC is traced."""
        ids = set(self.traced(runs))
        return [i for i, run in enumerate(runs) if run.run_id in ids]

    def llc_settings(self, run_dir: Path, folder: Path, runs: list[RunConfig], device: torch.device) -> StudySettings:
        """The SGLD settings of every LLC this study estimates of one ensemble (`study_settings`): the plan's as given,
        or, with an `llc_budget`, chosen on the traced runs of the first training pool among them (else the runs of
        the ensemble's first pool) at their last checkpoint, and saved under `folder`."""
        from headway.analysis.llc.run_calibration import pool_groups
        from headway.analysis.llc.study_settings import study_settings

        members = pool_groups(runs, self.traced_instances(runs) or range(len(runs)))[0]
        return study_settings(run_dir, folder / LLC_TRACE, runs, members, self.plan.sgld, self.plan.llc_budget,
                              device, self.rules.llc_validity(), self.compute.precision,
                              stamp={"version": self.version, **self.precision_stamp()}, deadline=self.deadline,
                              progress=self.progress, compile_mode=self.compute.sampler_compile_mode(device))

    def trace_llc(self, run_dir: Path, folder: Path, runs: list[RunConfig], device: torch.device,
                  chosen: StudySettings, weights: str = "all") -> pd.DataFrame:
        """The `llc_curve` table of one ensemble: the LLC of its traced runs over training at the `chosen` settings
        (`llc_settings`), for each weight group of `weights`, saved checkpoint by checkpoint under `folder` (so a
        time limit stops it between checkpoints and the next call continues it) and tagged like every other table.
        Traced runs on different training pools (fresh data) are traced pool by pool (`trace_folders`)."""
        import pandas as pd

        from headway.analysis.llc.trace import llc_trace

        frames = []
        for group, saved_in in self.trace_folders(folder, runs).items():
            members = list(group)
            frames.append(llc_trace(run_dir, saved_in, runs, members, chosen.settings, self.plan.llc_checkpoints,
                                    device, self.progress, self.schemas["llc_curve"], self.rules.llc_validity(),
                                    weights=weights, tag=lambda frame, members=members: self.tag(frame, runs, members),
                                    stamp={"version": self.version, **self.precision_stamp()},
                                    precision=self.compute.precision, deadline=self.deadline, choice=chosen.reason,
                                    refused=chosen.refused, compile_mode=self.compute.sampler_compile_mode(device),
                                    first_step=self.plan.llc_first_step))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def measure_stability(self, run_dir: Path, folder: Path, runs: list[RunConfig], device: torch.device,
                          chosen: StudySettings, curve: pd.DataFrame,
                          points: tuple[str, str] | None = None) -> pd.DataFrame:
        """The `llc_stability` table of one ensemble: λ̂ of each traced run at half the step and twice the batch
        beside the `chosen` setting, at the two checkpoints of `curve` (its `llc_curve` table) that `points` names
        (default `stability.POINTS`: its first valid and its last; `headway.analysis.llc.stability.llc_stability`),
        pool by pool, saved beside each pool's trace."""
        import pandas as pd

        from headway.analysis.llc.stability import POINTS, llc_stability, stability_steps

        validity = self.rules.llc_validity()
        points = stability_steps(curve, validity, points or POINTS) if len(curve) else {}
        frames = []
        for group, saved_in in self.trace_folders(folder, runs).items():
            wanted = {i: points[runs[index].run_id] for i, index in enumerate(group) if runs[index].run_id in points}
            members = list(group)
            frames.append(llc_stability(run_dir, saved_in, runs, members, wanted, chosen.settings, device, validity,
                                        self.schemas["llc_stability"],
                                        tag=lambda frame, members=members: self.tag(frame, runs, members),
                                        stamp={"version": self.version, **self.precision_stamp()},
                                        precision=self.compute.precision, deadline=self.deadline,
                                        progress=self.progress,
                                        compile_mode=self.compute.sampler_compile_mode(device)))
        return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()

    def trace_folders(self, folder: Path, runs: list[RunConfig]) -> dict[tuple[int, ...], Path]:
        """The traced instances of one ensemble by training pool (`pool_groups`) → the folder under `folder` their
        trace is saved in: `LLC_TRACE` itself for a single pool (as before pools could differ), else a subfolder
        per pool named by its first instance."""
        from headway.analysis.llc.run_calibration import pool_groups

        groups = pool_groups(runs, self.traced_instances(runs))
        if len(groups) == 1:
            return {tuple(groups[0]): folder / LLC_TRACE}
        return {tuple(group): folder / LLC_TRACE / f"pool-from-{group[0]}" for group in groups}

    def summarise(self, data: StudyData) -> Any:
        """The package's `tables.summarise(data, llc_bias)`, with the known-answer suite's bias at the plan's SGLD
        settings (chosen within its `llc_budget` when it has one) when the LLC was traced and the claims weigh it (NaN
        otherwise: `weighs_suite`), against the target the study's LLC claims read (`LLCRules.llc_bias_target`)."""
        from headway.analysis.llc.trace import estimator_bias

        traced = len(data.tables["llc_curve"]) > 0 and self.weighs_suite(data.rules)
        at_scale = not data.rules.llc_resolved_only
        bias = estimator_bias(self.plan.sgld, self.plan.llc_budget, at_scale) if traced else math.nan
        return self.step("tables", "summarise")(data, bias)

    def weighs_suite(self, rules: Any) -> bool:
        """Whether the LLC claims under `rules` weigh the known-answer suite's bias (measured in `summarise`,
        `LLCRules.llc_bias_source`); claims that weigh the models' own stability measure no suite."""
        return rules.llc_bias_source == "suite"


def joined(parts: dict[str, list[pd.DataFrame]]) -> dict[str, pd.DataFrame]:
    """Each table's parts as one frame (an empty frame where it has none)."""
    import pandas as pd

    return {name: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame() for name, frames in parts.items()}


def by_task(runs: list[RunConfig]) -> dict[str, list[int]]:
    """Instance indices grouped by task configuration (one group unless a grid mixed tasks)."""
    groups: dict[str, list[int]] = {}
    for index, run in enumerate(runs):
        groups.setdefault(repr(run.task), []).append(index)
    return groups


def hardware_description(device: str, executor: Executor) -> dict[str, str]:
    """What the study ran on, for the report: the device (as resolved here; under Ray, as requested,
    each worker resolving it), CPU count, torch and Python versions and the executor."""
    import torch

    from headway.execution.devices import device_name, resolve_device

    if executor.name == "local":
        device = device_name(resolve_device(device))
    else:
        device = f"{device}, resolved by each worker"
    return {"device": device, "cpu_count": str(os.cpu_count()), "torch": torch.__version__,
            "python": platform.python_version(), **executor.describe()}


def analyse_ensemble(study: Study, run_dir: Path, device: str, progress: bool) -> None:
    """One ensemble's analysis job: `study.analysed` on `device` as the machine running it resolves it."""
    from headway.execution.devices import resolve_device

    study = copy.copy(study)
    study.progress = progress
    study.analysed(run_dir, resolve_device(device))
