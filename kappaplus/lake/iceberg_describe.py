"""What a backfill will see in an Iceberg table, from its metadata only (no data read).

The current snapshot (or a given one), its data files, rows and bytes, the event-time range
from the manifests' bounds (found by field id), data files without bounds, delete files
(position and equality, both applied by the source as it reads), and how many files a typical
slice overlaps: the cost of a table not partitioned by event time, where a slice reads every
file whose ``[min, max]`` overlaps it.

>>> print("\\n".join(iceberg_lines(describe_iceberg("lake.rides", None, "ts"))))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import iso
from kappaplus.lake.describing import TYPICAL_SLICE_ROWS, only_timestamp_column, slice_overlaps


@dataclass(frozen=True)
class IcebergDescription:
    table: str
    location: str
    snapshot_id: int | None
    snapshots: int
    event_time_column: str
    event_time_field_id: int
    data_files: int
    rows: int
    bytes: int
    ts_min: int | None
    ts_max: int | None
    files_without_bounds: int
    position_delete_files: int
    equality_delete_files: int
    slice_rows: int
    slices: int
    files_per_slice_median: float
    files_per_slice_max: int

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["ts_min"] = iso(self.ts_min) if self.ts_min is not None else None
        out["ts_max"] = iso(self.ts_max) if self.ts_max is not None else None
        return out


def describe_iceberg(
    table_name: str,
    catalog: dict[str, str] | None,
    event_time_column: str | None = None,
    snapshot_id: int | None = None,
    slice_rows: int = TYPICAL_SLICE_ROWS,
) -> IcebergDescription:
    """Describe ``table_name`` (see the module docstring)."""
    from pyiceberg.manifest import DataFileContent
    from pyiceberg.types import TimestampType, TimestamptzType

    from kappaplus.connectors.iceberg.catalog import load_catalog, load_table
    from kappaplus.connectors.iceberg.lister import _bound

    table = load_table(load_catalog(catalog), table_name)  # one-line errors naming both
    schema = table.schema()
    if event_time_column is None:
        stamps = [
            f.name
            for f in schema.fields
            if isinstance(f.field_type, TimestampType | TimestamptzType)
        ]
        event_time_column = only_timestamp_column(stamps, f"table {table_name!r}")
    try:
        field = schema.find_field(event_time_column)
    except ValueError:
        raise ConfigError(
            "--event-time", event_time_column, f"not a column of Iceberg table {table_name!r}"
        ) from None
    snapshot = (
        table.metadata.snapshot_by_id(snapshot_id)
        if snapshot_id is not None
        else table.current_snapshot()
    )
    spans: list[tuple[int, int]] = []
    rows = nbytes = files = bare = pos = eq = 0
    if snapshot is not None:
        for manifest in snapshot.manifests(table.io):
            for entry in manifest.fetch_manifest_entry(table.io):
                f = entry.data_file
                if f.content == DataFileContent.POSITION_DELETES:
                    pos += 1
                    continue
                if f.content == DataFileContent.EQUALITY_DELETES:
                    eq += 1
                    continue
                files += 1
                rows += f.record_count
                nbytes += f.file_size_in_bytes
                lo = _bound(field.field_type, (f.lower_bounds or {}).get(field.field_id))
                hi = _bound(field.field_type, (f.upper_bounds or {}).get(field.field_id))
                if lo is None or hi is None:
                    bare += 1
                else:
                    spans.append((lo, hi))
    ts_min = min((s[0] for s in spans), default=None)
    ts_max = max((s[1] for s in spans), default=None)
    slices, median, most = slice_overlaps(spans, rows, slice_rows, bare)
    return IcebergDescription(
        table=table_name,
        location=str(table.location()),
        snapshot_id=None if snapshot is None else int(snapshot.snapshot_id),
        snapshots=len(table.snapshots()),
        event_time_column=event_time_column,
        event_time_field_id=field.field_id,
        data_files=files,
        rows=rows,
        bytes=nbytes,
        ts_min=ts_min,
        ts_max=ts_max,
        files_without_bounds=bare,
        position_delete_files=pos,
        equality_delete_files=eq,
        slice_rows=slice_rows,
        slices=slices,
        files_per_slice_median=median,
        files_per_slice_max=most,
    )


def iceberg_lines(d: IcebergDescription) -> list[str]:
    def when(value: int | None) -> str:
        return iso(value) if value is not None else "-"

    lines = [
        f"table          {d.table} (Iceberg, {d.location})",
        f"snapshot       {d.snapshot_id} ({d.snapshots} snapshot(s) in the table)",
        f"event time     {d.event_time_column} (field id {d.event_time_field_id})",
        f"data files     {d.data_files} ({d.bytes:,} bytes), {d.rows:,} rows",
        f"event times    {when(d.ts_min)} .. {when(d.ts_max)} (from manifest bounds)",
        f"delete files   {d.position_delete_files} position, {d.equality_delete_files} equality",
    ]
    if d.files_without_bounds:
        lines.append(
            f"no bounds      {d.files_without_bounds} data file(s): read whole in every slice"
        )
    if d.equality_delete_files:
        lines.append(
            "               equality deletes are applied as files are read (each delete file "
            "read once per worker); row counts here are before deletes"
        )
    lines.append(
        f"slices         {d.slices} of about {d.slice_rows:,} rows; a slice overlaps "
        f"{d.files_per_slice_median:g} file(s) (median), {d.files_per_slice_max} at most"
    )
    return lines
