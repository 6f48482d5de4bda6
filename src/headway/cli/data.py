"""`headway data …`: write task examples as JSON Lines for independent checking.

One sub-command per registered task, its options generated from the task's settings (one value
each), plus the prompted questions for language models (`data prompts`)."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import click

from headway.cli.options import (OutputPath, memory_check_params, option_flag, parse_value, question_options,
                                 question_set, renamed_options)
from headway.errors import ConfigError
from headway.limits import MAX_EXAMPLES, MAX_SEED
from headway.runs.owner import DATA_PROMPTS, claim
from headway.settings import check_int, field_types
from headway.tasks.base import Batch, Task
from headway.tasks.export import write_jsonl
from headway.tasks.registry import TASKS

# Old spellings, refused with a hint: `-n` meant the example count of `data retrieval` but the list
# length of `data sorting`; every count is now --count.
RENAMED = {
    "retrieval": {"-n": "--count (the number of examples)", "-D": "--hops", "-K": "--chains", "-V": "--vocab"},
    "sorting": {"-n": "--length (numbers per list) or --count (the number of lists)",
                "--no-repeats": "--repeats false"},
}
FLAGS = ("--no-repeats",)


@click.group()
def data() -> None:
    """Generate task data as JSON Lines."""


def task_command(cls: type[Task]) -> click.Command:
    """`headway data NAME`: examples of the registered task `cls`, one option per setting."""
    kinds = field_types(cls)
    defaults = {f.name: f.default for f in dataclasses.fields(cls)}

    def command(count: int, seed: int, out: Path | None, memory_check: bool, **settings: str | None) -> None:
        import numpy as np

        from headway.execution.memory import check_fits

        values = {name: parse_value(name, text, kinds[name]) for name, text in settings.items() if text is not None}
        cfg = cls(**values)
        count = check_int("--count", count, 1, MAX_EXAMPLES)
        seed = check_int("--seed", seed, 0, MAX_SEED)
        held, written = _example_sizes(cfg)
        if memory_check:
            check_fits(count * held, "cpu", f"--count {count} examples", "--count")
        if out is not None:
            _check_disk(out, count * written, count)
        batch = cfg.draw(count, np.random.default_rng(seed))  # validates before a file is opened
        _write(cfg, batch, out)

    params = [click.Option([option_flag(name), name], default=None, metavar="VALUE",
                           help=f"{name.replace('_', ' ')} [default: {defaults[name]}]",
                           **({"is_flag": False, "flag_value": "true"} if kind is bool else {}))
              for name, kind in kinds.items()]
    params += [
        click.Option(["--count"], type=int, default=10, show_default=True, help="Number of examples."),
        click.Option(["--seed"], type=int, default=0, show_default=True),
        click.Option(["--out"], type=OutputPath(folder=False), default=None,
                     help="Output file (default: standard output)."),
        *memory_check_params(),
    ]
    command = renamed_options(RENAMED.get(cls.name, {}), FLAGS)(command)
    params += command.__click_params__
    return click.Command(cls.name, params=params, callback=command,
                         help=f"Examples of the {cls.name} task: {cls.summary}. Every record holds the model's "
                              "tokens and targets and a structured view to check them independently.")


def _example_sizes(cfg: Task, sample: int = 256) -> tuple[int, int]:
    """Bytes one example of `cfg` holds while a batch is drawn, and bytes of its JSON line, measured on `sample`
    examples (from a generator of their own); the first is doubled: chunks drawn apart are joined into one batch
    at the end."""
    import io

    import numpy as np

    batch = cfg.draw(sample, np.random.default_rng(0))
    arrays = [getattr(batch, f.name) for f in dataclasses.fields(batch)]
    lines = io.StringIO()
    write_jsonl(lines, cfg, batch)
    return (2 * -(-sum(a.nbytes for a in arrays if isinstance(a, np.ndarray)) // sample),
            -(-len(lines.getvalue().encode("utf-8")) // sample))


def _check_disk(out: Path, needed: int, count: int) -> None:
    """Refuse, before drawing, examples whose JSON lines (`needed` bytes, projected) the disk holding `out`
    has no room for (the file is written beside it, then renamed)."""
    import shutil

    folder = next(parent for parent in (out.absolute(), *out.absolute().parents) if parent.is_dir())
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise ConfigError(f"--count {count} examples write about {_size(needed)} to {out}, more than the "
                          f"{_size(free)} free on its disk; lower --count or free space")


def _size(count: int) -> str:
    """A byte count in GB, or in MB below one GB, as a refusal quotes it."""
    return f"{count / 1e9:,.1f} GB" if count >= 1e9 else f"{count / 1e6:,.1f} MB"


def _write(cfg: Task, batch: Batch, out: Path | None) -> None:
    """Examples as JSON Lines to standard output or, atomically, to a file."""
    if out is None:
        write_jsonl(sys.stdout, cfg, batch)
        return
    write_jsonl(out, cfg, batch)
    click.echo(f"wrote {len(batch)} examples to {out}", err=True)


for _cls in TASKS.classes():
    data.add_command(task_command(_cls))


@data.command("prompts")
@question_options
@click.option("--out", type=OutputPath(folder=True, kind=DATA_PROMPTS), required=True,
              help="Folder for questions.jsonl and the lm-evaluation-harness tasks (harness/).")
def prompts(formulations: str, max_hops: int, questions: int, chains: int, n_options: int, seed: int,
            out: Path) -> None:
    """Prompted retrieval questions (F1-F5) as JSON Lines and lm-evaluation-harness task YAML files."""
    from headway.progress import progress
    from headway.tasks.retrieval.prompts.harness import write_harness
    from headway.tasks.retrieval.prompts.questions import check_renderable, make_questions, write_questions

    spec = question_set(formulations, max_hops, questions, chains, n_options, seed)
    check_renderable(spec)  # names each formulation needs, and the text it would draw, before drawing
    with progress(len(spec.formulations) * len(spec.hops), "drawing questions", "cell") as bar:
        questions_drawn = make_questions(spec, progress=bar.update)
    claim(out, DATA_PROMPTS)
    click.echo(f"writing {len(questions_drawn)} questions and their lm-evaluation-harness tasks to {out}", err=True)
    count = write_questions(out / "questions.jsonl", questions_drawn)
    tasks = write_harness(out / "harness", questions_drawn)
    click.echo(f"wrote {count} questions to {out / 'questions.jsonl'} and {len(tasks)} task files to "
               f"{out / 'harness'}; score a model on them with lm-evaluation-harness (docs/llm-eval.md):\n"
               f"{harness_command(out / 'harness')}", err=True)


def harness_command(folder: Path, model_args: str = "pretrained=MODEL") -> str:
    """The lm-eval command that scores a model on the tasks in `folder` (MODEL: a model folder or hub id)."""
    return f"lm-eval run --model hf --model_args {model_args} --include_path {folder} --tasks headway_retrieval"
