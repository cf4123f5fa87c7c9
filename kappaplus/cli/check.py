"""``kappa check JOB``: each binding's unified schema, where every column comes from, and
every mismatch, checked with Spark's analyzer and the lake files' footers before any query
runs. ``kappa run`` refuses the same mismatches with the same words (exit 2)."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.markup import escape

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import MASTER, METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

_console = Console()


def check_command(
    job: str = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job."),
    config: str = typer.Option(
        None, "--config", "-c", help="Job config TOML (default: <module>.toml next to the job)."
    ),
    master: str = MASTER,
    metastore_uri: str = METASTORE_URI,
) -> None:
    """Show per binding the job's columns, the source expression and type each comes from,
    and name every mismatch (exit 2 if there is one).

    Nothing is read but table metadata and the lake files' footers.
    """
    from kappaplus.cli.run import _stop_quietly, default_config, import_from_cwd
    from kappaplus.cli.run import job_path as resolve_path
    from kappaplus.config import load_config
    from kappaplus.jobs import load_job
    from kappaplus.runtime.binding.unify import describe_bindings

    import_from_cwd()
    try:
        path = resolve_path(job)
        loaded = load_job(path)
        config_file = config or default_config(path)
        if config_file is None:
            raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
        job_config = load_config(config_file)
        spark = command_session(
            f"kappa-check-{loaded.name}", master=master, metastore_uri=metastore_uri
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    try:
        resolutions = describe_bindings(spark, loaded, job_config)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    finally:
        _stop_quietly(spark)
    mismatches = 0
    for resolution in resolutions:
        _console.print(f"[bold]{resolution.binding}[/bold]")
        for source in resolution.columns:
            reads = ", ".join(source.reads) or "-"
            _console.print(f"  {escape(source.line())}  reads {escape(reads)}", highlight=False)
        for line in resolution.mismatches:
            _console.print(f"  [red]mismatch:[/red] {escape(line)}", highlight=False)
        mismatches += len(resolution.mismatches)
    if mismatches:
        raise typer.Exit(2)
    _console.print("every binding fits the job's columns")


def register(app: typer.Typer) -> None:
    """Mount ``kappa check`` on the top-level app."""
    app.command("check")(check_command)
