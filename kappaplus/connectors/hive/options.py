"""Typed, validated options of the Hive streaming source.

Spark hands a Python data source its options as strings. They are parsed once, here, into
:class:`HiveSourceOptions`; every error names the option and the bad value.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from pyspark.sql.types import StructType, TimestampNTZType, TimestampType

from kappaplus.draining import DRAIN_OPTION
from kappaplus.errors import ConfigError
from kappaplus.event_time import MARKER_COLUMN
from kappaplus.timeutil import parse_duration, parse_timestamp

SUPPORTED_FORMATS = ("parquet", "orc")
DEFAULT_TARGET_ROWS = 2_000_000
"""Rows per micro-batch that adaptive slicing aims at when no target is set: large enough
that a micro-batch's fixed cost (~0.5-1 s) is small against its rows, small enough that one
slice's rows and its shuffle fit a production executor (see ``docs/benchmarks.md``)."""
__all__ = ["MARKER_COLUMN", "HiveSourceOptions", "NullEventTimePolicy", "PartitionTimeKind"]


class PartitionTimeKind(StrEnum):
    """What the table's time partitions mean."""

    EVENT = "event"  # a partition holds the events whose event time falls in its range
    ARRIVAL = "arrival"  # a partition holds the events that arrived (were ingested) in its range


class NullEventTimePolicy(StrEnum):
    """What to do with rows whose event time is null (they belong to no slice)."""

    FAIL = "fail"
    DEAD_LETTER = "deadLetter"


