"""How a job's logical inputs bind to Kafka topics, Hive, Iceberg and Delta tables: the
``[inputs.<name>.kafka|hive|iceberg|delta]`` tables of a job config (the outputs':
:mod:`kappaplus.config.output_bindings`)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    Field,
    field_validator,
    model_validator,
)

from kappaplus.config.fields import (
    DEFAULT_MAX_FUTURE,
    DEFAULT_MIN_EVENT_TIME,
    PARTITION_SEGMENT,
    STRFTIME_FIELD,
    DurationField,
    KafkaClientSettings,
    PositiveInt,
    Servers,
    StrictModel,
    TableName,
    TopicName,
    ahead_bound,
    moment_text,
    optional_duration,
)
from kappaplus.core.ahead import AUTO
from kappaplus.core.errors import ConfigError
from kappaplus.core.secrets import redact as redact_secrets
from kappaplus.core.timeutil import Duration


class DeadLetterQueue(StrictModel):
    """A Kafka input's ``dlq``: where its undecodable records go, with their reason, as
    written in the config (a Kafka topic or a Hive table). The run writes them through
    :class:`kappaplus.dead_letters.targets.DeadLetterTarget`, built from this and the
    input's brokers by :meth:`~kappaplus.dead_letters.targets.DeadLetterTarget.of_kafka_input`.

    Without a ``dlq`` an input's dead letters go to the topic ``<topic>.dlq`` on its own
    brokers (:attr:`KafkaInput.dead_letters`): nothing is dropped by default. Dropping them
    is said in so many words: ``dlq = { discard = true }`` (they are then only counted, and
    the run's log says how many were discarded).

    >>> DeadLetterQueue(topic="rides.dlq").discard
    False
    """

    topic: TopicName | None = None
    table: TableName | None = None
    discard: bool = Field(False, strict=True)

    @model_validator(mode="after")
    def _one(self) -> DeadLetterQueue:
        chosen = (self.topic is not None) + (self.table is not None) + self.discard
        if chosen != 1:
            raise ValueError(
                "set exactly one of 'topic', 'table' or 'discard = true' (without a 'dlq' "
                "the dead letters go to the topic <topic>.dlq)"
            )
        return self


class HiveDeadLetters(StrictModel):
    """Where a backfill puts the rows of its Hive table that no slice can place."""

    table: TableName


class StoredEventTime(StrictModel):
    """``event_time = { column = "ts_ms", unit = "ms" }``: how a binding's source stores the
    event time. ``column``: the source's field (default: the job's event-time column);
    ``unit``: epoch ``s``, ``ms`` or ``us`` when it is a number; ``format``: a Spark
    datetime pattern (``yyyy-MM-dd HH:mm:ss``) when it is a string (lake tables only).
    The job's event-time column is this field as a timestamp (see :mod:`kappaplus.mapping`)."""

    column: str | None = Field(None, min_length=1)
    unit: Literal["s", "ms", "us"] | None = None
    format: str | None = Field(None, min_length=1)

    @model_validator(mode="after")
    def _one(self) -> StoredEventTime:
        if self.unit is not None and self.format is not None:
            raise ValueError("set 'unit' (epoch numbers) or 'format' (strings), not both")
        return self


Columns = dict[str, Annotated[str, Field(min_length=1)]]
"""``columns = { ride_id = "cast(ride_no as string)", city = "payload.city" }``: a job
column -> a Spark SQL expression over the source's fields (a name, a nested path, any
expression); a declared column not listed is read by its own name."""


class RangeMapping(StrictModel):
    """``[[inputs.<n>.hive.mappings]] from = "2024-03-05", columns = { ... }``: from this
    event time on (until the next entry's ``from``), these ``columns`` replace the same
    columns of the binding's own (which hold before the first ``from``) and of the entries
    before: a column renamed at a known date. Rows are mapped by their own event time, so a
    slice (or a file) spanning the date maps each row by its range."""

    from_: str = Field(alias="from", min_length=1)
    columns: Columns = Field(default_factory=dict)

    @field_validator("from_")
    @classmethod
    def _moment(cls, value: str) -> str:
        from kappaplus.core.timeutil import parse_timestamp

        try:
            parse_timestamp(value)
        except ConfigError as exc:
            raise ValueError(exc.problem) from None
        return value

    @property
    def micros(self) -> int:
        from kappaplus.core.timeutil import parse_timestamp

        return parse_timestamp(self.from_)


