"""How a job's logical outputs bind to Kafka topics, Hive, Iceberg and Delta tables: the
``[outputs.<name>.kafka|hive|iceberg|delta]`` tables of a job config."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from kappaplus.config.bindings import check_protobuf, redact
from kappaplus.config.fields import (
    KafkaClientSettings,
    Servers,
    StrictModel,
    TableName,
    TopicName,
)
from kappaplus.core.table import (
    BATCH_COLUMN,
    DEFAULT_PARTITION_COLUMN,
    DEFAULT_VISIBILITY,
    Visibility,
)


class KafkaOutput(StrictModel):
    """An output written to a Kafka topic (backfill writes to ``backfill_topic``)."""

    topic: TopicName
    bootstrap_servers: Servers
    format: Literal["json", "avro", "protobuf"] = "json"
    schema_file: Path | None = None
    message: str | None = Field(None, min_length=1)
    schema_registry_url: str | None = Field(None, repr=False)
    backfill_topic: TopicName | None = None
    options: KafkaClientSettings = Field(default_factory=dict)

    @model_validator(mode="after")
    def _protobuf(self) -> KafkaOutput:
        if self.format != "protobuf" and self.schema_registry_url is not None:
            raise ValueError("'schema_registry_url' on an output is for format 'protobuf' only")
        check_protobuf(self.format, self.schema_file, self.message)
        return self

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for key, value in super().__repr_args__():
            if key == "options":
                value = redact(value)
            yield key, value


_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class HiveOutput(StrictModel):
    """An output written to a Hive table (backfill writes to ``backfill_table``).

    - ``partition_column`` / ``partition_expr``: the date partition (default ``dt``, the
      date of the output's event-time column).
    - ``hour_partition``: when set (e.g. ``"hr"``), the table is also partitioned by the
      hour of the event-time column: ``dt=.../hr=...``.
    - ``visibility``: ``"batch"`` (default) adds a last partition column ``kappa_batch`` so
      a reader sees whole micro-batches only; ``"partition"`` partitions by time only (a
      batch spanning several dates shows one date at a time). See
      :mod:`kappaplus.connectors.hive.sink`.
    """

    table: TableName
    backfill_table: TableName | None = None
    partition_column: str = DEFAULT_PARTITION_COLUMN
    partition_expr: str | None = None
    hour_partition: str | None = None
    visibility: Visibility = DEFAULT_VISIBILITY

    @field_validator("partition_column", "hour_partition")
    @classmethod
    def _column(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return value
        if not _IDENTIFIER.match(value):
            raise ValueError("expected a column name (letters, digits, '_')")
        if value.lower() == BATCH_COLUMN:
            raise ValueError(f"{BATCH_COLUMN!r} is reserved for the batch id partition column")
        date_column = info.data.get("partition_column")
        if (
            info.field_name == "hour_partition"
            and isinstance(date_column, str)
            and value.lower() == date_column.lower()
        ):
            raise ValueError(f"{value!r} is the partition_column already")
        return value


class ReconcileKeys(StrictModel):
    """How ``kappa reconcile`` compares an output's production and backfill rows.

    - ``key``: the columns identifying one window/row (e.g. ``rider_id``, ``session_start``).
    - ``window_end``: the column a row is final by: a production row whose ``window_end``
      is after the production watermark is still open there.
    - ``measure``: an optional count column (e.g. ``event_count``): its difference between
      the outputs is what the late rows must explain.
    """

    key: list[str] = Field(min_length=1)
    window_end: str | None = None
    measure: str | None = None


class LateRowsTarget(StrictModel):
    """Where a stream run keeps the input rows an output's watermark dropped as late: exactly
    one of

    - ``table``: a Hive table (created on first use): the input's columns, ``kappa_input``
      and ``kappa_missed_watermark`` (the watermark each row arrived behind), written exactly
      once per micro-batch;
    - ``topic``: a Kafka topic: one JSON record per row (the same columns), keyed
      ``<query>/<batch>/<input>-<partition>/<row>``; at least once (a replayed batch
      produces its rows again under the same keys). ``bootstrap_servers`` and ``options``
      default to the output's own ``[outputs.<o>.kafka]`` binding, as a Kafka input's
      ``dlq`` topic uses its input's.

    Needs the job's output to declare ``late_by`` (:mod:`kappaplus.core.late_rules`). Stream mode
    only: a backfill reads in event-time order.
    """

    table: TableName | None = None
    topic: TopicName | None = None
    bootstrap_servers: Servers | None = None
    options: KafkaClientSettings = Field(default_factory=dict)

    @model_validator(mode="after")
    def _one(self) -> LateRowsTarget:
        if (self.table is None) == (self.topic is None):
            raise ValueError("set exactly one of 'table' (a Hive table) or 'topic' (a Kafka topic)")
        if self.table is not None and (self.bootstrap_servers is not None or self.options):
            raise ValueError("'bootstrap_servers' and 'options' go with 'topic', not 'table'")
        return self

    @property
    def target(self) -> str:
        """``hive <table>`` or ``kafka <topic>``: where the rows go, for logs and the audit."""
        return f"hive {self.table}" if self.table is not None else f"kafka {self.topic}"

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for key, value in super().__repr_args__():
            if key == "options":
                value = redact(value)
            yield key, value


class IcebergOutput(StrictModel):
    """An output written to an Iceberg table through pyiceberg, exactly once per micro-batch
    (:mod:`kappaplus.connectors.iceberg.sink`); a backfill writes ``backfill_table``
    (default ``<table>_backfill``). ``catalog``: pyiceberg catalog properties as for an
    Iceberg input (default the embedded SQL catalog). Created unpartitioned when missing."""

    table: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
    backfill_table: str | None = Field(
        None, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$"
    )
    catalog: dict[str, str] | None = None


class DeltaOutput(StrictModel):
    """An output written to a Delta table through delta-rs, exactly once per micro-batch
    (application transactions: appId = the output query, version = the batch id;
    :mod:`kappaplus.connectors.delta.sink`).

    ``path``: the table's location (a local path, ``s3://...``) or a name registered with
    ``kappa table register --delta``; a backfill writes ``backfill_path`` (default
    ``<path>_backfill``; for a registered name, its location + ``_backfill``).
    ``storage_options``: delta-rs storage options as for a Delta input. Created
    unpartitioned when missing."""

    path: str = Field(min_length=1)
    backfill_path: str | None = Field(None, min_length=1)
    storage_options: dict[str, str] | None = None


class OutputBinding(StrictModel):
    kafka: KafkaOutput | None = None
    hive: HiveOutput | None = None
    iceberg: IcebergOutput | None = None
    delta: DeltaOutput | None = None
    reconcile: ReconcileKeys | None = None
    late: LateRowsTarget | None = None

    @model_validator(mode="after")
    def _some(self) -> OutputBinding:
        if all(t is None for t in (self.kafka, self.hive, self.iceberg, self.delta)):
            raise ValueError(
                "write the output to a Kafka topic ([...kafka]), a Hive table ([...hive]), "
                "an Iceberg table ([...iceberg]) or a Delta table ([...delta])"
            )
        late = self.late
        needs_brokers = late is not None and late.topic is not None and not late.bootstrap_servers
        if needs_brokers and self.kafka is None:
            raise ValueError(
                "late.topic needs late.bootstrap_servers (the output has no [...kafka] "
                "binding whose brokers it could use)"
            )
        return self

    def late_target(self) -> LateRowsTarget | None:
        """``late`` with a topic's brokers and client options defaulted from the output's
        Kafka binding (as a Kafka input's ``dlq`` topic uses its input's)."""
        late = self.late
        if late is None or late.topic is None or late.bootstrap_servers is not None:
            return late
        assert self.kafka is not None  # checked by _some
        return late.model_copy(
            update={
                "bootstrap_servers": self.kafka.bootstrap_servers,
                "options": late.options or dict(self.kafka.options),
            }
        )
