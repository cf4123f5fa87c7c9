"""``kappa promote``: put a finished, reconciled backfill table in front of readers."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

_console = Console()
_CONFIG = typer.Option(None, "--config", "-c", help="Job config TOML.")
_CHECKPOINT = typer.Option(
    None, "--checkpoint", help="Checkpoint root of the runs (default: the config's)."
)


def _load(job: str, config: Path | None) -> tuple[Any, Any]:
    from kappaplus.cli.run import default_config, job_path
    from kappaplus.config import load_config
    from kappaplus.jobs import load_job

    path = job_path(job)
    loaded = load_job(path)
    config_file = config or default_config(path)
    if config_file is None:
        raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
    return loaded, load_config(config_file)


def _command(
    job: str, output: str, config: Path | None, checkpoint: Path | None, metastore_uri: str | None
) -> str:
    """This command line again for ``output``, with every option that says where things
    are (config, checkpoint root, metastore), so it runs as printed from the same folder."""
    words = ["kappa", "promote", job, "--output", output]
    if config is not None:
        words += ["--config", str(config)]
    if checkpoint is not None:
        words += ["--checkpoint", str(checkpoint)]
    if metastore_uri:
        words += ["--metastore-uri", metastore_uri]
    return shlex.join(words)


def _print_journal(job: Any, config: Any, output: str | None, checkpoint: Path | None) -> None:
    """``--status``: the output's promotion journal as JSON (``{}`` when none)."""
    from kappaplus.promote.plan import promote_plan
    from kappaplus.promote.swap import read_journal

    journal = read_journal(promote_plan(job, config, output, checkpoint).production)
    print(json.dumps(journal, indent=1) if journal else "{}")


_JOB = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job.")
_OUTPUT = typer.Option(None, "--output", "-o", help="The output (if several).")
_FORCE = typer.Option(
    False,
    "--force",
    help="Promote although reconcile does not explain every difference, backfill "
    "windows are still open in production, or production has rows outside the "
    "backfill's range; undo although another run wrote to the promoted table since.",
)
_UNDO = typer.Option(
    False,
    "--undo",
    help="Put the previous production table back (and the backfill table back under its own name).",
)
_STATUS = typer.Option(False, "--status", help="Print the output's promotion journal and exit.")


def register(app: typer.Typer) -> None:
    """Add ``kappa promote`` to the CLI."""

    @app.command()
    def promote(
        job: str = _JOB,
        output: str = _OUTPUT,
        config: Path = _CONFIG,
        checkpoint: Path = _CHECKPOINT,
        force: bool = _FORCE,
        undo: bool = _UNDO,
        status: bool = _STATUS,
        metastore_uri: str = METASTORE_URI,
    ) -> None:
        """Swap the finished backfill table of JOB's output in as the production table:
        checks the backfill run finished (every batch of its range committed, not running)
        and that `kappa reconcile` over its range explains every difference (or --force),
        then renames <table> to <table>_previous and <table>_backfill to <table>. Refuses
        while the production stream runs (stop it, promote, start it again: it resumes
        from its checkpoint into the promoted table) and when <table>_previous exists
        (promote never drops a table). Records who, when, which run and which tables in
        $KAPPA_HOME/promotions/<table>.json and as table properties
        (kappa.promote.*). Run again after a crash to finish; --undo takes it back. Exit
        status 2 when refused."""
        from kappaplus.promote.command import carry_out, outcome_lines, prepare_promotion
        from kappaplus.session import stop_session

        def again(output: str) -> str:
            return _command(job, output, config, checkpoint, metastore_uri)

        try:
            loaded, cfg = _load(job, config)
            if status:
                _print_journal(loaded, cfg, output, checkpoint)
                return
            step = prepare_promotion(
                loaded,
                cfg,
                job_name=job,
                output=output,
                config_given=config,
                checkpoint=checkpoint,
                undo=undo,
                again=again,
            )
        except KappaError as exc:
            raise error_exit(_console, exc) from exc
        spark = command_session("kappa-promote", metastore_uri=metastore_uri)
        try:
            record = carry_out(spark, step, force=force, say=_console.print)
        except KappaError as exc:
            raise error_exit(_console, exc) from exc
        finally:
            stop_session(spark)
        for line, as_written in outcome_lines(record, again):
            # a command line is printed whole, on one line and as written, so it runs as printed
            if as_written:
                print(line)
            else:
                _console.print(line)
