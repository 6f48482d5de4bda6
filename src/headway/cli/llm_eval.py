"""`headway llm-eval`: ask a language model the prompted retrieval questions and report accuracy vs hops."""

from __future__ import annotations

from pathlib import Path

import click
import pandas as pd
from click.core import ParameterSource

from headway.cli.options import question_options, question_set
from headway.llm.evaluate import SCORINGS
from headway.llm.run import BACKENDS, BackendSettings, rewrite_outputs, run_llm_eval


@click.command("llm-eval")
@click.option("--model", "-m", default=None,
              help="hf/vllm: a model folder, a .gguf file or an alias (smollm2-135m). http: the served model "
                   "name (default: $OPENAI_MODEL, else the server's first model).")
@click.option("--backend", "-b", type=click.Choice(BACKENDS), default="hf", show_default=True)
@question_options
@click.option("--scoring", type=click.Choice(SCORINGS), default="loglik", show_default=True,
              help="loglik: options by log-likelihood (acc, acc_norm); generate: parse a chat reply; both.")
@click.option("--max-tokens", type=click.IntRange(min=1), default=24, show_default=True,
              help="Reply length in generate mode.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
              help="Output folder; re-running resumes from its response cache.")
@click.option("--base-url", envvar="OPENAI_BASE_URL", default=None,
              help="http: the server's base URL [env OPENAI_BASE_URL; default http://127.0.0.1:8000/v1].")
@click.option("--api-key", envvar="OPENAI_API_KEY", default=None, help="http: API key [env OPENAI_API_KEY].")
@click.option("--timeout", type=float, default=60.0, show_default=True, help="http: seconds per request.")
@click.option("--retries", type=int, default=3, show_default=True, help="http: retries with exponential backoff.")
@click.option("--concurrency", type=int, default=4, show_default=True, help="http: requests in flight at once.")
@click.option("--device", default="cpu", show_default=True, help="hf: cpu, cuda, cuda:1, …")
@click.option("--batch-size", type=int, default=8, show_default=True, help="hf: sequences per forward (1: off).")
@click.option("--add-bos", is_flag=True, help="hf/vllm: put the BOS token before scored texts (match a server "
                                               "that adds one).")
@click.option("--progress/--no-progress", default=True, help="Progress bar with time left.")
@click.option("--rewrite-report", is_flag=True,
              help="Ask no model: rewrite results.csv, summary.json and report.html in --out from its "
                   "predictions.csv and the question settings in its summary.json.")
@click.pass_context
def llm_eval(ctx: click.Context, model: str | None, backend: str, formulations: str, max_hops: int, questions: int,
             chains: int, n_options: int, seed: int, scoring: str, max_tokens: int, out: Path, base_url: str | None,
             api_key: str | None, timeout: float, retries: int, concurrency: int, device: str, batch_size: int,
             add_bos: bool, progress: bool, rewrite_report: bool) -> None:
    """Prompted retrieval questions (F1-F5) for any model: accuracy vs hops, figure, tables and report."""
    if rewrite_report:
        _rewrite(ctx, out)
        return
    spec = question_set(formulations, max_hops, questions, chains, n_options, seed)
    settings = BackendSettings(backend=backend, model=model, base_url=base_url, api_key=api_key, device=device,
                               batch_size=batch_size, add_bos=add_bos, timeout=timeout, retries=retries,
                               concurrency=concurrency)
    try:
        result = run_llm_eval(spec, settings, out, scoring=scoring, max_tokens=max_tokens, show_progress=progress)
    except KeyboardInterrupt:
        click.echo(f"headway: interrupted; answers so far are cached in {out / 'cache.sqlite'}; "
                   f"run the same command again to resume", err=True)
        raise click.exceptions.Exit(130) from None
    meta = result.meta
    click.echo(f"{meta['questions']} questions in {meta['seconds']} s ({meta['cache_hits']} answers from the cache); "
               f"report: {out / 'report.html'}", err=True)
    _echo_results(result.results)


def _rewrite(ctx: click.Context, out: Path) -> None:
    """`--rewrite-report`: refuse the options it would ignore, rewrite the folder's tables and report, print them."""
    flags = {param.name: "/".join(param.opts[:1] + param.secondary_opts) for param in ctx.command.params}
    ignored = [flags[name] for name in ctx.params if name not in ("out", "rewrite_report")
               and ctx.get_parameter_source(name) is ParameterSource.COMMANDLINE]
    if ignored:
        raise click.UsageError(f"--rewrite-report takes every setting from {out / 'summary.json'}; "
                               f"drop {', '.join(ignored)}", ctx)
    result = rewrite_outputs(out)
    click.echo(f"results.csv, summary.json and report.html rewritten from {len(result.per_question)} predictions "
               f"(no model asked); report: {out / 'report.html'}", err=True)
    _echo_results(result.results)


def _echo_results(results: pd.DataFrame) -> None:
    """One line per formulation × hops × metric: accuracy, Wilson interval and chance."""
    for row in results.itertuples():
        click.echo(f"{row.formulation} hops={row.hops} {row.metric}={row.accuracy:.3f} "
                   f"[{row.ci_low:.3f}, {row.ci_high:.3f}] chance={row.chance:.3f}")