class MappedLakeInput(StrictModel):
    """What every lake binding (Hive, Iceberg, Delta) says about its table's shape, with one
    meaning and one validation for all three: ``event_time_column`` (or ``event_time = {
    column, unit | format }`` for an event time stored as epoch numbers or formatted
    strings), ``columns`` (job column -> expression over the table's columns) and
    ``mappings`` (other ``columns`` from a date on). Applied by :mod:`kappaplus.mapping`."""

    event_time_column: str = Field(min_length=1)
    event_time: StoredEventTime | None = None
    """``{ column, unit | format }``: the stored event time (sets ``event_time_column``)."""
    columns: Columns = Field(default_factory=dict)
    """Job column -> Spark SQL expression over the table's columns (see ``Columns``)."""
    mappings: list[RangeMapping] = Field(default_factory=list)
    """Other ``columns`` from a date on (see ``RangeMapping``); ``from`` strictly rising."""

    @model_validator(mode="before")
    @classmethod
    def _stored_column(cls, data: Any) -> Any:
        stored = data.get("event_time") if isinstance(data, dict) else None
        if isinstance(stored, dict) and stored.get("column") and "event_time_column" not in data:
            data = {**data, "event_time_column": stored["column"]}
        return data

    @model_validator(mode="after")
    def _mapped(self) -> MappedLakeInput:
        stored = self.event_time
        if stored is not None and stored.column not in (None, self.event_time_column):
            raise ValueError("event_time.column and event_time_column differ: set one")
        if stored is not None and stored.format is not None:
            from kappaplus.slicing.stored_time import strptime_format

            try:
                strptime_format(stored.format)
            except ConfigError as exc:
                raise ValueError(exc.problem) from None
        moments = [m.micros for m in self.mappings]
        if any(b <= a for a, b in zip(moments, moments[1:], strict=False)):
            raise ValueError(
                "mappings: each 'from' must be later than the one before (they are ranges "
                "of event time, oldest first)"
            )
        return self

    @property
    def is_mapped(self) -> bool:
        """Whether the table has a shape of its own (not the job's columns by name)."""
        return bool(self.columns or self.mappings or self.event_time)


class SliceBudgets(StrictModel):
    """How a lake binding's range is cut into slices, one per micro-batch, and what a mode
    may override of it (``[modes.<mode>.inputs.<name>.hive]``): the slice's event-time span
    ``maxEventTimePerTrigger``, its caps ``maxRowsPerTrigger`` / ``maxBytesPerTrigger``,
    the adaptive targets ``targetRowsPerTrigger`` / ``targetBytesPerTrigger`` /
    ``targetBatchDuration`` and the small first slice ``firstSliceRows``."""

    max_event_time_per_trigger: DurationField | None = Field(None, alias="maxEventTimePerTrigger")
    max_rows_per_trigger: PositiveInt | None = Field(None, alias="maxRowsPerTrigger")
    max_bytes_per_trigger: PositiveInt | None = Field(None, alias="maxBytesPerTrigger")
    target_rows_per_trigger: PositiveInt | None = Field(None, alias="targetRowsPerTrigger")
    target_bytes_per_trigger: PositiveInt | None = Field(None, alias="targetBytesPerTrigger")
    target_batch_duration: DurationField | None = Field(None, alias="targetBatchDuration")
    """Size slices so each micro-batch takes about this long, from the batch times the run
    observes (the rows target is where it starts; the ``max*PerTrigger`` caps still hold)."""
    first_slice_rows: PositiveInt | None = Field(None, alias="firstSliceRows")
    evict_between_slices: bool | None = Field(None, alias="evictBetweenSlices")
    """A backfill runs one micro-batch with no rows after each slice, so the job's stateful
    operators drop what the slice closed before the next slice arrives. Default: on for a
    job that keeps rows in state (session windows, stream-stream joins, deduplication,
    arbitrary state) under an available-now trigger when ``watermarkAhead`` cannot be used,
    off otherwise (under a processing-time trigger each would take a trigger of its own);
    ``false`` turns it off."""
    watermark_ahead: bool | None = Field(None, alias="watermarkAhead")
    """Each slice of a bounded backfill fixes the next one and carries a marker row at its
    end, so the next slice's micro-batch evicts with a watermark covering its own rows: the
    job's stateful operators emit and drop what a slice closes in the slice's own batch,
    without eviction batches. Default: on for a job that keeps rows in state, when Spark
    judges late rows by the previous batch's watermark
    (``spark.sql.streaming.statefulOperator.allowMultiple``, Spark's default); ``false``
    turns it off (then ``evictBetweenSlices`` applies)."""


