"""`headway data …`: write task examples as JSON Lines for independent checking."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import click

from headway.cli.options import question_options, question_set
from headway.tasks.export import write_jsonl
from headway.tasks.harness import write_harness
from headway.tasks.questions import make_questions, write_questions
from headway.tasks.retrieval import CURRICULA, LAYOUTS, ORDERS, RetrievalConfig, generate
from headway.tasks.sorting import GAP_KINDS, SortingConfig
from headway.tasks.sorting import generate as generate_lists


@click.group()
def data() -> None:
    """Generate task data as JSON Lines."""


@data.command("retrieval")
@click.option("--hops", "-D", type=int, default=RetrievalConfig.hops, show_default=True, help="Hops D per chain.")
@click.option("--chains", "-K", type=int, default=RetrievalConfig.chains, show_default=True, help="Chains K per example.")
@click.option("--vocab", "-V", type=int, default=RetrievalConfig.vocab, show_default=True, help="Number of symbols V.")
@click.option("--layout", type=click.Choice(LAYOUTS), default=RetrievalConfig.layout, show_default=True)
@click.option("--order", type=click.Choice(ORDERS), default=RetrievalConfig.order, show_default=True)
@click.option("--curriculum", type=click.Choice(CURRICULA), default=RetrievalConfig.curriculum, show_default=True)
@click.option("--conditional", is_flag=True, help="The conditional-retrieval variant.")
@click.option("--relations", type=int, default=RetrievalConfig.relations, show_default=True,
              help="Relations (conditional only).")
@click.option("--classes", type=int, default=RetrievalConfig.classes, show_default=True,
              help="Entity classes (conditional only).")
@click.option("-n", "count", type=int, default=10, show_default=True, help="Number of examples.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: standard output).")
def retrieval(hops: int, chains: int, vocab: int, layout: str, order: str, curriculum: str, conditional: bool,
              relations: int, classes: int, count: int, seed: int, out: Path | None) -> None:
    """Retrieval examples: the model's view (tokens, targets) and a structured view to re-solve."""
    cfg = RetrievalConfig(vocab=vocab, chains=chains, hops=hops, layout=layout, order=order,
                          curriculum=curriculum, conditional=conditional, relations=relations, classes=classes)
    _write(cfg, generate(cfg, count, seed), out)  # generation validates everything before a file is opened


@data.command("sorting")
@click.option("--length", "-n", "length", type=int, default=SortingConfig.length, show_default=True,
              help="Numbers per list.")
@click.option("--values", type=int, default=SortingConfig.values, show_default=True,
              help="Numbers are drawn from 0 … VALUES-1.")
@click.option("--repeats/--no-repeats", default=SortingConfig.repeats, show_default=True,
              help="Allow a number more than once in a list.")
@click.option("--gaps", type=click.Choice(GAP_KINDS), default=SortingConfig.gaps, show_default=True,
              help="uniform: numbers drawn uniformly; geometric: gaps drawn with mean --mean-gap.")
@click.option("--mean-gap", type=float, default=SortingConfig.mean_gap, show_default=True,
              help="Mean gap δ̄ between adjacent sorted numbers (geometric gaps only).")
@click.option("--count", "count", type=int, default=10, show_default=True, help="Number of lists.")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Output file (default: standard output).")
def sorting(length: int, values: int, repeats: bool, gaps: str, mean_gap: float, count: int, seed: int,
            out: Path | None) -> None:
    """Sorting examples: the list, its sort, the gaps, and the model's tokens and targets."""
    cfg = SortingConfig(length=length, values=values, repeats=repeats, gaps=gaps, mean_gap=mean_gap)
    _write(cfg, generate_lists(cfg, count, seed), out)


def _write(cfg: RetrievalConfig | SortingConfig, batch, out: Path | None) -> None:
    """Examples as JSON Lines to standard output or, atomically, to a file."""
    if out is None:
        write_jsonl(sys.stdout, cfg, batch)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        write_jsonl(tmp, cfg, batch)
        os.replace(tmp, out)
    finally:
        tmp.unlink(missing_ok=True)
    click.echo(f"wrote {len(batch)} examples to {out}", err=True)


@data.command("prompts")
@question_options
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Folder for questions.jsonl and the lm-evaluation-harness tasks (harness/).")
def prompts(formulations: str, max_hops: int, questions: int, chains: int, n_options: int, seed: int,
            out: Path) -> None:
    """Prompted retrieval questions (F1-F5) as JSON Lines and lm-evaluation-harness task YAML files."""
    spec = question_set(formulations, max_hops, questions, chains, n_options, seed)
    questions_drawn = make_questions(spec)
    count = write_questions(out / "questions.jsonl", questions_drawn)
    tasks = write_harness(out / "harness", questions_drawn)
    click.echo(f"wrote {count} questions to {out / 'questions.jsonl'} and {len(tasks)} task files to "
               f"{out / 'harness'} (lm_eval --include_path {out / 'harness'} --tasks headway_retrieval)", err=True)
