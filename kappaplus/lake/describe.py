"""What a backfill will see in a table, from the catalog and the files' metadata only.

>>> print("\\n".join(describe_lines(describe_table(spark, "lake.rides"))))  # doctest: +SKIP
table       lake.rides (the metastore server thrift://127.0.0.1:9083)
...

Everything comes from one listing of the table's directory (the way the ``kappa_hive``
source sees it: visible files, committed sink batches only) and the Parquet row-group / ORC
stripe statistics: partitions, files, bytes, rows, the event-time range, rows whose event
time is null, and how far event times sit outside their time partitions -- before the
partition (what ``max_lateness`` must cover in an arrival-time table) and after it (what
``max_earliness`` must cover: clock skew). No data is read.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import iso
from kappaplus.lake.describing import only_timestamp_column

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class TableDescription:
    """What :func:`describe_table` found (times in microseconds since the epoch, UTC)."""

    table: str
    catalog: str
    location: str
    format: str
    columns: list[tuple[str, str]]
    partition_columns: list[str]
    partition_format: str | None
    event_time_column: str
    partitions: int
    files: int
    bytes: int
    rows: int
    null_event_times: int | None
    event_time_min: int | None
    event_time_max: int | None
    partition_time_min: int | None
    partition_time_max: int | None
    before_partition: int
    """How far the earliest event sits before the start of its partition (0 if none)."""
    after_partition: int
    """How far the latest event sits at or after the end of its partition (0 if none)."""
    row_groups_without_statistics: int

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        for key in ("event_time_min", "event_time_max", "partition_time_min", "partition_time_max"):
            out[key] = None if out[key] is None else iso(out[key])
        return out


def _event_time_column(columns: list[tuple[str, str]], given: str | None, table: str) -> str:
    names = [name for name, _ in columns]
    if given is not None:
        if given not in names:
            raise ConfigError("--event-time", given, f"table {table!r} has no such column")
        return given
    stamps = [name for name, kind in columns if kind.startswith("timestamp")]
    return only_timestamp_column(stamps, f"table {table!r}")


def describe_table(
    spark: SparkSession,
    table: str,
    *,
    event_time_column: str | None = None,
    partition_format: str | None = None,
) -> TableDescription:
    """Describe ``table`` as a backfill would read it (see the module docstring)."""
    from kappaplus.connectors.hive.catalog import resolve_table
    from kappaplus.connectors.hive.files import file_stats, list_data_files
    from kappaplus.connectors.hive.layout import PartitionTimeLayout, infer_layout
    from kappaplus.core.table.catalogs import catalog_of

    found = resolve_table(spark, table)
    data_columns = [
        (f.name, f.dataType.simpleString())
        for f in found.schema.fields
        if f.name not in found.partition_columns
    ]
    event_time = _event_time_column(data_columns, event_time_column, table)
    pattern = partition_format or infer_layout(found.partition_types())
    layout = PartitionTimeLayout(pattern) if pattern else None
    files = list_data_files(found.location, found.partition_columns, layout, 0, False, found.name)
    rows = size = unknown = 0
    nulls: int | None = 0
    lows: list[int] = []
    highs: list[int] = []
    before = after = 0
    partitions: set[str] = set()
    for f in files:
        partitions.add(f.partition_dir)
        size += f.size
        for group in file_stats(
            f.path, f.size, f.mtime_ns, found.format, event_time, found.location
        ):
            rows += group.num_rows
            if nulls is not None:
                nulls = None if group.null_count is None else nulls + group.null_count
            if group.ts_min is None or group.ts_max is None:
                unknown += 1
                continue
            lows.append(group.ts_min)
            highs.append(group.ts_max)
            if layout is not None:
                before = max(before, f.admissible_lo - group.ts_min)
                after = max(after, group.ts_max + 1 - f.admissible_hi)
    ranges = [(f.admissible_lo, f.admissible_hi) for f in files] if layout is not None else []
    return TableDescription(
        table=found.name,
        catalog=catalog_of(spark),
        location=found.location,
        format=found.format,
        columns=[(f.name, f.dataType.simpleString()) for f in found.schema.fields],
        partition_columns=list(found.partition_columns),
        partition_format=pattern,
        event_time_column=event_time,
        partitions=len(partitions),
        files=len(files),
        bytes=size,
        rows=rows,
        null_event_times=nulls,
        event_time_min=min(lows) if lows else None,
        event_time_max=max(highs) if highs else None,
        partition_time_min=min(lo for lo, _ in ranges) if ranges else None,
        partition_time_max=max(hi for _, hi in ranges) if ranges else None,
        before_partition=max(before, 0),
        after_partition=max(after, 0),
        row_groups_without_statistics=unknown,
    )


def _duration(micros: int) -> str:
    from kappaplus.runtime.observe.progress import format_seconds

    return format_seconds(micros / 1_000_000) if micros else "0s"


def describe_lines(d: TableDescription) -> list[str]:
    """The description as lines of text (fits 80 columns but for long names and paths)."""
    from kappaplus.core.table.catalogs import describe_catalog

    def when(value: int | None) -> str:
        return "-" if value is None else iso(value)

    lines = [
        f"table        {d.table} ({d.format})",
        f"catalog      {describe_catalog(d.catalog)}",
        f"location     {d.location}",
        f"columns      {', '.join(f'{n} {k}' for n, k in d.columns)}",
        f"partitions   {d.partitions:,} by {', '.join(d.partition_columns) or '(none)'}"
        + (f" as {d.partition_format}" if d.partition_format else ""),
        f"files        {d.files:,} ({d.bytes / 1e6:,.1f} MB)",
        f"rows         {d.rows:,} (from file metadata)",
        f"event time   [{when(d.event_time_min)}, {when(d.event_time_max)}] "
        f"in {d.event_time_column}",
    ]
    if d.partition_time_min is not None:
        lines.append(
            f"partitions   cover [{when(d.partition_time_min)}, {when(d.partition_time_max)})"
        )
        lines.append(
            f"outside      events sit up to {_duration(d.before_partition)} before and "
            f"{_duration(d.after_partition)} after their partition"
        )
        lines.append("             arrival-time partitions: max_lateness must cover the first,")
        lines.append("             max_earliness the second (event-time partitions: the reverse)")
    nulls = "unknown" if d.null_event_times is None else f"{d.null_event_times:,}"
    lines.append(f"null times   {nulls} (rows no slice can place)")
    if d.row_groups_without_statistics:
        lines.append(
            f"no stats     {d.row_groups_without_statistics} row groups have no event-time "
            "statistics (a backfill reads their event times to plan slices)"
        )
    return lines
