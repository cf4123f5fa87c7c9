"""Typed, validated options of the lake streaming sources (Hive, Iceberg, Delta).

Spark hands a Python data source its options as strings. They are parsed once, here, into
:class:`LakeSourceOptions`; every error names the option and the bad value.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

from pyspark.sql.types import StructField, StructType, TimestampType

from kappaplus.core.draining import DRAIN_OPTION
from kappaplus.core.event_time import MARKER_COLUMN
from kappaplus.core.options import (
    BOOL,
    MICROS,
    POSITIVE_INT,
    POSITIVE_MICROS,
    TEXT,
    TIMESTAMP,
    choice,
    json_value,
    names,
    option,
    options_class,
    read_options,
    to_options,
)
from kappaplus.slicing.planner import (
    DEFAULT_FIRST_SLICE_ROWS,
    DEFAULT_LISTING_INTERVAL,
    DEFAULT_TARGET_ROWS,
)
from kappaplus.slicing.stored_time import storage_of

SUPPORTED_FORMATS = ("parquet", "orc")
DEFAULT_ROWS_PER_PARTITION = 1_000_000
"""Rows of one input partition (Spark task) of a slice at most."""
PLANNER_SOURCE = "plannerSource"
"""The JVM reader's option naming the data source class whose reader plans the slices
(``module:Class``, a :class:`~kappaplus.connectors.lake.source.ListedFilesDataSource`);
absent: the Hive one, :data:`HIVE_PLANNER_SOURCE` (read by
:mod:`kappaplus.connectors.lake.plan_service`)."""
HIVE_PLANNER_SOURCE = "kappaplus.connectors.hive.datasource:HiveStreamDataSource"
"""The data source whose planner answers when :data:`PLANNER_SOURCE` is absent (named, not
imported: the lake layer imports no format)."""
__all__ = [
    "DEFAULT_TARGET_ROWS",
    "MARKER_COLUMN",
    "LakeSourceOptions",
    "NullEventTimePolicy",
    "PartitionTimeKind",
]


def range_options(
    start: Any = None,
    end: Any = None,
    max_event_time_per_trigger: Any = None,
    watermark_delay: Any = None,
) -> dict[str, str]:
    """The string options of a slicing source's range and pace that are given: its
    ``[start, end)`` in event time, the event time per slice, the watermark delay (the same
    for ``kappa_hive``, ``kappa_iceberg`` and ``kappa_delta``).

    >>> range_options(start="2024-03-01", watermark_delay="10 minutes")
    {'startingTimestamp': '2024-03-01', 'watermarkDelay': '10 minutes'}
    """
    given = {
        "startingTimestamp": start,
        "endingTimestamp": end,
        "maxEventTimePerTrigger": max_event_time_per_trigger,
        "watermarkDelay": watermark_delay,
    }
    return {key: str(value) for key, value in given.items() if value is not None}


def _struct(value: Any) -> StructType:
    return value if isinstance(value, StructType) else StructType.fromJson(value)


SCHEMA_JSON = json_value(
    StructType.fromJson, lambda schema: schema.jsonValue(), "a Spark schema JSON", _struct
)
"""A table schema as Spark's JSON (``StructType.json()``)."""


class PartitionTimeKind(StrEnum):
    """What the table's time partitions mean."""

    EVENT = "event"  # a partition holds the events whose event time falls in its range
    ARRIVAL = "arrival"  # a partition holds the events that arrived (were ingested) in its range


class NullEventTimePolicy(StrEnum):
    """What to do with rows whose event time is null (they belong to no slice)."""

    FAIL = "fail"
    DEAD_LETTER = "deadLetter"


