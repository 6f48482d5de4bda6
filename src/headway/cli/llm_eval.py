"""`headway llm-eval`: ask a language model the prompted retrieval questions and report accuracy vs hops."""

from __future__ import annotations

from pathlib import Path

import click

from headway.cli.options import question_options, question_set
from headway.llm.evaluate import SCORINGS
from headway.llm.run import BACKENDS, BackendSettings, run_llm_eval


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
def llm_eval(model: str | None, backend: str, formulations: str, max_hops: int, questions: int, chains: int,
             n_options: int, seed: int, scoring: str, max_tokens: int, out: Path, base_url: str | None,
             api_key: str | None, timeout: float, retries: int, concurrency: int, device: str, batch_size: int,
             add_bos: bool, progress: bool) -> None:
    """Prompted retrieval questions (F1-F5) for any model: accuracy vs hops, figure, tables and report."""
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
    for row in result.results.itertuples():
        click.echo(f"{row.formulation} hops={row.hops} {row.metric}={row.accuracy:.3f} "
                   f"[{row.ci_low:.3f}, {row.ci_high:.3f}] chance={row.chance:.3f}")