class SlicedLakeInput(MappedLakeInput, SliceBudgets):
    """What every lake binding (Hive, Iceberg, Delta) says about the range it reads and the
    slices it reads it in (:class:`SliceBudgets`), with one meaning and one validation for
    all three: ``start`` / ``end`` (a run's ``--start`` / ``--end`` win)."""

    start: str | None = None
    end: str | None = None

    @field_validator("start", "end")
    @classmethod
    def _timestamp(cls, value: str | None) -> str | None:
        from kappaplus.core.timeutil import parse_timestamp

        if value is not None:
            try:
                parse_timestamp(value)
            except ConfigError as exc:
                raise ValueError(exc.problem) from None
        return value


class KafkaInput(StrictModel):
    """A logical input bound to a Kafka topic.

    ``fields``: the records' own schema (Spark DDL, e.g. ``ride struct<no:bigint,
    city:string>, at timestamp``) when it differs from the job's declared one; ``columns``
    then maps the job's columns from it and ``event_time`` names its event-time field and,
    for a number, its unit (never guessed: a numeric event time without a unit is a dead
    letter saying so)."""

    topic: TopicName
    bootstrap_servers: Servers
    format: Literal["json", "avro", "protobuf"] = "json"
    schema_file: Path | None = None
    # Protobuf: the message's full name in schema_file (a .proto or a descriptor set)
    message: str | None = Field(None, min_length=1)
    # Avro: writer schemas by the Confluent schema id; schema_file is the reader schema
    schema_registry_url: str | None = Field(None, repr=False)
    starting_offsets: str = "latest"
    max_offsets_per_trigger: PositiveInt | None = Field(None, alias="maxOffsetsPerTrigger")
    fail_on_data_loss: bool = Field(True, alias="failOnDataLoss", strict=True)
    # catching up, every partition's share of a batch ends at one record time
    align_partitions: bool = Field(True, alias="alignPartitions", strict=True)
    options: KafkaClientSettings = Field(default_factory=dict)
    dlq: DeadLetterQueue | None = None
    fields: str | None = Field(None, min_length=1)
    columns: Columns = Field(default_factory=dict)
    event_time: StoredEventTime | None = None
    required: list[str] = Field(default_factory=list)
    """The records' fields a record must carry, non-null, or be a dead letter with the
    reason (besides the job's ``NOT NULL`` columns read by their own name)."""

    @model_validator(mode="after")
    def _avro_schema(self) -> KafkaInput:
        if self.event_time is not None and self.event_time.format is not None:
            raise ValueError(
                "event_time.format is for lake tables; a JSON event time is an ISO string "
                "or a number with a unit"
            )
        if self.format == "avro" and self.schema_file is None:
            raise ValueError("format 'avro' needs 'schema_file' (an .avsc file)")
        if self.format == "json" and self.schema_registry_url is not None:
            raise ValueError("'schema_registry_url' is for formats 'avro' and 'protobuf' only")
        check_protobuf(self.format, self.schema_file, self.message)
        if self.format == "protobuf" and self.fields is not None:
            raise ValueError("'fields' is for JSON; a Protobuf topic's fields are its message's")
        return self

    @model_validator(mode="after")
    def _default_dead_letters(self) -> KafkaInput:
        if self.dlq is None and len(self.topic) + len(DEFAULT_DLQ_SUFFIX) > _MAX_TOPIC:
            raise ValueError(
                f"the default dead-letter topic {self.topic}{DEFAULT_DLQ_SUFFIX} is longer "
                f"than Kafka's {_MAX_TOPIC} characters: set 'dlq' (a topic or a table)"
            )
        return self

    @property
    def dead_letters(self) -> DeadLetterQueue | None:
        """Where this input's dead letters go: its ``dlq``, by default the topic
        ``<topic>.dlq`` on its brokers; None only with ``dlq = { discard = true }``.

        >>> KafkaInput(topic="rides", bootstrap_servers="b:9092").dead_letters.topic
        'rides.dlq'
        """
        if self.dlq is None:
            return DeadLetterQueue(topic=f"{self.topic}{DEFAULT_DLQ_SUFFIX}", discard=False)
        return None if self.dlq.discard else self.dlq

    def __repr_args__(self):  # type: ignore[no-untyped-def]
        for key, value in super().__repr_args__():
            if key == "options":
                value = redact(value)
            yield key, value


