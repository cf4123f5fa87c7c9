"""The archiver: a kappaplus job that writes a Kafka topic into a Hive table (or an Iceberg or
Delta table: ``table_format``), exactly once.

Kappa+ backfills read the lake, so the lake must hold every event: Uber archives every
Kafka topic (SIGMOD'21 section 4.4). The archiver is an ordinary job run by the same
runtime in ``stream`` mode -- decode (bad records go to the dead letter table with their
reason), identity transform, exactly-once Hive sink -- so it inherits checkpoints,
progress, run records and ``kappa status``. Each row keeps its Kafka coordinates
(``kafka_topic``, ``kafka_partition``, ``kafka_offset``, ``kafka_timestamp``).

Partitions (``partition_by``):

- ``event`` (default): ``dt``/``hr`` of the event time. A backfill then maps partitions
  to event time directly (``partition_format = "dt=%Y-%m-%d/hr=%H"``). A late event lands
  in an old partition, so an hour of the archive is only complete once the Kafka
  lateness has passed.
- ``arrival``: ``dt``/``hr`` of the Kafka record timestamp: partitions are immutable once
  their hour is over (what a lake wants for retention and replication); a backfill reads
  them with ``partition_time = "arrival"`` and a ``max_lateness``.

Visibility is per partition (``visibility = "partition"``): a micro-batch normally touches
one or a few hours and a partition per batch would grow the metastore by thousands of
partitions a day; a backfill reads only hours the Hive source considers complete.

>>> options = ArchiveOptions(topic="rider-events", bootstrap_servers="127.0.0.1:9092",
...                          table="lake.rider_events", event_time_column="event_time",
...                          schema="event_id string, rider_id string, event_time timestamp")
>>> job, config = archive_job(options)
>>> job.name, config.outputs["archive"].hive.table
('archive-rider-events', 'lake.rider_events')
>>> run_job(spark, job, config, RunOptions("stream", until_idle=30))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, get_args

from kappaplus.codecs.schema import Format
from kappaplus.config import DEFAULT_TRIGGER_INTERVAL, JobConfig, config_from_dict
from kappaplus.core.errors import ConfigError
from kappaplus.core.options import (
    BOOL,
    NAME,
    PATH,
    POSITIVE_INT,
    TEXT,
    check_fields,
    choice,
    json_value,
    matching,
    option,
    options_class,
)
from kappaplus.core.table import TABLE_NAME
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from kappaplus.codecs import DecoderSpec

INPUT = "records"
OUTPUT = "archive"
ARRIVAL_COLUMN = "kafka_timestamp"
PartitionBy = Literal["event", "arrival"]
TableFormat = Literal["hive", "iceberg", "delta"]
_TABLE = matching(TABLE_NAME, "a Hive table name like 'db.table'")


def _settings(value: Any) -> Mapping[str, str]:
    if not isinstance(value, Mapping):
        raise TypeError("expected a JSON object of Kafka client settings")
    return value


KAFKA_SETTINGS = json_value(_settings, dict, "Kafka client settings")
CATALOG_PROPERTIES = json_value(_settings, dict, "Iceberg catalog properties")
STORAGE_OPTIONS = json_value(_settings, dict, "delta-rs storage options")


@options_class
class ArchiveOptions:
    """What to archive where; validated at construction (errors name the option).

    - ``schema``: the event schema as DDL (JSON topics); ``schema_file`` an ``.avsc``
      file for Avro topics (``format="avro"``), whose fields then make the schema.
    - ``partition_by``: ``event`` or ``arrival`` (see the module docstring); ``hourly``
      adds the ``hr`` partition level under ``dt``.
    - ``dead_letter_table``: where undecodable records go (default ``<table>_dead_letters``).
    """

    topic: str = option("topic", NAME)
    bootstrap_servers: str = option("bootstrapServers", NAME)
    table: str = option("table", TEXT)
    """A Hive or Iceberg table name (``db.table``); for ``table_format="delta"`` the Delta
    table's location or a name registered with ``kappa table register --delta``."""
    event_time_column: str = option("eventTimeColumn", NAME)
    schema: str | None = option("schema", TEXT, default=None)
    format: Format = option("format", choice(get_args(Format)), default="json")
    schema_file: Path | None = option("schemaFile", PATH, default=None)
    message: str | None = option("message", TEXT, default=None)
    """Protobuf topics: the message's full name in ``schema_file`` (``rides.v1.Ride``)."""
    schema_registry_url: str | None = option("schemaRegistryUrl", TEXT, default=None, repr=False)
    partition_by: PartitionBy = option(
        "partitionBy", choice(get_args(PartitionBy)), default="event"
    )
    hourly: bool = option("hourly", BOOL, default=True)
    starting_offsets: str = option("startingOffsets", TEXT, default="earliest")
    max_offsets_per_trigger: int | None = option("maxOffsetsPerTrigger", POSITIVE_INT, default=None)
    dead_letter_table: str | None = option("deadLetterTable", _TABLE, default=None)
    trigger_interval: str = option("triggerInterval", TEXT, default=DEFAULT_TRIGGER_INTERVAL)
    checkpoint_dir: Path | None = option("checkpointDir", PATH, default=None)
    kafka_options: Mapping[str, str] | None = option("kafkaOptions", KAFKA_SETTINGS, default=None)
    table_format: TableFormat = option("tableFormat", choice(get_args(TableFormat)), default="hive")
    """``hive`` (Parquet partitions, the default), ``iceberg`` (one snapshot per
    micro-batch through pyiceberg, exactly once: :mod:`kappaplus.connectors.iceberg.sink`)
    or ``delta`` (one version per micro-batch through delta-rs, exactly once by application
    transactions: :mod:`kappaplus.connectors.delta.sink`). Iceberg and Delta archives are
    unpartitioned: a backfill slices them by their files' statistics."""
    iceberg_catalog: Mapping[str, str] | None = option(
        "icebergCatalog", CATALOG_PROPERTIES, default=None
    )
    """pyiceberg catalog properties of an ``iceberg`` archive (default the embedded one)."""
    delta_storage_options: Mapping[str, str] | None = option(
        "deltaStorageOptions", STORAGE_OPTIONS, default=None
    )
    """delta-rs storage options of a ``delta`` archive (``AWS_ENDPOINT_URL``...)."""

    def __post_init__(self) -> None:
        check_fields(self)
        if self.table_format != "delta":
            _TABLE.parse(self.table, "table")
        elif self.dead_letter_table is None and not TABLE_NAME.match(self.table):
            raise ConfigError(
                "dead_letter_table",
                None,
                f"a Delta archive at a location ({self.table!r}) needs a Hive table for its "
                "dead letters (--dlq-table db.table); a registered name defaults to "
                "<name>_dead_letters",
            )
        if self.format == "json" and not self.schema:
            raise ConfigError("schema", self.schema, "a JSON topic needs the event schema (DDL)")
        if self.format == "avro":
            if self.schema_file is None:
                raise ConfigError("schema_file", None, "an Avro topic needs its .avsc file")
            if not Path(self.schema_file).is_file():
                raise ConfigError("schema_file", str(self.schema_file), "file not found")
        if self.format == "protobuf":
            if self.schema_file is None or self.message is None:
                raise ConfigError(
                    "schema_file" if self.schema_file is None else "message",
                    None,
                    "a Protobuf topic needs its .proto file (or descriptor set) and message",
                )
            self._decoder()  # compiles the file and finds the message, or says why not

    @property
    def job_name(self) -> str:
        return f"archive-{self.topic}"

    def event_schema(self) -> str:
        """The event schema as DDL: ``schema``, or the Avro file's or Protobuf message's
        fields."""
        if self.schema:
            return self.schema
        spec = self._decoder()
        return ", ".join(
            f"`{f.name}` {f.dataType.simpleString()}" for f in spec.event_schema.fields
        )

    def _decoder(self) -> DecoderSpec:
        from kappaplus.codecs import DecoderSpec

        assert self.schema_file is not None
        if self.format == "protobuf":
            return DecoderSpec(
                format="protobuf",
                proto_schema=str(self.schema_file),
                message=self.message,
                event_time=self.event_time_column,
            )
        return DecoderSpec(
            format="avro", avro_schema=str(self.schema_file), event_time=self.event_time_column
        )


