"""``kappa archive TOPIC --table TABLE ...``: archive a Kafka topic into a Hive table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from kappaplus.cli.errors import error_exit
from kappaplus.cli.session_options import MASTER, METASTORE_URI, command_session
from kappaplus.core.errors import ConfigError, KappaError
from kappaplus.core.modes import Mode

_console = Console()
_AVRO = typer.Option(None, "--avro-schema", help="An .avsc file: the topic holds Avro records.")
_PROTO = typer.Option(
    None,
    "--proto-schema",
    help="A .proto file or descriptor set: the topic holds Protobuf records (with --message).",
)
_MESSAGE = typer.Option(
    None, "--message", help="The Protobuf message's full name, e.g. rides.v1.Ride."
)
_REGISTRY = typer.Option(
    None,
    "--schema-registry-url",
    help="A Schema Registry: Confluent-framed Avro/Protobuf read with their writer schemas.",
)
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


def _json_object(text: str | None, option: str) -> dict[str, str] | None:
    """``--iceberg-catalog`` / ``--delta-storage-options`` as a dict (ConfigError naming the
    option when not a JSON object)."""
    if text is None:
        return None
    import json

    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(option, text, f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(option, text, "expected a JSON object")
    return {str(k): str(v) for k, v in value.items()}


_TOPIC = typer.Argument(..., help="The Kafka topic to archive.")
_TABLE = typer.Option(
    ...,
    "--table",
    "-t",
    help="The table to write: db.table (Hive, Iceberg); for Delta its location or a "
    "registered name.",
)
_EVENT_TIME = typer.Option(
    ..., "--event-time", "-e", help="The event-time column (a timestamp field)."
)
_SCHEMA = typer.Option(
    None, "--schema", help="Event schema as DDL, e.g. 'id string, event_time timestamp'."
)
_BOOTSTRAP = typer.Option(
    None, "--bootstrap", "-b", help="Kafka bootstrap servers (default: the embedded broker)."
)
_PARTITION_BY = typer.Option(
    "event",
    "--partition-by",
    help="'event' (dt/hr of the event time) or 'arrival' (dt/hr of the Kafka timestamp).",
)
_DAILY = typer.Option(False, "--daily", help="Partition by dt only (no hr level).")
_STARTING_OFFSETS = typer.Option(
    "earliest", "--starting-offsets", help="earliest, latest or per-partition JSON."
)
_MAX_OFFSETS = typer.Option(
    None, "--max-offsets-per-trigger", help="Records read per micro-batch at most."
)
_DEAD_LETTER_TABLE = typer.Option(
    None, "--dlq-table", help="Undecodable records go here (default <table>_dead_letters)."
)
_TRIGGER = typer.Option(
    None, "--trigger", help="available-now, once or an interval (default '10 seconds')."
)
_UNTIL_IDLE = typer.Option(
    None, "--until-idle", help="Stop once no record was read for this many seconds."
)
_TIMEOUT = typer.Option(None, "--timeout", help="Stop after this many seconds.")
_PROGRESS = typer.Option(True, "--progress/--no-progress", help="Live progress table.")
_TABLE_FORMAT = typer.Option(
    "hive",
    "--table-format",
    help="hive (Parquet partitions), iceberg (one snapshot per micro-batch, pyiceberg) "
    "or delta (one version per micro-batch, delta-rs application transactions).",
)
_ICEBERG_CATALOG = typer.Option(
    None,
    "--iceberg-catalog",
    help="Iceberg catalog properties as JSON (default: the embedded SQL catalog).",
)
_DELTA_STORAGE_OPTIONS = typer.Option(
    None,
    "--delta-storage-options",
    help="delta-rs storage options as JSON (AWS_ENDPOINT_URL...), for --table-format delta.",
)


def archive_command(
    topic: str = _TOPIC,
    table: str = _TABLE,
    event_time: str = _EVENT_TIME,
    schema: str = _SCHEMA,
    avro_schema: Path = _AVRO,
    proto_schema: Path = _PROTO,
    message: str = _MESSAGE,
    schema_registry_url: str = _REGISTRY,
    bootstrap: str = _BOOTSTRAP,
    partition_by: str = _PARTITION_BY,
    daily: bool = _DAILY,
    starting_offsets: str = _STARTING_OFFSETS,
    max_offsets: int = _MAX_OFFSETS,
    dead_letter_table: str = _DEAD_LETTER_TABLE,
    trigger: str = _TRIGGER,
    until_idle: float = _UNTIL_IDLE,
    timeout: float = _TIMEOUT,
    checkpoint: Path = _CHECKPOINT,
    master: str = MASTER,
    metastore_uri: str = METASTORE_URI,
    progress: bool = _PROGRESS,
    table_format: str = _TABLE_FORMAT,
    iceberg_catalog: str = _ICEBERG_CATALOG,
    delta_storage_options: str = _DELTA_STORAGE_OPTIONS,
) -> None:
    """Archive TOPIC into a Hive table (or an Iceberg or Delta table: --table-format),
    exactly once, keeping each record's Kafka topic, partition, offset and timestamp; bad
    records go to the dead letter table with reasons.

    The archive is what `kappa run JOB --mode backfill` reads. Runs until stopped (Ctrl-C),
    idle (--until-idle) or, with --trigger available-now, until the topic is drained.
    Run it again to resume from its checkpoint.
    """
    from kappaplus.cli.run import print_summary
    from kappaplus.runtime.runner import run_job
    from kappaplus.runtime.state.records import exit_code
    from kappaplus.session import stop_session

    options, job, config, run = _prepare_archive(dict(locals()))
    spark = command_session(f"kappa-{job.name}", master=master, metastore_uri=metastore_uri)
    try:
        result = run_job(spark, job, config, run, job_path="kappaplus.archive", console=_console)
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
    finally:
        stop_session(spark)
    print_summary(result.record)
    _print_backfill_binding(options)
    code = exit_code(result.record)
    if code:
        raise typer.Exit(code)


def _prepare_archive(given: dict[str, Any]) -> tuple[Any, Any, Any, Any]:
    """``(archive options, job, config, run options)`` of the command line; a user error
    exits 2 naming the option."""
    from kappaplus.archive import ArchiveOptions, archive_job
    from kappaplus.runtime.options import RunOptions

    try:
        options = ArchiveOptions(
            topic=given["topic"],
            bootstrap_servers=given["bootstrap"] or default_bootstrap(),
            table=given["table"],
            event_time_column=given["event_time"],
            schema=given["schema"],
            format="avro"
            if given["avro_schema"] is not None
            else "protobuf"
            if given["proto_schema"] is not None
            else "json",
            schema_file=given["avro_schema"] or given["proto_schema"],
            message=given["message"],
            schema_registry_url=given["schema_registry_url"],
            partition_by=given["partition_by"],
            hourly=not given["daily"],
            starting_offsets=given["starting_offsets"],
            max_offsets_per_trigger=given["max_offsets"],
            dead_letter_table=given["dead_letter_table"],
            checkpoint_dir=given["checkpoint"],
            table_format=given["table_format"],
            iceberg_catalog=_json_object(given["iceberg_catalog"], "--iceberg-catalog"),
            delta_storage_options=_json_object(
                given["delta_storage_options"], "--delta-storage-options"
            ),
        )
        job, config = archive_job(options)
        run = RunOptions(
            mode=Mode.STREAM,
            trigger=given["trigger"],
            until_idle=given["until_idle"],
            timeout=given["timeout"],
            progress=given["progress"],
        )
    except KappaError as exc:
        raise error_exit(_console, exc) from exc
    return options, job, config, run


def _print_backfill_binding(options: Any) -> None:
    """How a backfill's configuration binds the archive (one line)."""
    from kappaplus.archive import archive_partition_format

    table, event_time, table_format = options.table, options.event_time_column, options.table_format
    if table_format in ("iceberg", "delta"):
        key = "table" if table_format == "iceberg" else "path"
        _console.print(
            f"backfills read it with: [inputs.<name>.{table_format}] {key} = {table!r}, "
            f"event_time_column = {event_time!r}",
            markup=False,
        )
        return
    kind = "arrival" if options.partition_by == "arrival" else "event"
    _console.print(
        f"backfills read it with: [inputs.<name>.hive] table = {table!r}, "
        f"partition_format = {archive_partition_format(options)!r}, partition_time = {kind!r}"
        + (", max_lateness = '<how late events arrive>'" if kind == "arrival" else ""),
        markup=False,
    )


def register(app: typer.Typer) -> None:
    """Add ``kappa archive`` to the command line."""
    app.command("archive")(archive_command)