DEFAULT_DLQ_SUFFIX = ".dlq"
"""A Kafka input without a ``dlq`` sends its dead letters to ``<topic>.dlq``."""
_MAX_TOPIC = 249


def check_protobuf(format: str, schema_file: Path | None, message: str | None) -> None:
    """A Protobuf binding names its schema and message; only a Protobuf binding a message."""
    if format == "protobuf":
        if schema_file is None:
            raise ValueError(
                "format 'protobuf' needs 'schema_file' (a .proto file or a descriptor set)"
            )
        if message is None:
            raise ValueError("format 'protobuf' needs 'message' (its full name, pkg.Message)")
    elif message is not None:
        raise ValueError("'message' is for format 'protobuf' only")


def redact(options: Mapping[str, str]) -> dict[str, str]:
    """``options`` with secret values replaced by ``***`` (for logs and errors)."""
    return dict(redact_secrets(options))


class HiveInput(SlicedLakeInput):
    """A logical input bound to a Hive table read as a stream in event-time slices.

    ``partition_format`` maps a time to the table's partition path, e.g.
    ``dt=%Y-%m-%d/hr=%H``; ``partition_time`` says whether partitions hold events by event
    time or by arrival time; with ``arrival`` partitions ``max_lateness`` bounds how long
    after its event time a record can land (which partitions a slice must scan).
    ``max_earliness`` is the clock skew the other way: how far after its arrival partition
    (arrival stamps ahead of event stamps) or before its event partition an event may sit.

    Rows no slice can place (null event time, or outside what their partition admits) fail
    the run (``unplaceable = "fail"``, the default) or go with their reason to the Hive
    dead-letter table ``dlq.table`` (``unplaceable = "dead_letter"``; default table
    ``<table>_dead_letters``), the same table layout as a Kafka input's dead letters.
    """

    table: TableName
    partition_format: str | None = None
    partition_time: Literal["event", "arrival"] = "event"
    max_lateness: DurationField | None = None
    max_earliness: DurationField | None = None
    unplaceable: Literal["fail", "dead_letter"] = "fail"
    dlq: HiveDeadLetters | None = None
    reader: Literal["auto", "jvm", "python"] = "auto"
    """Which read path: ``jvm`` (Spark's Parquet reader, built at set-up), ``python`` (the
    Python data source) or ``auto`` (the JVM one where it can serve the table)."""
    listing_interval: DurationField | None = None
    """How long a bounded run (a backfill, a bootstrap's lake phase) plans slices from one
    listing of the table's files before listing them again; default 30 seconds, ``"0
    seconds"`` lists before every slice. A file landing meanwhile in a part of the range
    the table had declared complete is reported as late, as after its slice."""

    @field_validator("partition_format")
    @classmethod
    def _format(cls, value: str | None) -> str | None:
        if value is None:
            return value
        segments = value.strip("/").split("/")
        for segment in segments:
            if not PARTITION_SEGMENT.match(segment):
                raise ValueError(f"segment {segment!r} is not 'column=%fmt'")
        if not STRFTIME_FIELD.search(value):
            raise ValueError("no time directive (%Y, %m, %d, %H ...) in the partition format")
        return value

    @model_validator(mode="after")
    def _arrival(self) -> HiveInput:
        if self.partition_time == "arrival" and self.max_lateness is None:
            raise ValueError("partition_time 'arrival' needs 'max_lateness' (e.g. '2 hours')")
        if self.dlq is not None and self.unplaceable != "dead_letter":
            raise ValueError(
                "'dlq' is only used with unplaceable = \"dead_letter\" (set it, or drop 'dlq')"
            )
        return self

    @property
    def dead_letter_table(self) -> str | None:
        """The table unplaceable rows go to, or None when they fail the run."""
        if self.unplaceable != "dead_letter":
            return None
        return self.dlq.table if self.dlq is not None else f"{self.table}_dead_letters"


