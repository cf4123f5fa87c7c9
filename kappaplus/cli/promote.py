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


def _stream_free(job: Any, config: Any, output: str, checkpoint: Path | None) -> None:
    """Refuse while the production stream runs: its sink writes the production name."""
    from kappaplus.runtime.state.checkpoints import LOCK_FILE, stream_checkpoint
    from kappaplus.runtime.state.locks import check_free

    run = stream_checkpoint(job, config, output, checkpoint).parent
    check_free(run / LOCK_FILE, f"the production stream (checkpoint {run}); stop it, promote")


def register(app: typer.Typer) -> None:
    """Add ``kappa promote`` to the CLI."""

    @app.command()
    def promote(
        job: str = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job."),
        output: str = typer.Option(None, "--output", "-o", help="The output (if several)."),
        config: Path = _CONFIG,
        checkpoint: Path = _CHECKPOINT,
        force: bool = typer.Option(
            False,
            "--force",
            help="Promote although reconcile does not explain every difference, backfill "
            "windows are still open in production, or production has rows outside the "
            "backfill's range; undo although another run wrote to the promoted table since.",
        ),
        undo: bool = typer.Option(
            False,
            "--undo",
            help="Put the previous production table back (and the backfill "
            "table back under its own name).",
        ),
        status: bool = typer.Option(
            False, "--status", help="Print the output's promotion journal and exit."
        ),
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
        from kappaplus.promote.checks import check_ready, check_tables, writers_since_promotion
        from kappaplus.promote.plan import PromoteError, check_backfill_finished, promote_plan
        from kappaplus.promote.swap import (
            DONE,
            PROMOTING,
            UNDOING,
            UNDONE,
            journal_path,
            new_record,
            read_journal,
        )
        from kappaplus.promote.swap import promote as run_promotion
        from kappaplus.promote.swap import undo as run_undo
        from kappaplus.session import stop_session

        try:
            loaded, cfg = _load(job, config)
            plan = promote_plan(loaded, cfg, output, checkpoint)
            journal = read_journal(plan.production)
            if status:
                print(json.dumps(journal, indent=1) if journal else "{}")
                return
            if undo:
                if journal is None or journal.get("status") == UNDONE:
                    raise PromoteError(
                        f"no promotion into {plan.production} to undo "
                        f"({journal_path(plan.production)})"
                    )
            elif journal is not None and journal.get("status") == UNDOING:
                raise PromoteError(
                    f"promotion {journal['id']} stopped while being undone: finish with "
                    f"{_command(job, plan.output, config, checkpoint, metastore_uri)} --undo"
                )
            resuming = not undo and journal is not None and journal.get("status") == PROMOTING
            if not undo and not resuming:
                given = f" -c {config}" if config is not None else ""
                plan = check_backfill_finished(plan, f"kappa run {job}{given}")
                _stream_free(loaded, cfg, plan.output, checkpoint)
        except KappaError as exc:
            raise error_exit(_console, exc) from exc
        spark = command_session("kappa-promote", metastore_uri=metastore_uri)
        try:
            if undo:
                assert journal is not None
                writers = writers_since_promotion(spark, journal) if not force else []
                if journal.get("status") == DONE and writers:
                    raise PromoteError(
                        f"{plan.production} has batches of {', '.join(writers)} written since "
                        f"promotion {journal['id']}: undoing would move them out of readers' "
                        f"sight (to {plan.backfill}); stop that run first, or pass --force"
                    )
                record = run_undo(spark, journal)
            elif resuming:
                assert journal is not None
                steps = [s["step"] for s in journal.get("steps", [])]
                _console.print(
                    f"resuming promotion {journal['id']} (stopped after: "
                    f"{steps[-1] if steps else 'start'})"
                )
                record = run_promotion(spark, journal)
            else:
                check_tables(spark, plan)
                readiness = check_ready(spark, loaded, cfg, plan)
                if readiness.problems and not force:
                    raise PromoteError(
                        f"not promoting {plan.backfill}: {'; '.join(readiness.problems)}; "
                        "pass --force to promote anyway"
                    )
                record = new_record(plan, journal, force)
                record["checks"] = readiness.summary()
                record = run_promotion(spark, record)
        except KappaError as exc:
            raise error_exit(_console, exc) from exc
        finally:
            stop_session(spark)
        where = journal_path(record["production_table"])
        production, backfill = record["production_table"], record["backfill_table"]
        if record["status"] == DONE:
            _console.print(
                f"promoted: {production} is now the backfill of "
                f"{record.get('backfill_range')} (run {record.get('backfill_run')}); the "
                f"previous production table is {record['previous_table']}"
            )
            undo_command = _command(job, record["output"], config, checkpoint, metastore_uri)
            # printed whole, on one line and as written, so it runs as printed
            print(f"undo: {undo_command} --undo")
        else:
            _console.print(
                f"undone: {production} is the previous production table again; the backfill "
                f"is back in {backfill}"
            )
        _console.print(f"journal: {where}")