@dataclass(frozen=True)
class HiveSourceOptions:
    """Everything the source needs, resolved in the caller's process and validated here.

    Times are integer microseconds since the epoch (UTC); durations are microseconds.
    """

    table: str
    location: str
    format: str
    schema: StructType
    partition_columns: tuple[str, ...]
    event_time_column: str
    starting_timestamp: int | None
    ending_timestamp: int | None
    max_event_time_per_trigger: int | None  # None: no span cap (adaptive slices only)
    max_rows_per_trigger: int | None
    max_bytes_per_trigger: int | None
    partition_time_format: str | None
    partition_time_kind: PartitionTimeKind
    max_lateness: int
    completeness_delay: int
    null_event_time_policy: NullEventTimePolicy
    dead_letter_path: str | None
    manifest_dir: str
    watermark_delay: int | None
    rows_per_partition: int
    columns: tuple[str, ...] | None = None
    max_earliness: int = 0
    """Clock skew allowed the other way round: how far an event may sit before its
    event-time partition, or after its arrival-time partition (a producer's clock ahead of
    the one stamping the arrival)."""
    advice_prefix: str | None = None
    """Where a job configuration sets this source up (``inputs.<name>.hive``): errors then
    advise its keys instead of the source options."""
    target_rows_per_trigger: int | None = DEFAULT_TARGET_ROWS
    target_bytes_per_trigger: int | None = None
    drain_file: str | None = None
    """Once this file exists the source admits no new data (:mod:`kappaplus.draining`)."""

    @property
    def output_schema(self) -> StructType:
        """The columns the source delivers, in table order: ``columns`` and the event-time
        column when ``columns`` is set (column pruning), else every column of the table."""
        if self.columns is None:
            return self.schema
        keep = {*self.columns, self.event_time_column}
        return StructType([f for f in self.schema.fields if f.name in keep])

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
    def parse(cls, options: Mapping[str, str]) -> HiveSourceOptions:
        """Validate Spark's string options; raise :class:`ConfigError` naming the culprit."""
        opts = {k.lower(): v for k, v in options.items()}

        def get(name: str, default: str | None = None) -> str | None:
            value = opts.get(name.lower(), default)
            return None if value is None or str(value).strip() == "" else str(value).strip()

        def required(name: str) -> str:
            value = get(name)
            if value is None:
                raise ConfigError(name, None, "is required")
            return value

        table = get("table") or required("location")
        location = required("location")
        fmt = required("format").lower()
        if fmt not in SUPPORTED_FORMATS:
            raise ConfigError(
                "format",
                fmt,
                f"table {table!r} is stored as {fmt!r}; the Hive streaming source reads "
                f"{', '.join(SUPPORTED_FORMATS)}",
            )
        schema_text = required("schema")
        try:
            schema = StructType.fromJson(json.loads(schema_text))
        except (ValueError, KeyError, TypeError) as exc:
            raise ConfigError(
                "schema", schema_text[:80], f"not a Spark schema JSON: {exc}"
            ) from exc
        partition_columns = tuple(
            c.strip() for c in (get("partitionColumns") or "").split(",") if c.strip()
        )
        for column in partition_columns:
            if column not in schema.fieldNames():
                raise ConfigError("partitionColumns", column, f"not a column of table {table!r}")
        event_time = required("eventTimeColumn")
        if event_time not in schema.fieldNames():
            raise ConfigError(
                "eventTimeColumn",
                event_time,
                f"table {table!r} has no such column (columns: {', '.join(schema.fieldNames())})",
            )
        event_type = schema[event_time].dataType
        if not isinstance(event_type, TimestampType | TimestampNTZType):
            raise ConfigError(
                "eventTimeColumn",
                event_time,
                f"column of table {table!r} is {event_type.simpleString()}, not a timestamp",
            )
        if event_time in partition_columns:
            raise ConfigError(
                "eventTimeColumn", event_time, "must be a data column, not a partition column"
            )

        start = _timestamp(get("startingTimestamp"), "startingTimestamp")
        end = _timestamp(get("endingTimestamp"), "endingTimestamp")
        if start is not None and end is not None and start >= end:
            raise ConfigError(
                "startingTimestamp",
                get("startingTimestamp"),
                f"must be before endingTimestamp {get('endingTimestamp')!r}",
            )
        span_text = get("maxEventTimePerTrigger")
        max_span = (
            None if span_text is None else parse_duration(span_text, "maxEventTimePerTrigger")
        )
        if max_span is not None and max_span <= 0:
            raise ConfigError("maxEventTimePerTrigger", span_text, "must be positive")
        target_rows = _positive_int(get("targetRowsPerTrigger"), "targetRowsPerTrigger")
        target_bytes = _positive_int(get("targetBytesPerTrigger"), "targetBytesPerTrigger")
        if target_rows is None and target_bytes is None:
            target_rows = DEFAULT_TARGET_ROWS
        kind_text = get("partitionTimeKind", "event") or "event"
        try:
            kind = PartitionTimeKind(kind_text.lower())
        except ValueError as exc:
            raise ConfigError(
                "partitionTimeKind", kind_text, "expected 'event' or 'arrival'"
            ) from exc
        policy_text = get("nullEventTimePolicy", "fail") or "fail"
        policies = {p.value.lower(): p for p in NullEventTimePolicy}
        if policy_text.lower() not in policies:
            raise ConfigError("nullEventTimePolicy", policy_text, "expected 'fail' or 'deadLetter'")
        policy = policies[policy_text.lower()]
        dead_letter_path = get("deadLetterPath")
        if policy is NullEventTimePolicy.DEAD_LETTER and dead_letter_path is None:
            raise ConfigError(
                "deadLetterPath", None, "is required when nullEventTimePolicy=deadLetter"
            )
        watermark = get("watermarkDelay")
        columns = None
        if get("columns") is not None:
            columns = tuple(c.strip() for c in (get("columns") or "").split(",") if c.strip())
            for column in columns:
                if column not in schema.fieldNames():
                    raise ConfigError(
                        "columns",
                        column,
                        f"table {table!r} has no such column "
                        f"(columns: {', '.join(schema.fieldNames())})",
                    )
        return cls(
            table=table,
            location=location,
            format=fmt,
            schema=schema,
            partition_columns=partition_columns,
            event_time_column=event_time,
            starting_timestamp=start,
            ending_timestamp=end,
            max_event_time_per_trigger=max_span,
            max_rows_per_trigger=_positive_int(get("maxRowsPerTrigger"), "maxRowsPerTrigger"),
            max_bytes_per_trigger=_positive_int(get("maxBytesPerTrigger"), "maxBytesPerTrigger"),
            partition_time_format=get("partitionTimeFormat"),
            partition_time_kind=kind,
            max_lateness=parse_duration(get("maxLateness", "0") or "0", "maxLateness"),
            max_earliness=_non_negative(get("maxEarliness"), "maxEarliness"),
            advice_prefix=get("adviceConfigPrefix"),
            completeness_delay=parse_duration(
                get("completenessDelay", "0") or "0", "completenessDelay"
            ),
            null_event_time_policy=policy,
            dead_letter_path=dead_letter_path,
            manifest_dir=required("manifestDir"),
            watermark_delay=None
            if watermark is None
            else parse_duration(watermark, "watermarkDelay"),
            rows_per_partition=_positive_int(get("rowsPerPartition", "1000000"), "rowsPerPartition")
            or 1_000_000,
            columns=columns,
            target_rows_per_trigger=target_rows,
            target_bytes_per_trigger=target_bytes,
            drain_file=get(DRAIN_OPTION),
        )


def _timestamp(value: str | None, option: str) -> int | None:
    return None if value is None else parse_timestamp(value, option)


def _non_negative(value: str | None, option: str) -> int:
    duration = parse_duration(value or "0", option)
    if duration < 0:
        raise ConfigError(option, value, "must not be negative")
    return duration


def _positive_int(value: str | None, option: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError as exc:
        raise ConfigError(option, value, "expected a whole number") from exc
    if number <= 0:
        raise ConfigError(option, value, "must be positive")
    return number
