"""What a backfill will see in a Delta table, from its log only (no data read).

The current version (or a given one), its partition columns, data files, rows and bytes,
the event-time range from the log's per-file statistics, files without statistics, files
with deletion vectors (applied by the source), column mapping (refused by the source), and
how many files a typical slice overlaps: the cost of a table not partitioned by event
time, where a slice reads every file whose ``[min, max]`` overlaps it.

>>> print("\\n".join(delta_lines(describe_delta("/lake/rides", None, "ts"))))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import iso
from kappaplus.lake.describing import TYPICAL_SLICE_ROWS, only_timestamp_column, slice_overlaps


@dataclass(frozen=True)
class DeltaDescription:
    table: str
    location: str
    version: int
    partition_columns: list[str]
    event_time_column: str
    data_files: int
    rows: int
    bytes: int
    ts_min: int | None
    ts_max: int | None
    files_without_statistics: int
    files_with_deletion_vectors: int
    deleted_rows: int
    column_mapping: str
    reader_features: list[str]
    slice_rows: int
    slices: int
    files_per_slice_median: float
    files_per_slice_max: int

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts_min"] = iso(self.ts_min) if self.ts_min is not None else None
        out["ts_max"] = iso(self.ts_max) if self.ts_max is not None else None
        return out


def describe_delta(
    path: str,
    storage_options: dict[str, str] | None,
    event_time_column: str | None = None,
    version: int | None = None,
    slice_rows: int = TYPICAL_SLICE_ROWS,
) -> DeltaDescription:
    """Describe the Delta table at ``path`` (a location or a registered name)."""
    import os

    import pyarrow as pa

    from kappaplus.connectors.delta.lister import (
        STATS_TRUNCATION_US,
        _local,
        add_actions,
        deletion_masks,
        file_uri,
    )
    from kappaplus.connectors.delta.names import resolve_delta_location
    from kappaplus.connectors.delta.table import arrow_schema, has_deletion_vectors, open_delta

    location, name = resolve_delta_location(path)
    if "://" not in location:
        location = os.path.abspath(location)
    table = open_delta(location, storage_options, version)
    schema = arrow_schema(table)
    if event_time_column is None:
        stamps = [f.name for f in schema if pa.types.is_timestamp(f.type)]
        event_time_column = only_timestamp_column(stamps, f"Delta table {path!r}")
    if event_time_column not in schema.names:
        raise ConfigError(
            "--event-time", event_time_column, f"not a column of Delta table {path!r}"
        )
    adds = add_actions(table)
    at = int(table.version())
    records = adds.column("num_records").to_pylist()
    spans = _file_spans(adds, event_time_column)
    bare = adds.num_rows - len(spans)
    masks: dict[str, Any] = {}
    if has_deletion_vectors(table):
        storage = tuple(sorted((storage_options or {}).items()))
        masks = deletion_masks(name or location, location, at, storage)
    paths = {_local(file_uri(location, p)) for p in adds.column("path").to_pylist()}
    deleted = sum(int((~m).sum()) for p, m in masks.items() if p in paths)
    rows = sum(int(r) for r in records if r is not None) - deleted
    slices, median, most = slice_overlaps(spans, rows, slice_rows, bare)
    config = table.metadata().configuration or {}
    return DeltaDescription(
        table=name or path,
        location=location,
        version=at,
        partition_columns=list(table.metadata().partition_columns),
        event_time_column=event_time_column,
        data_files=adds.num_rows,
        rows=rows,
        bytes=int(pa.compute.sum(adds.column("size_bytes")).as_py() or 0),
        ts_min=min((s[0] for s in spans), default=None),
        ts_max=max((s[1] - STATS_TRUNCATION_US for s in spans), default=None),
        files_without_statistics=bare,
        files_with_deletion_vectors=sum(1 for p in masks if p in paths),
        deleted_rows=deleted,
        column_mapping=config.get("delta.columnMapping.mode", "none"),
        reader_features=sorted(table.protocol().reader_features or ()),
        slice_rows=slice_rows,
        slices=slices,
        files_per_slice_median=median,
        files_per_slice_max=most,
    )


def _file_spans(adds: Any, column: str) -> list[tuple[int, int]]:
    """``[min, max]`` of ``column`` (epoch microseconds) of each data file of the log's
    ``adds`` (a pyarrow table) that has statistics of it; the max widened by the truncation
    of the statistics' timestamps to milliseconds."""
    import pyarrow as pa

    from kappaplus.connectors.delta.lister import STATS_TRUNCATION_US

    def micros(name: str) -> list[int | None]:
        if name not in adds.column_names or not pa.types.is_timestamp(adds.column(name).type):
            return [None] * adds.num_rows
        values = adds.column(name).cast(pa.timestamp("us", tz="UTC")).cast(pa.int64())
        return list(values.to_pylist())

    lows, highs = micros(f"min.{column}"), micros(f"max.{column}")
    return [
        (lo, hi + STATS_TRUNCATION_US)
        for lo, hi in zip(lows, highs, strict=True)
        if lo is not None and hi is not None
    ]


def delta_lines(d: DeltaDescription) -> list[str]:
    def when(value: int | None) -> str:
        return iso(value) if value is not None else "-"

    partitions = ", ".join(d.partition_columns) or "none"
    lines = [
        f"table          {d.table} (Delta, {d.location})",
        f"version        {d.version}",
        f"partitions     {partitions} (values from the log)",
        f"event time     {d.event_time_column}",
        f"data files     {d.data_files} ({d.bytes:,} bytes), {d.rows:,} rows",
        f"event times    {when(d.ts_min)} .. {when(d.ts_max)} (from the log's statistics)",
    ]
    if d.files_without_statistics:
        lines.append(
            f"no statistics  {d.files_without_statistics} data file(s): read whole in every slice"
        )
    if d.files_with_deletion_vectors:
        lines.append(
            f"deletions      {d.files_with_deletion_vectors} file(s) with deletion vectors "
            f"({d.deleted_rows:,} rows deleted): applied by the source"
        )
    if d.column_mapping != "none":
        lines.append(
            f"column mapping {d.column_mapping}: refused by the source (rewrite without it)"
        )
    lines.append(
        f"slices         {d.slices} of about {d.slice_rows:,} rows; a slice overlaps "
        f"{d.files_per_slice_median:g} file(s) (median), {d.files_per_slice_max} at most"
    )
    return lines
