"""`headway llm-eval`: ask a language model the prompted retrieval questions and report accuracy vs hops."""

from __future__ import annotations

import signal
from pathlib import Path

from typing import TYPE_CHECKING

import click
from click.core import ParameterSource

from headway.cli.options import OutputPath, question_options, question_set
from headway.errors import stop_signal
from headway.limits import MAX_REPLY_TOKENS
from headway.llm.backend import BACKENDS
from headway.llm.scoring import SCORINGS
from headway.runs.owner import LLM_EVAL

if TYPE_CHECKING:  # pandas and the backends load when the command runs, not when its options are parsed
    import pandas as pd


@click.command("llm-eval")
@click.option("--model", "-m", default=None,
              help="hf/vllm: a model folder, a .gguf file or an alias (smollm2-135m). http: the served model "
                   "name (default: $OPENAI_MODEL, else the server's first model).")
@click.option("--backend", "-b", type=click.Choice(BACKENDS), default="hf", show_default=True)
@question_options
@click.option("--scoring", type=click.Choice(SCORINGS), default="loglik", show_default=True,
              help="loglik: options by log-likelihood (acc, acc_norm); generate: parse a chat reply; both.")
@click.option("--max-tokens", type=click.IntRange(min=1, max=MAX_REPLY_TOKENS), default=24, show_default=True,
              help="Reply length in generate mode.")
@click.option("--out", type=OutputPath(folder=True, kind=LLM_EVAL), required=True,
              help="Output folder; re-running resumes from its response cache.")
@click.option("--base-url", envvar="OPENAI_BASE_URL", default=None,
              help="http: the server's base URL [env OPENAI_BASE_URL; default http://127.0.0.1:8000/v1].")
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="http: API key [env OPENAI_API_KEY].")
@click.option("--timeout", type=float, default=60.0, show_default=True,
              help="http: deadline of each request in seconds, the whole of it (reading the reply included).")
