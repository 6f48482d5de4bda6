"""Command-line options generated from config dataclasses and study plans, so that every setting can
be set or swept under one name in every command; and the refusal of old option spellings."""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from headway.compute import ATTENTION_CHOICES, COMPILE_MODES, PRECISIONS, ComputeSettings
from headway.errors import ConfigError
from headway.execution import EXECUTORS, Executor, make_executor
from headway.limits import MAX_LIST
from headway.settings import parse_setting

if TYPE_CHECKING:  # the prompt questions (numpy) load with the commands that ask them
    from headway.tasks.retrieval.prompts.questions import QuestionSet


def parse_value(name: str, text: str, kind: type) -> Any:
    """One value of setting `name` from the command line (`headway.settings.parse_setting`, named by its flag)."""
    return parse_setting(option_flag(name), text, kind)


def parse_values(name: str, text: str, kind: type) -> list[Any]:
    """A comma-separated list of values; integers also accept an inclusive range `A..B`. At most
    `MAX_LIST` values, counted before a range is spelled out."""
    values: list[Any] = []
    flag = option_flag(name)
    for part in text.split(","):
        if kind is int and ".." in part:
            lo, hi = (parse_value(name, p, int) for p in part.split("..", 1))
            if lo is None or hi is None:
                raise ConfigError(f"{flag} range {part!r} needs two whole numbers; write LOW..HIGH")
            if hi < lo:
                raise ConfigError(f"{flag} range {part!r} is empty; write LOW..HIGH")
            if hi - lo + 1 > MAX_LIST - len(values):
                raise ConfigError(f"{flag} range {part!r} holds {hi - lo + 1} values; a list holds at most {MAX_LIST}")
            values.extend(range(lo, hi + 1))
        else:
            values.append(parse_value(name, part, kind))
    if len(values) > MAX_LIST:
        raise ConfigError(f"{flag} lists {len(values)} values; a list holds at most {MAX_LIST}")
    return check_distinct(flag, values)


def check_distinct(flag: str, values: list[Any]) -> list[Any]:
    """`values` of option `flag`, refused when one is given twice (a list sweeps them: it would repeat runs)."""
    seen: set[Any] = set()
    for value in values:
        if value in seen:
            raise ConfigError(f"{flag} lists {value!r} twice; give each value once")
        seen.add(value)
    return values


class OutputPath(click.Path):
    """A path a command writes to, checked when parsed (docs/cli.md#output-paths): not empty, all UTF-8, no
    symlink loop, not a device, FIFO or socket, and a folder (or file) that exists and is writable, or that can be
    created; a folder of `kind` must be new, empty or one a command of that kind wrote (`headway.runs.owner`), and
    a file must lie outside every folder a command owns. A symlink is followed: the path given back is where the
    write lands, the link's target (the link stays)."""

    def __init__(self, folder: bool, kind: str | None = None) -> None:
        """`folder`: the path names a folder to write into, else a file; `kind`: the kind of folder the command
        writes (`headway.runs.owner`; None for a file)."""
        super().__init__(file_okay=not folder, dir_okay=folder, path_type=Path)
        self.folder, self.kind = folder, kind

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Path:
        """Where the write lands, or a one-line refusal naming the option and what is wrong with the path."""
        from headway.runs.owner import owner_problem
        from headway.files import landing, shown, special_problem, text_problem

        if isinstance(value, str) and not value.strip():
            self.fail(f"the path is empty; give a {'folder' if self.folder else 'file'}", param, ctx)
        problem = text_problem(value)
        if problem:
            self.fail(problem, param, ctx)
        path = target = Path(super().convert(value, param, ctx))
        try:
            target = landing(path)
            problem = special_problem(target) or writable_problem(target) or owner_problem(target, self.kind)
        except ConfigError as err:
            problem = str(err)
        except OSError as err:  # a folder on the way that cannot be listed
            problem = f"{shown(path)} cannot be reached ({err.strerror})"
        if problem:
            self.fail(problem if target == path else f"{shown(path)} leads to {shown(target)}: {problem}", param, ctx)
        return target


def writable_problem(path: Path) -> str | None:
    """Why `path` cannot be written, or None when it can: it exists and is writable, or its nearest existing
    parent is a writable folder. (Whether an existing path is a folder or a file, click's Path checks.)"""
    try:
        target = path if path.exists() else next(parent for parent in path.absolute().parents if parent.exists())
    except OSError as err:  # a parent that cannot be searched
        return f"{path} cannot be reached ({err.strerror})"
    if target != path and not target.is_dir():
        return f"{target} is a file, so {path} cannot be created under it"
    if not os.access(target, os.W_OK | os.X_OK if target.is_dir() else os.W_OK):
        return f"{target} is not writable here (read-only, or not yours)"
    return None