def _identity(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    return {OUTPUT: inputs[INPUT]}


def archive_job(options: ArchiveOptions) -> tuple[Job, JobConfig]:
    """The archiver as a :class:`~kappaplus.jobs.Job` and its configuration."""
    partition_time = (
        options.event_time_column if options.partition_by == "event" else ARRIVAL_COLUMN
    )
    job = Job(
        name=options.job_name,
        inputs=[
            InputSpec(INPUT, options.event_schema(), options.event_time_column, kafka_metadata=True)
        ],
        outputs=[OutputSpec(OUTPUT, event_time_column=partition_time)],
        transform=_identity,
        # Stateless: the watermark drops nothing; it is declared because every job has one.
        watermark_delay="1 hour",
    )
    kafka: dict[str, Any] = {
        "topic": options.topic,
        "bootstrap_servers": options.bootstrap_servers,
        "format": options.format,
        "starting_offsets": options.starting_offsets,
        "dlq": {"table": options.dead_letter_table or f"{options.table}_dead_letters"},
        "options": dict(options.kafka_options or {}),
    }
    if options.schema_file is not None:
        kafka["schema_file"] = str(options.schema_file)
    if options.message is not None:
        kafka["message"] = options.message
    if options.schema_registry_url is not None:
        kafka["schema_registry_url"] = options.schema_registry_url
    if options.max_offsets_per_trigger is not None:
        kafka["maxOffsetsPerTrigger"] = options.max_offsets_per_trigger
    hive: dict[str, Any] = {
        "table": options.table,
        "partition_column": "dt",
        "partition_expr": f"date_format(`{partition_time}`, 'yyyy-MM-dd')",
        "visibility": "partition",
    }
    if options.hourly:
        hive["hour_partition"] = "hr"
    output: dict[str, Any] = {"hive": hive}
    if options.table_format == "iceberg":
        if "." not in options.table:
            raise ConfigError(
                "table", options.table, "an Iceberg archive needs a namespace: 'ns.table'"
            )
        catalog = dict(options.iceberg_catalog) if options.iceberg_catalog else None
        output = {"iceberg": {"table": options.table, "catalog": catalog}}
    if options.table_format == "delta":
        storage = dict(options.delta_storage_options) if options.delta_storage_options else None
        output = {"delta": {"path": options.table, "storage_options": storage}}
    raw: dict[str, Any] = {
        "name": options.job_name,
        "trigger_interval": options.trigger_interval,
        "inputs": {INPUT: {"kafka": kafka}},
        "outputs": {OUTPUT: output},
    }
    if options.checkpoint_dir is not None:
        raw["checkpoint_dir"] = str(options.checkpoint_dir)
    return job, config_from_dict(raw)


def archive_partition_format(options: ArchiveOptions) -> str:
    """The ``partition_format`` a backfill of the archive table uses."""
    return "dt=%Y-%m-%d/hr=%H" if options.hourly else "dt=%Y-%m-%d"