@options_class(kw_only=True)
class LakeSourceOptions:
    """Everything the source needs, resolved in the caller's process and validated here.

    Times are integer microseconds since the epoch (UTC); durations are microseconds.
    """

    table: str = option("table", required=False)
    """The table's name (for messages); default its ``location``."""
    location: str = option("location")
    format: str = option("format", choice(SUPPORTED_FORMATS))
    schema: StructType = option("schema", SCHEMA_JSON)
    partition_columns: tuple[str, ...] = option("partitionColumns", names(), default=())
    event_time_column: str = option("eventTimeColumn")
    starting_timestamp: int | None = option("startingTimestamp", TIMESTAMP, default=None)
    ending_timestamp: int | None = option("endingTimestamp", TIMESTAMP, default=None)
    max_event_time_per_trigger: int | None = option(
        "maxEventTimePerTrigger", POSITIVE_MICROS, default=None
    )
    """None: no span cap (adaptive slices only)."""
    max_rows_per_trigger: int | None = option("maxRowsPerTrigger", POSITIVE_INT, default=None)
    max_bytes_per_trigger: int | None = option("maxBytesPerTrigger", POSITIVE_INT, default=None)
    partition_time_format: str | None = option("partitionTimeFormat", default=None)
    partition_time_kind: PartitionTimeKind = option(
        "partitionTimeKind", choice(PartitionTimeKind), default=PartitionTimeKind.EVENT
    )
    max_lateness: int = option("maxLateness", MICROS, default=0)
    completeness_delay: int = option("completenessDelay", MICROS, default=0)
    null_event_time_policy: NullEventTimePolicy = option(
        "nullEventTimePolicy", choice(NullEventTimePolicy), default=NullEventTimePolicy.FAIL
    )
    dead_letter_path: str | None = option("deadLetterPath", default=None)
    job_name: str | None = option("jobName", TEXT, default=None)
    """The job named in the dead letters the source stages (default ``lake:<table>``; a
    run's publishing names its job)."""
    manifest_dir: str = option("manifestDir")
    watermark_delay: int | None = option("watermarkDelay", MICROS, default=None)
    rows_per_partition: int = option(
        "rowsPerPartition", POSITIVE_INT, default=DEFAULT_ROWS_PER_PARTITION
    )
    columns: tuple[str, ...] | None = option("columns", names(), default=None)
    max_earliness: int = option("maxEarliness", MICROS, default=0)
    """Clock skew allowed the other way round: how far an event may sit before its
    event-time partition, or after its arrival-time partition (a producer's clock ahead of
    the one stamping the arrival)."""
    advice_prefix: str | None = option("adviceConfigPrefix", TEXT, default=None)
    """Where a job configuration sets this source up (``inputs.<name>.hive``): errors then
    advise its keys instead of the source options."""
    target_rows_per_trigger: int | None = option(
        "targetRowsPerTrigger", POSITIVE_INT, default=DEFAULT_TARGET_ROWS
    )
    """Only when no target is given: with ``targetBytesPerTrigger`` alone it is None."""
    target_bytes_per_trigger: int | None = option(
        "targetBytesPerTrigger", POSITIVE_INT, default=None
    )
    first_slice_rows: int = option("firstSliceRows", POSITIVE_INT, default=DEFAULT_FIRST_SLICE_ROWS)
    """Rows the first slice of a query aims at when the range holds more than one slice:
    its micro-batch shows the run's first output sooner
    (:data:`~kappaplus.slicing.planner.DEFAULT_FIRST_SLICE_ROWS`); at or above the rows
    target every slice aims at the target."""
    target_batch_duration: int | None = option("targetBatchDuration", POSITIVE_MICROS, default=None)
    """Size slices so a micro-batch takes about this long (microseconds), from the batch
    times observed (:mod:`~kappaplus.slicing.pacing`); the rows target is where it
    starts."""
    event_time_unit: str | None = option("eventTimeUnit", choice(("s", "ms", "us")), default=None)
    """The event-time column holds epoch seconds, milliseconds or microseconds."""
    event_time_format: str | None = option("eventTimeFormat", TEXT, default=None)
    """The event-time column holds strings in this Spark datetime pattern."""
    evict_between_slices: bool = option("evictBetweenSlices", BOOL, default=False)
    """After each data slice, one micro-batch with no rows, in which the job's stateful
    operators evict what the slice's watermark closed (:mod:`~kappaplus.slicing.offsets`).
    The runtime turns it on for jobs that keep rows in state (session windows, stream-stream
    joins)."""
    watermark_ahead: bool = option("watermarkAhead", BOOL, default=False)
    """Each data slice of a bounded run fixes the next and carries a marker row at its end,
    so the job's stateful operators drop what a slice closes in the slice's own micro-batch,
    with no eviction batch (:mod:`~kappaplus.slicing.offsets`). The runtime turns it on for
    jobs that keep rows in state when Spark judges late rows by the previous batch's
    watermark (``spark.sql.streaming.statefulOperator.allowMultiple``, on by default)."""
    listing_interval: int = option("listingInterval", MICROS, default=DEFAULT_LISTING_INTERVAL)
    """How long a bounded run (an end bound, or available-now) plans from one listing of
    the table before listing it again (microseconds; 0: every micro-batch lists), see
    :data:`~kappaplus.slicing.planner.DEFAULT_LISTING_INTERVAL`."""
    drain_file: str | None = option(DRAIN_OPTION, default=None)
    """Once this file exists the source admits no new data (:mod:`kappaplus.core.draining`)."""

    @property
    def storage(self) -> str:
        """How the event time is stored (:mod:`~kappaplus.slicing.stored_time`)."""
        return storage_of(self.event_time_unit, self.event_time_format)

    @property
    def output_schema(self) -> StructType:
        """The columns the source delivers, in table order: ``columns`` and the event-time
        column when ``columns`` is set (column pruning), else every column of the table. An
        event time stored as numbers or strings is delivered as a timestamp."""
        fields = self.schema.fields
        if self.columns is not None:
            keep = {*self.columns, self.event_time_column}
            fields = [f for f in fields if f.name in keep]
        if self.storage:
            fields = [
                StructField(f.name, TimestampType(), f.nullable, f.metadata)
                if f.name == self.event_time_column
                else f
                for f in fields
            ]
        return StructType(fields)

    @property
    def emits_end_marker(self) -> bool:
        """A bounded run ends with marker rows that move the watermark to the end bound."""
        return self.watermark_delay is not None

    @property
    def data_columns(self) -> list[str]:
        """Columns stored in the files (partition columns come from directory names)."""
        return [f.name for f in self.output_schema.fields if f.name not in self.partition_columns]

    @property
    def table_data_columns(self) -> list[str]:
        """Every column stored in the files: what a dead-lettered row keeps, pruned or not."""
        return [f.name for f in self.schema.fields if f.name not in self.partition_columns]

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> LakeSourceOptions:
        """Validate Spark's string options; raise :class:`ConfigError` naming the culprit."""
        read = read_options(cls, options)
        table = read["table"] or read["location"]
        schema: StructType = read["schema"]
        columns_of = schema.fieldNames()
        for column in read["partition_columns"]:
            if column not in columns_of:
                raise read.error(
                    "partition_columns", f"not a column of table {table!r}", value=column
                )
        event_time = read["event_time_column"]
        if event_time not in columns_of:
            raise read.error(
                "event_time_column",
                f"table {table!r} has no such column (columns: {', '.join(columns_of)})",
            )
        event_type = schema[event_time].dataType
        unit, pattern = read["event_time_unit"], read["event_time_format"]
        if unit is not None and pattern is not None:
            raise read.error("event_time_format", "give eventTimeUnit or eventTimeFormat, not both")
        storage = storage_of(unit, pattern)
        if not stored_type_ok(event_type, storage):
            wanted = {"": "a timestamp", "unit": "an integer (epoch " + str(unit) + ")"}.get(
                storage.partition(":")[0], "a string (format " + str(pattern) + ")"
            )
            raise read.error(
                "event_time_column",
                f"column of table {table!r} is {event_type.simpleString()}, not {wanted}",
            )
        if event_time in read["partition_columns"]:
            raise read.error("event_time_column", "must be a data column, not a partition column")
        start, end = read["starting_timestamp"], read["ending_timestamp"]
        if start is not None and end is not None and start >= end:
            raise read.error(
                "starting_timestamp",
                f"must be before {read.spelled('ending_timestamp')} "
                f"{read.text('ending_timestamp')!r}",
            )
        if read.given("target_bytes_per_trigger") and not read.given("target_rows_per_trigger"):
            read.values["target_rows_per_trigger"] = None  # the byte target alone
        if (
            read["null_event_time_policy"] is NullEventTimePolicy.DEAD_LETTER
            and read["dead_letter_path"] is None
        ):
            raise read.error(
                "dead_letter_path",
                f"is required when {read.spelled('null_event_time_policy')}=deadLetter",
            )
        for column in read["columns"] or ():
            if column not in columns_of:
                raise read.error(
                    "columns",
                    f"table {table!r} has no such column (columns: {', '.join(columns_of)})",
                    value=column,
                )
        return cls(**{**read.init(cls), "table": table})

    def to_options(self) -> dict[str, str]:
        """The string options :meth:`parse` reads as this object."""
        return to_options(self)


def stored_type_ok(kind: object, storage: str) -> bool:
    """Whether a Spark column type can hold event times stored as ``storage``."""
    from pyspark.sql import types as T

    if storage.startswith("unit:"):
        return isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType)
    if storage.startswith("format:"):
        return isinstance(kind, T.StringType | T.VarcharType | T.CharType)
    return isinstance(kind, T.TimestampType | T.TimestampNTZType)