class IcebergInput(SlicedLakeInput):
    """A logical input bound to an Iceberg table, read (backfill, bootstrap) as a stream of
    event-time slices planned from its manifests' statistics, from one snapshot per run.

    ``catalog``: pyiceberg catalog properties: ``name`` (default ``kappa``: a SQL catalog
    keys its tables by it; docs/how-to/iceberg-catalogs.md), ``type`` (``sql``: a SQLite file, the
    embedded default under the state directory; ``rest``; ``hive``: a metastore's thrift URI,
    ``kappa up``'s included), ``uri``, ``warehouse``
    and FileIO settings (``s3.endpoint``...). ``snapshot``: the snapshot a new run pins
    (default the current one); a run keeps its snapshot across restarts.

    The table's shape, as for every lake binding (:class:`MappedLakeInput`): ``event_time``
    (``{ column, unit | format }`` for epoch numbers or formatted strings), ``columns``
    and ``mappings``; columns are matched by field id (a renamed or widened column reads
    right across old files).
    """

    table: str = Field(min_length=1, pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)+$")
    catalog: dict[str, str] | None = None
    snapshot: int | None = None
    max_lateness: DurationField | None = None
    """Bootstrap: how much earlier than its event time a Kafka record's timestamp may be."""
    reader: Literal["auto", "jvm", "python"] = "auto"
    """Which read path: ``jvm`` (Spark's Parquet reader, columns by name), ``python``
    (pyiceberg: columns by field id, delete files applied) or ``auto`` (the JVM one where
    reading by name reads the same rows: no delete file, no renamed column, files the
    session can open; the reason is logged when not)."""

    @field_validator("catalog")
    @classmethod
    def _catalog(cls, value: dict[str, str] | None) -> dict[str, str] | None:
        if value is not None and value.get("type", "sql") not in ("sql", "rest", "hive"):
            raise ValueError(f"catalog type {value.get('type')!r}: expected sql, rest or hive")
        return value


