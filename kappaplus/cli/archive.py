"""``kappa archive TOPIC --table TABLE ...``: archive a Kafka topic into a Hive table."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.core.modes import Mode

_console = Console()
_AVRO = typer.Option(None, "--avro-schema", help="An .avsc file: the topic holds Avro records.")
_CHECKPOINT = typer.Option(
    None, "--checkpoint", help="Checkpoint root (default: state_dir()/checkpoints)."
)


def default_bootstrap() -> str:
    """The embedded broker's address when it runs under the state directory, else
    ``127.0.0.1:9092``."""
    from kappaplus.local.broker import EmbeddedBroker

    try:
        status = EmbeddedBroker().status(timeout=2.0)
    except KappaError:
        return "127.0.0.1:9092"
    return status.bootstrap if status.running and status.bootstrap else "127.0.0.1:9092"


def _catalog_json(text: str | None) -> dict[str, str] | None:
    """``--iceberg-catalog`` as a dict (ConfigError naming the option when not JSON)."""
    if text is None:
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError("--iceberg-catalog", text, f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError("--iceberg-catalog", text, "expected a JSON object")
    return {str(k): str(v) for k, v in value.items()}


def archive_command(
    topic: str = typer.Argument(..., help="The Kafka topic to archive."),
    table: str = typer.Option(..., "--table", "-t", help="The Hive table to write (db.table)."),
    event_time: str = typer.Option(
        ..., "--event-time", "-e", help="The event-time column (a timestamp field)."
    ),
    schema: str = typer.Option(
        None, "--schema", help="Event schema as DDL, e.g. 'id string, event_time timestamp'."
    ),
    avro_schema: Path = _AVRO,
    bootstrap: str = typer.Option(
        None, "--bootstrap", "-b", help="Kafka bootstrap servers (default: the embedded broker)."
    ),
    partition_by: str = typer.Option(
        "event",
        "--partition-by",
        help="'event' (dt/hr of the event time) or 'arrival' (dt/hr of the Kafka timestamp).",
    ),
    daily: bool = typer.Option(False, "--daily", help="Partition by dt only (no hr level)."),
    starting_offsets: str = typer.Option(
        "earliest", "--starting-offsets", help="earliest, latest or per-partition JSON."
    ),
    max_offsets: int = typer.Option(
        None, "--max-offsets-per-trigger", help="Records read per micro-batch at most."
    ),
    dead_letter_table: str = typer.Option(
        None, "--dlq-table", help="Undecodable records go here (default <table>_dead_letters)."
    ),
    trigger: str = typer.Option(
        None, "--trigger", help="available-now, once or an interval (default '10 seconds')."
    ),
    until_idle: float = typer.Option(
        None, "--until-idle", help="Stop once no record was read for this many seconds."
    ),
    timeout: float = typer.Option(None, "--timeout", help="Stop after this many seconds."),
    checkpoint: Path = _CHECKPOINT,
    master: str = typer.Option(None, "--master", help="Spark master URL (default local[2])."),
    metastore_uri: str = typer.Option(
        None, "--metastore-uri", help="Hive metastore thrift URI (default: local/embedded)."
    ),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress table."),
    table_format: str = typer.Option(
        "hive",
        "--table-format",
        help="hive (Parquet partitions) or iceberg (one snapshot per micro-batch, pyiceberg).",
    ),
    iceberg_catalog: str = typer.Option(
        None,
        "--iceberg-catalog",
        help="Iceberg catalog properties as JSON (default: the embedded SQL catalog).",
    ),
) -> None:
    """Archive TOPIC into a Hive table (or an Iceberg table: --table-format iceberg),
    exactly once, keeping each record's Kafka topic, partition, offset and timestamp; bad
    records go to the dead letter table with reasons.

    The archive is what `kappa run JOB --mode backfill` reads. Runs until stopped (Ctrl-C),
    idle (--until-idle) or, with --trigger available-now, until the topic is drained.
    Run it again to resume from its checkpoint.
    """
    from kappaplus.archive import ArchiveOptions, archive_job, archive_partition_format
    from kappaplus.cli.run import print_summary
    from kappaplus.local.metastore import LOCAL_DISCOVERY
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.runtime.state.records import exit_code
    from kappaplus.session import create_session, stop_session

    try:
        options = ArchiveOptions(
            topic=topic,
            bootstrap_servers=bootstrap or default_bootstrap(),
            table=table,
            event_time_column=event_time,
            schema=schema,
            format="avro" if avro_schema is not None else "json",
            schema_file=avro_schema,
            partition_by=partition_by,  # type: ignore[arg-type]
            hourly=not daily,
            starting_offsets=starting_offsets,
            max_offsets_per_trigger=max_offsets,
            dead_letter_table=dead_letter_table,
            checkpoint_dir=checkpoint,
            table_format=table_format,  # type: ignore[arg-type]
            iceberg_catalog=_catalog_json(iceberg_catalog),
        )
        job, config = archive_job(options)
        run = RunOptions(
            mode=Mode.STREAM,
            trigger=trigger,
            until_idle=until_idle,
            timeout=timeout,
            progress=progress,
        )
    except KappaError as exc:
        _console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(exc.exit_code if isinstance(exc, KappaError) else 1) from exc
    spark = create_session(
        f"kappa-{job.name}",
        master=master,
        metastore_uri=metastore_uri,
        metastore_discovery=LOCAL_DISCOVERY,
    )
    try:
        result = run_job(spark, job, config, run, job_path="kappaplus.archive", console=_console)
    except KappaError as exc:
        _console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(1) from exc
    finally:
        stop_session(spark)
    print_summary(result.record)
    kind = "arrival" if partition_by == "arrival" else "event"
    if table_format == "iceberg":
        _console.print(
            f"backfills read it with: [inputs.<name>.iceberg] table = {table!r}, "
            f"event_time_column = {event_time!r}"
        )
        code = exit_code(result.record)
        if code:
            raise typer.Exit(code)
        return
    _console.print(
        f"backfills read it with: [inputs.<name>.hive] table = {table!r}, "
        f"partition_format = {archive_partition_format(options)!r}, partition_time = {kind!r}"
        + (", max_lateness = '<how late events arrive>'" if kind == "arrival" else "")
    )
    code = exit_code(result.record)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``kappa archive`` to the command line."""
    app.command("archive")(archive_command)