def option_flag(name: str) -> str:
    """The option spelling of a setting or field name: `weight_decay` -> `--weight-decay`."""
    return "--" + name.replace("_", "-")


def setting_option(name: str, kind: type, help: str, metavar: str = "V[,V…]") -> click.Option:
    """`--name VALUE(S)` for one setting, passed as text (parse with parse_values); a boolean setting
    given without a value means true."""
    extra = {"is_flag": False, "flag_value": "true"} if kind is bool else {}
    return click.Option([option_flag(name), name], default=None, metavar=metavar, help=help, **extra)


def sweep_options(settings: dict[str, type], help_for: Callable[[str], str]) -> Callable:
    """Decorator adding `--name VALUES` for every setting (comma lists sweep)."""

    def decorate(func: Callable) -> Callable:
        params = getattr(func, "__click_params__", [])
        params.extend(reversed([setting_option(name, kind, help_for(name)) for name, kind in settings.items()]))
        func.__click_params__ = params
        return func

    return decorate


def renamed_options(renames: dict[str, str], flags: tuple[str, ...] = ()) -> Callable:
    """Decorator adding hidden options under old spellings (`renames`: old -> what to use instead) that
    end the command with a one-line hint; `flags` are old spellings that took no value."""

    def refuse(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value not in (None, False):
            old = param.opts[0]
            raise click.UsageError(f"option {old} was renamed; use {renames[old]}", ctx)

    def decorate(func: Callable) -> Callable:
        params = getattr(func, "__click_params__", [])
        for old in renames:
            params.append(click.Option([old], hidden=True, expose_value=False, callback=refuse,
                                       is_flag=old in flags, default=None if old not in flags else False))
        func.__click_params__ = params
        return func

    return decorate


def question_options(command: click.Command) -> click.Command:
    """The options that choose the questions, shared by `llm-eval` and `data prompts`."""
    from headway.tasks.retrieval.prompts.questions import QuestionSet

    options = [
        click.option("--formulations", "-f", default="all", show_default=True,
                     help="F1 assign, F2 code, F3 boxes, F4 wizards, F5 relatives: keys or names, comma list."),
        click.option("--max-hops", type=int, default=QuestionSet.max_hops, show_default=True,
                     help="Ask about 1..MAX_HOPS hops."),
        click.option("--questions", type=int, default=QuestionSet.questions, show_default=True,
                     help="Questions per formulation and hop count."),
        click.option("--chains", type=int, default=QuestionSet.chains, show_default=True,
                     help="Chains per question (the queried one plus distractors)."),
        click.option("--options", "n_options", type=int, default=QuestionSet.options, show_default=True,
                     help="Options per multiple-choice question (F1-F4)."),
        click.option("--seed", type=int, default=QuestionSet.seed, show_default=True),
    ]
    for option in reversed(options):
        command = option(command)
    return renamed_options({"-n": "--questions"})(command)


def question_set(formulations: str, max_hops: int, questions: int, chains: int, n_options: int,
                 seed: int) -> QuestionSet:
    """The QuestionSet the shared options describe."""
    from headway.tasks.retrieval.prompts.formulations import parse_formulations
    from headway.tasks.retrieval.prompts.questions import QuestionSet

    keys = tuple(f.key for f in parse_formulations(formulations))
    return QuestionSet(formulations=keys, max_hops=max_hops, questions=questions, chains=chains, options=n_options,
                       seed=seed)


EXECUTOR_OPTIONS = ("executor", "ray_address", "ray_cpus", "ray_gpus", "ray_memory", "ray_retries")


def executor_params() -> list[click.Option]:
    """Where the ensembles run: `--executor local|ray` and the Ray task's address and resources."""
    return [
        click.Option(["--executor"], type=click.Choice(EXECUTORS), default="local", show_default=True,
                     help="Run the ensembles here one after another, or as tasks on a Ray cluster (docs/cluster.md)."),
        click.Option(["--ray-address"], default=None, metavar="HOST:PORT",
                     help="Ray cluster to join (HOST:PORT, ray://HOST:PORT or auto); default: RAY_ADDRESS, else a "
                          "Ray instance on this machine."),
        click.Option(["--ray-cpus"], type=float, default=None,
                     help="CPUs each ensemble task reserves (also its torch threads) [default: 1]."),
        click.Option(["--ray-gpus"], type=float, default=None,
                     help="GPUs each ensemble task reserves (fractions share a GPU) [default: 1 if the cluster has "
                          "GPUs and the device may be one, else 0]."),
        click.Option(["--ray-memory"], default=None, metavar="SIZE",
                     help="Memory each ensemble task reserves, e.g. 4GiB [default: an estimate per ensemble]."),
        click.Option(["--ray-retries"], type=int, default=None,
                     help="Times a task is retried after its worker or node is lost (it resumes from its checkpoint) "
                          "[default: 3]."),
    ]


def options_decorator(make_params: Callable[[], list[click.Option]]) -> Callable[[Callable], Callable]:
    """A decorator adding the options `make_params` builds to a click command function."""
    def add(func: Callable) -> Callable:
        params = getattr(func, "__click_params__", [])
        params.extend(reversed(make_params()))
        func.__click_params__ = params
        return func
    return add


executor_options = options_decorator(executor_params)


def pop_executor(values: dict[str, Any]) -> Executor:
    """The executor the executor options in `values` describe (they are removed from `values`)."""
    given = {name: values.pop(name) for name in EXECUTOR_OPTIONS}
    return make_executor(given["executor"], given["ray_address"], given["ray_cpus"], given["ray_gpus"],
                         given["ray_memory"], given["ray_retries"])


def compute_params() -> list[click.Option]:
    """How each step is computed: `--precision`, `--compile` and `--attention-kernel` (`headway.compute`)."""
    return [
        click.Option(["--precision"], type=click.Choice(PRECISIONS), default="auto", show_default=True,
                     help="Training, evaluation and LLC sampling: fp32, tf32 (CUDA matmuls), bf16 autocast, or auto "
                          "(bf16 on CUDA, fp32 on the CPU); weights and optimiser state stay fp32."),
        click.Option(["--compile"], type=click.Choice(COMPILE_MODES), default="auto", show_default=True,
                     help="torch.compile the training step (and a study's LLC sampling): on, off, graphs (also CUDA "
                          "graphs; CUDA only) or auto (on for CUDA; on the CPU for training large and long enough to repay "
                          "compiling, docs/performance.md); falls back to eager with a warning if compiling fails."),
        click.Option(["--attention-kernel"], type=click.Choice(ATTENTION_CHOICES), default="auto", show_default=True,
                     help="Attention kernel: sdpa (torch's fused kernel), matmul (two batched matrix products and "
                          "a softmax; the same numbers to float rounding) or auto (per pass, the faster one measured "
                          "for the device, sequence length and whether gradients are taken; docs/performance.md)."),
    ]


compute_options = options_decorator(compute_params)


def pop_compute(values: dict[str, Any]) -> ComputeSettings:
    """The compute settings the compute options in `values` describe (they are removed from `values`)."""
    return ComputeSettings(precision=values.pop("precision"), compile=values.pop("compile"),
                           attention_kernel=values.pop("attention_kernel"))


def check_compute(compute: ComputeSettings, executor: Executor, device: str, here: bool = True) -> None:
    """Refuse, before anything runs, compute settings the device cannot take (tf32 or CUDA graphs on a
    CPU); under a cluster executor each worker resolves its own device, so nothing is checked here. `here` False
    (a dry run, which may plan for another machine): the device must be one, not necessarily this machine's."""
    from headway.execution.devices import resolve_device

    if executor.name == "local":
        compute.describe(resolve_device(device, here))


def memory_check_params() -> list[click.Option]:
    """`--no-memory-check`: go ahead even where the memory estimated beforehand exceeds what the device can give."""
    return [click.Option(["--memory-check/--no-memory-check"], default=True, show_default=True,
                         help="Refuse work whose memory, estimated before anything is allocated, exceeds what the "
                              "device can give now (docs/cli.md#limits); --no-memory-check tries anyway.")]


memory_check_options = options_decorator(memory_check_params)


def check_training_memory(runs: list, executor: Executor, device: str, enabled: bool) -> None:
    """Refuse, unless `enabled` is off, runs one of which this machine's `device` cannot hold to train
    (`headway.train.capacity.check_training_fits`); a cluster's workers are other machines, so not under Ray."""
    if enabled and executor.name == "local":
        from headway.execution.devices import resolve_device
        from headway.train.capacity import check_training_fits

        check_training_fits(runs, resolve_device(device))


def time_limit_params() -> list[click.Option]:
    """`--time-limit MINUTES`: stop, saved, after that long; the same command continues (docs/cli.md)."""
    return [click.Option(["--time-limit"], default=None, metavar="MINUTES",
                         help="Stop after MINUTES: training saves its state, no further ensemble or analysis "
                              "starts, and the command exits with status 75; run it again to continue.")]


time_limit_options = options_decorator(time_limit_params)


def pop_deadline(values: dict[str, Any]) -> float | None:
    """The `time.time()` at which `--time-limit` in `values` runs out (removed from `values`): now + minutes·60;
    None without one. A value that is not a number above 0 is refused."""
    text = values.pop("time_limit")
    if text is None:
        return None
    try:
        minutes = float(text)
    except ValueError:
        minutes = math.nan
    if not (math.isfinite(minutes) and minutes > 0):
        raise ConfigError(f"--time-limit got {text!r}; give the minutes to run, a number above 0 (e.g. 9)")
    return time.time() + 60 * minutes