class DeltaInput(SlicedLakeInput):
    """A logical input bound to a Delta table, read (backfill, bootstrap) as a stream of
    event-time slices planned from the statistics its log keeps per file, from one version
    per run (delta-rs; no JVM jars).

    ``path``: the table's location (a local path, ``s3://...``) or a name registered with
    ``kappa table register --delta``; ``storage_options``: delta-rs storage options
    (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``...). ``version``: the version a new run
    pins (default the current one); a run keeps its version across restarts.

    The table's shape, as for every lake binding (:class:`MappedLakeInput`): ``event_time``
    (``{ column, unit | format }`` for epoch numbers or formatted strings), ``columns``
    and ``mappings``.
    """

    path: str = Field(min_length=1)
    storage_options: dict[str, str] | None = None
    version: int | None = Field(None, ge=0)
    max_lateness: DurationField | None = None
    """Bootstrap: how much earlier than its event time a Kafka record's timestamp may be."""
    reader: Literal["auto", "jvm", "python"] = "auto"
    """Which read path: ``jvm`` (Spark's Parquet reader), ``python`` (pyarrow, deletion
    vectors applied) or ``auto`` (the JVM one where it reads the same rows: no deletion
    vectors, no type widening, files the session can open; the reason is logged when not)."""


class EventTimeBounds(StrictModel):
    """``[inputs.<name>.event_time_bounds]``: event times a row may plausibly carry.

    A row outside them (an event dated 9999-12-31 or 1970-01-01) would move the watermark
    to where every later row is late, forever; it goes to the dead letters instead (in
    ``stream`` mode and a bootstrap's Kafka phase, reason ``event time ... is ...``; lake
    rows are left out, the lake keeps them), counted as ``out_of_bounds``,
    and the watermark never sees it.

    - ``min``: the earliest valid event time, inclusive (default ``1970-01-02``: epoch-zero
      placeholders are not events); ``"none"`` for no bound.
    - ``max``: the first invalid event time (exclusive); default none.
    - ``max_future``: how far ahead of processing time (the micro-batch's timestamp) an
      event time may be, Kafka inputs only (default ``1 day``; ``"none"`` for no bound).
    - ``max_ahead``: how far ahead of its peers a record's event time may be: of the median
      event time of the records read with it from its Kafka partition in the same
      micro-batch (stream mode and a bootstrap's Kafka phase). One plausible outlier (three
      days ahead, inside ``max_future``) would otherwise move the watermark for every later
      row. Default ``"auto"`` (:func:`kappaplus.runtime.binding.outliers.ahead_rule`: a
      floor sized from the watermark delay and the trigger, plus twice the peers' own span
      behind their median); a duration for a fixed bound; ``"none"`` to opt out.
    """

    min: Annotated[Any, AfterValidator(moment_text)] = DEFAULT_MIN_EVENT_TIME
    max: Annotated[Any, AfterValidator(moment_text)] = None
    max_future: Annotated[Any, AfterValidator(optional_duration)] = DEFAULT_MAX_FUTURE
    max_ahead: Annotated[Any, AfterValidator(ahead_bound)] = AUTO

    @model_validator(mode="after")
    def _ordered(self) -> EventTimeBounds:
        from kappaplus.core.timeutil import parse_timestamp

        if isinstance(self.max_ahead, Duration) and self.max_ahead.micros <= 0:
            raise ValueError(f"max_ahead {self.max_ahead} must be a positive duration")
        low, high = self.min, self.max
        if low is not None and high is not None and parse_timestamp(low) >= parse_timestamp(high):
            raise ValueError(f"min {self.min!r} must be before max {self.max!r}")
        return self


class InputBinding(StrictModel):
    """One logical input: its Kafka binding, its Hive binding, or both, and the
    :class:`EventTimeBounds` of its rows."""

    kafka: KafkaInput | None = None
    hive: HiveInput | None = None
    iceberg: IcebergInput | None = None
    delta: DeltaInput | None = None
    event_time_bounds: EventTimeBounds = Field(default_factory=EventTimeBounds)

    @model_validator(mode="after")
    def _some(self) -> InputBinding:
        lakes = [self.hive, self.iceberg, self.delta]
        if self.kafka is None and all(lake is None for lake in lakes):
            raise ValueError(
                "bind the input to a Kafka topic ([...kafka]), a Hive table ([...hive]), "
                "an Iceberg table ([...iceberg]) or a Delta table ([...delta])"
            )
        if sum(lake is not None for lake in lakes) > 1:
            raise ValueError(
                "bind the input's history to one table: Hive, Iceberg or Delta, not several"
            )
        return self