@click.option("--retries", type=int, default=3, show_default=True, help="http: retries with exponential backoff.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="http: requests in flight at once.")
@click.option("--device", default="cpu", show_default=True, help="hf: cpu, cuda, cuda:1, …")
@click.option("--batch-size", type=int, default=8, show_default=True, help="hf: sequences per forward (1: off).")
@click.option("--add-bos", is_flag=True, help="hf/vllm: put the BOS token before scored texts (match a server "
                                               "that adds one).")
@click.option("--progress/--no-progress", default=True, help="Progress bar with time left.")
@click.option("--rewrite-report", is_flag=True,
              help="Ask no model: rewrite results.csv, groups.csv, summary.json and report.html in --out from its "
                   "predictions.csv and the question settings in its summary.json.")
@click.option("--adopt-unchecked", is_flag=True,
              help="With --rewrite-report: take a folder written before headway checksummed its outputs as it is, "
                   "and write its tables with checksums (docs/llm-eval.md, Outputs).")
@click.pass_context
def llm_eval(ctx: click.Context, model: str | None, backend: str, formulations: str, max_hops: int, questions: int,
             chains: int, n_options: int, seed: int, scoring: str, max_tokens: int, out: Path, base_url: str | None,
             api_key: str | None, timeout: float, retries: int, concurrency: int, device: str, batch_size: int,
             add_bos: bool, progress: bool, rewrite_report: bool, adopt_unchecked: bool) -> None:
    """Prompted retrieval questions (F1-F5) for any model: accuracy vs hops, figure, tables and report."""
    from headway.llm.run import BackendSettings, run_llm_eval

    if rewrite_report:
        _rewrite(ctx, out, adopt_unchecked)
        return
    if adopt_unchecked:
        raise click.UsageError("--adopt-unchecked goes with --rewrite-report only", ctx)
    _refuse_unused(ctx, backend)
    spec = question_set(formulations, max_hops, questions, chains, n_options, seed)
    settings = BackendSettings(backend=backend, model=model, base_url=base_url, api_key=api_key, device=device,
                               batch_size=batch_size, add_bos=add_bos, timeout=timeout, retries=retries,
                               concurrency=concurrency)
    try:
        result = run_llm_eval(spec, settings, out, scoring=scoring, max_tokens=max_tokens, show_progress=progress)
    except KeyboardInterrupt as stop:  # Ctrl-C, or SIGTERM / SIGHUP (`Stopped`)
        signum = stop_signal(stop)
        how = "interrupted" if signum == signal.SIGINT else f"stopped by {signal.Signals(signum).name}"
        click.echo(f"headway: {how}; answers so far are cached in {out / 'cache.sqlite'}; "
                   f"run the same command again to resume", err=True)
        raise click.exceptions.Exit(128 + signum) from None
    meta = result.meta
    click.echo(f"{meta['questions']} questions in {meta['seconds']} s ({meta['cache_hits']} answers from the cache); "
               f"report: {out / 'report.html'}", err=True)
    _echo_results(result.results, result.groups)


# The options each backend uses besides the questions, scoring and output (the others are refused when given).
BACKEND_OPTIONS = {"hf": ("model", "device", "batch_size", "add_bos"), "vllm": ("model", "add_bos"),
                   "http": ("model", "base_url", "api_key", "timeout", "retries", "concurrency")}
ANY_BACKEND = ("backend", "formulations", "max_hops", "questions", "chains", "n_options", "seed", "scoring",
               "max_tokens", "out", "progress")


def _given(ctx: click.Context, keep: tuple[str, ...]) -> list[str]:
    """The options given on the command line other than `keep`, as spelt there."""
    flags = {param.name: "/".join(param.opts[:1] + param.secondary_opts) for param in ctx.command.params}
    return [flags[name] for name in ctx.params
            if name not in keep and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]


def _refuse_unused(ctx: click.Context, backend: str) -> None:
    """Refuse options given on the command line that the chosen backend does not use (they would be ignored)."""
    unused = _given(ctx, ANY_BACKEND + BACKEND_OPTIONS[backend])
    if unused:
        raise click.UsageError(f"{', '.join(unused)} do(es) not apply to the {backend} backend; drop it, or choose "
                               "the backend it belongs to", ctx)


def _rewrite(ctx: click.Context, out: Path, adopt: bool) -> None:
    """`--rewrite-report`: refuse the options it would ignore, rewrite the folder's tables and report, print them."""
    from headway.llm.run import rewrite_outputs

    ignored = _given(ctx, ("out", "rewrite_report", "adopt_unchecked"))
    if ignored:
        raise click.UsageError(f"--rewrite-report takes every setting from {out / 'summary.json'}; "
                               f"drop {', '.join(ignored)}", ctx)
    result = rewrite_outputs(out, adopt_unchecked=adopt)
    click.echo(f"results.csv, groups.csv, summary.json and report.html rewritten from {len(result.per_question)} "
               "predictions "
               f"(no model asked); report: {out / 'report.html'}", err=True)
    _echo_results(result.results, result.groups)


def _echo_results(results: pd.DataFrame, groups: pd.DataFrame) -> None:
    """One line per formulation × hops × metric, then per formulation and overall (lm-eval's group scores, named
    as lm-eval names them): accuracy, Wilson interval and (mean) chance."""
    for row in results.itertuples():
        click.echo(f"{row.formulation} hops={row.hops} {row.metric}={row.accuracy:.3f} "
                   f"[{row.ci_low:.3f}, {row.ci_high:.3f}] chance={row.chance:.3f}")
    for row in groups.itertuples():
        click.echo(f"{row.formulation} hops=all {row.metric}={row.accuracy:.3f} [{row.ci_low:.3f}, {row.ci_high:.3f}] "
                   f"chance={row.chance:.3f} n={row.n} ({row.group})")
