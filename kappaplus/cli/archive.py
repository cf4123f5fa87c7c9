"""``kappa archive TOPIC --table TABLE ...``: archive a Kafka topic into a Hive table."""

from __future__ import annotations

from pathlib import Path

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


def archive_command(
    topic: str = typer.Argument(..., help="The Kafka topic to archive."),
    table: str = typer.Option(
        ...,
        "--table",
        "-t",
        help="The table to write: db.table (Hive, Iceberg); for Delta its location or a "
        "registered name.",
    ),
    event_time: str = typer.Option(
        ..., "--event-time", "-e", help="The event-time column (a timestamp field)."
    ),
    schema: str = typer.Option(
        None, "--schema", help="Event schema as DDL, e.g. 'id string, event_time timestamp'."
    ),
    avro_schema: Path = _AVRO,
    proto_schema: Path = _PROTO,
    message: str = _MESSAGE,
    schema_registry_url: str = _REGISTRY,
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
    master: str = MASTER,
    metastore_uri: str = METASTORE_URI,
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Live progress table."),
    table_format: str = typer.Option(
        "hive",
        "--table-format",
        help="hive (Parquet partitions), iceberg (one snapshot per micro-batch, pyiceberg) "
        "or delta (one version per micro-batch, delta-rs application transactions).",
    ),
    iceberg_catalog: str = typer.Option(
        None,
        "--iceberg-catalog",
        help="Iceberg catalog properties as JSON (default: the embedded SQL catalog).",
    ),
    delta_storage_options: str = typer.Option(
        None,
        "--delta-storage-options",
        help="delta-rs storage options as JSON (AWS_ENDPOINT_URL...), for --table-format delta.",
    ),
) -> None:
    """Archive TOPIC into a Hive table (or an Iceberg or Delta table: --table-format),
    exactly once, keeping each record's Kafka topic, partition, offset and timestamp; bad
    records go to the dead letter table with reasons.

    The archive is what `kappa run JOB --mode backfill` reads. Runs until stopped (Ctrl-C),
    idle (--until-idle) or, with --trigger available-now, until the topic is drained.
    Run it again to resume from its checkpoint.
    """
    from kappaplus.archive import ArchiveOptions, archive_job, archive_partition_format
    from kappaplus.cli.run import print_summary
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.runtime.state.records import exit_code
    from kappaplus.session import stop_session

    try:
        options = ArchiveOptions(
            topic=topic,
            bootstrap_servers=bootstrap or default_bootstrap(),
            table=table,
            event_time_column=event_time,
            schema=schema,
            format="avro"
            if avro_schema is not None
            else "protobuf"
            if proto_schema is not None
            else "json",
            schema_file=avro_schema or proto_schema,
            message=message,
            schema_registry_url=schema_registry_url,
            partition_by=partition_by,  # type: ignore[arg-type]
            hourly=not daily,
            starting_offsets=starting_offsets,
            max_offsets_per_trigger=max_offsets,
            dead_letter_table=dead_letter_table,
            checkpoint_dir=checkpoint,
            table_format=table_format,  # type: ignore[arg-type]
            iceberg_catalog=_json_object(iceberg_catalog, "--iceberg-catalog"),
            delta_storage_options=_json_object(delta_storage_options, "--delta-storage-options"),
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
        raise error_exit(_console, exc) from exc
    spark = command_session(f"kappa-{job.name}", master=master, metastore_uri=metastore_uri)
    try:
        result = run_job(spark, job, config, run, job_path="kappaplus.archive", console=_console)
    except KappaError as exc:
        raise error_exit(_console, exc, 1) from exc
    finally:
        stop_session(spark)
    print_summary(result.record)
    kind = "arrival" if partition_by == "arrival" else "event"
    if table_format in ("iceberg", "delta"):
        key = "table" if table_format == "iceberg" else "path"
        _console.print(
            f"backfills read it with: [inputs.<name>.{table_format}] {key} = {table!r}, "
            f"event_time_column = {event_time!r}",
            markup=False,
        )
        code = exit_code(result.record)
        if code:
            raise typer.Exit(code)
        return
    _console.print(
        f"backfills read it with: [inputs.<name>.hive] table = {table!r}, "
        f"partition_format = {archive_partition_format(options)!r}, partition_time = {kind!r}"
        + (", max_lateness = '<how late events arrive>'" if kind == "arrival" else ""),
        markup=False,
    )
    code = exit_code(result.record)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``kappa archive`` to the command line."""
    app.command("archive")(archive_command)
