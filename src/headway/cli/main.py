"""`headway …`: the command-line entry point. Bad input exits with status 2 and one line."""

from __future__ import annotations

import sys

import click

from headway.errors import ConfigError, Interrupted, JobsFailed, TimeLimitReached

TIME_LIMIT_EXIT = 75  # EX_TEMPFAIL: stopped at --time-limit with everything saved; the same command continues


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="headway")
def cli() -> None:
    """Grow small transformers on algorithmic tasks and measure the circuits they form."""


def _register() -> None:
    from headway.cli import data, demo, export, llm_eval, reach, show, study, train

    cli.add_command(data.data)
    cli.add_command(train.train)
    cli.add_command(show.show)
    cli.add_command(demo.demo)
    cli.add_command(study.study)
    cli.add_command(llm_eval.llm_eval)
    cli.add_command(export.export)
    cli.add_command(reach.reach)


_register()


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map user errors to one line on stderr and exit status 2."""
    try:
        cli.main(args=argv, prog_name="headway", standalone_mode=False)
    except click.exceptions.Exit as done:
        return done.exit_code
    except click.exceptions.Abort:
        click.echo("headway: aborted", err=True)
        return 130
    except click.UsageError as err:
        hint = f" (try '{err.ctx.command_path} --help')" if err.ctx else ""
        click.echo(f"headway: error: {err.format_message()}{hint}", err=True)
        return 2
    except click.ClickException as err:
        click.echo(f"headway: error: {err.format_message()}", err=True)
        return err.exit_code
    except ConfigError as err:
        click.echo(f"headway: error: {err}", err=True)
        return 2
    except JobsFailed as err:
        click.echo(f"headway: error: {err}", err=True)
        return 1
    except TimeLimitReached as err:
        click.echo(f"headway: {err}", err=True)
        return TIME_LIMIT_EXIT
    except Interrupted as err:
        click.echo(f"headway: {err}", err=True)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
