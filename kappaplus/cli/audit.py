"""``kappa audit`` and ``kappa reconcile``."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError

_console = Console()
_AUDIT_CHART = typer.Option(None, "--chart", help="Write the chart here (default audit.html).")
_RECONCILE_CHART = typer.Option(None, "--chart", help="Chart file (default reconcile.html).")
_CONFIG = typer.Option(None, "--config", "-c", help="Job config TOML.")
_CHECKPOINT = typer.Option(None, "--checkpoint", help="Checkpoint root of the production run.")


def _when(value: str | None, option: str) -> datetime | None:
    from kappaplus.core.timeutil import from_micros, parse_timestamp

    return None if value is None else from_micros(parse_timestamp(value, option))


_JOB = typer.Option(None, "--job", "-j", help="Audit this job (its name).")
_TOPIC = typer.Option(None, "--topic", help="Audit every job reading this topic.")
_TABLE = typer.Option(None, "--table", help="Audit the jobs writing or reading this Hive table.")
_START = typer.Option(None, "--start", help="First bucket (ISO-8601, UTC).")
_END = typer.Option(None, "--end", help="End of the range (exclusive).")
_BUCKET = typer.Option("10 minutes", "--bucket", help="Bucket size, a multiple of 10 minutes.")
_SHOW_ALL = typer.Option(False, "--all", help="List every bucket, not only flagged.")
_AS_JSON = typer.Option(False, "--json", help="Print JSON instead of a table.")
_RECONCILE_JOB = typer.Argument(..., help="Dotted path 'package.module:JOB' or a reference job.")
_RECONCILE_START = typer.Option(None, "--start", help="Range start (output event time).")
_RECONCILE_END = typer.Option(None, "--end", help="Range end (exclusive).")
_OUTPUT = typer.Option(None, "--output", "-o", help="The output (if several).")
_RECONCILE_AS_JSON = typer.Option(False, "--json", help="Print JSON instead of tables.")


def audit_command(
    job: str = _JOB,
    topic: str = _TOPIC,
    table: str = _TABLE,
    start: str = _START,
    end: str = _END,
    bucket: str = _BUCKET,
    chart: Path = _AUDIT_CHART,
    show_all: bool = _SHOW_ALL,
    as_json: bool = _AS_JSON,
    metastore_uri: str = METASTORE_URI,
) -> None:
    """Completeness per event-time bucket across stages (Kafka -> lake -> job input ->
    outputs) from the audit table; flags buckets whose counts differ beyond what dead
    letters explain. Exit status 1 when any bucket is unexplained, 2 on bad options."""
    from kappaplus.audit.report import chart_html, load_report, terminal_tables
    from kappaplus.core.timeutil import parse_duration
    from kappaplus.session import stop_session

    try:
        if not (job or topic or table):
            raise ConfigError("--job/--topic/--table", None, "name what to audit")
        first, last = _when(start, "--start"), _when(end, "--end")
        seconds = parse_duration(bucket, "--bucket") // 1_000_000
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    spark = command_session("kappa-audit", metastore_uri=metastore_uri)
    try:
        report = load_report(
            spark,
            job=job,
            topic=topic,
            table=table,
            start=first,
            end=last,
            bucket_seconds=seconds,
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    finally:
        stop_session(spark)
    target = chart or Path("audit.html")
    target.write_text(chart_html(report))
    if as_json:
        print(json.dumps(report.as_json(), indent=1))
    else:
        if not report.series:
            _console.print("[yellow]no audit counts for this selection[/]")
        for table in terminal_tables(report, show_all=show_all):
            _console.print(table)
        _console.print(f"chart: {target}")
    if not report.ok:
        raise typer.Exit(1)


def reconcile_command(
    job: str = _RECONCILE_JOB,
    start: str = _RECONCILE_START,
    end: str = _RECONCILE_END,
    output: str = _OUTPUT,
    config: Path = _CONFIG,
    checkpoint: Path = _CHECKPOINT,
    chart: Path = _RECONCILE_CHART,
    as_json: bool = _RECONCILE_AS_JSON,
    metastore_uri: str = METASTORE_URI,
) -> None:
    """Compare JOB's production output with its backfill output window by window (key
    columns from the output's `reconcile` table in the job config): identical,
    different, only in one, still open in production, and whether the late rows
    production kept (`outputs.<o>.late`, counted where they were kept) explain the
    differences, rows against rows (Spark's dropped-group count is shown, never
    compared). Exit status 1 when they do not, 2 on bad options."""
    from kappaplus.audit.reconcile import chart_html, reconcile, terminal_tables
    from kappaplus.cli.run import default_config, job_path
    from kappaplus.config import load_config
    from kappaplus.jobs import load_job
    from kappaplus.runtime.reconcile_target import target_of
    from kappaplus.session import stop_session

    try:
        path = job_path(job)
        loaded = load_job(path)
        config_file = config or default_config(path)
        if config_file is None:
            raise ConfigError("--config", None, f"no config given and no TOML next to {path}")
        target = target_of(
            loaded,
            load_config(config_file),
            output,
            start=_when(start, "--start"),
            end=_when(end, "--end"),
            checkpoint_root=checkpoint,
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    spark = command_session("kappa-reconcile", metastore_uri=metastore_uri)
    try:
        result = reconcile(spark, target)
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    finally:
        stop_session(spark)
    file = chart or Path("reconcile.html")
    file.write_text(chart_html(result))
    if as_json:
        print(json.dumps(result.as_json(), indent=1))
    else:
        for table in terminal_tables(result):
            _console.print(table)
        _console.print(f"chart: {file}")
    if not result.explained:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add ``kappa audit`` and ``kappa reconcile`` to the CLI."""
    app.command("audit")(audit_command)
    app.command("reconcile")(reconcile_command)
