"""The Iceberg file lister: a pinned snapshot's data files and their manifest statistics.

The snapshot's manifests are planned by :func:`~kappaplus.connectors.iceberg.deletes.plan_snapshot`
(data files, and the position and equality delete files matched to each by sequence number
and partition); each data file becomes a
:class:`~kappaplus.slicing.files.DataFile` that admits every event time (an Iceberg table
need not be partitioned by event time) with one
:class:`~kappaplus.slicing.files.RowGroupStats` for the whole file: the record count, the
file size, and the event-time column's lower/upper bounds and null count from the manifest,
found by *field id*, so a renamed column keeps its statistics across old files. An event
time stored as epoch numbers or formatted strings has its bounds converted to microseconds
(:mod:`kappaplus.slicing.stored_time`); the rows keep their stored values. A file
belongs to every slice its ``[min, max]`` overlaps and is read with the slice's filter.

A file without bounds for the event-time column is read whole in every slice (said once
per file). A file's rows are read by pyiceberg's Arrow scan (field ids, position deletes);
its equality deletes are applied to the rows read (:mod:`~kappaplus.connectors.iceberg.deletes`).
Slice sizing counts a data file's manifest record count, before any delete: a slice may
hold fewer rows than planned, never more.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from kappaplus.connectors.iceberg.deletes import (
    EqualityMatcher,
    PlannedFile,
    apply_equality_deletes,
    equality_columns,
    plan_snapshot,
)
from kappaplus.core.errors import DataError, TableError
from kappaplus.slicing.files import DataFile, RowGroupStats
from kappaplus.slicing.manifest import ManifestEntry
from kappaplus.slicing.stored_time import stat_micros, stored_bounds, stored_micros_array

if TYPE_CHECKING:
    from pyiceberg.table import StaticTable

    from kappaplus.connectors.iceberg.options import IcebergSourceOptions

log = logging.getLogger(__name__)
_MISSING_LOGGED: set[tuple[str, str]] = set()


def _io_key(io: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(io.items()))


@lru_cache(maxsize=16)
def static_table(metadata_location: str, io: tuple[tuple[str, str], ...]) -> StaticTable:
    """The table as its metadata file describes it (no catalog needed); cached per process."""
    from pyiceberg.table import StaticTable

    try:
        return StaticTable.from_metadata(metadata_location, properties=dict(io))
    except Exception as exc:  # a missing file, an unreachable store, bad credentials
        raise TableError(
            f"cannot read Iceberg table metadata {metadata_location!r}: {exc}"
        ) from exc


@lru_cache(maxsize=16)
def scan_tasks(
    table: str, metadata_location: str, snapshot_id: int, io: tuple[tuple[str, str], ...]
) -> dict[str, PlannedFile]:
    """The data files of ``snapshot_id`` (with their delete files), by path; cached."""
    static = static_table(metadata_location, io)
    if static.metadata.snapshot_by_id(snapshot_id) is None:
        raise TableError(
            f"Iceberg table {table!r} has no snapshot {snapshot_id} (expired?); "
            "start the run over (--fresh) to pin the current one"
        )
    return plan_snapshot(table, static, snapshot_id)


def _bound(kind: Any, raw: bytes | None, storage: str = "", *, upper: bool = False) -> int | None:
    """A manifest bound of the event-time column as microseconds (None when absent, or
    when it does not bound the times): a timestamp as it is; an event time stored as
    epoch numbers or formatted strings (``storage``) converted
    (:func:`~kappaplus.slicing.stored_time.stat_micros`)."""
    from pyiceberg.conversions import from_bytes
    from pyiceberg.types import TimestampNanoType, TimestamptzNanoType

    if raw is None:
        return None
    value = from_bytes(kind, raw)
    if storage:
        return stat_micros(value, storage, upper=upper)
    if not isinstance(value, int):
        return None
    if isinstance(kind, TimestampNanoType | TimestamptzNanoType):
        return value // 1000
    return value


class IcebergFileLister:
    """A pinned snapshot's data files and manifest statistics (a
    :class:`~kappaplus.slicing.planner.FileLister`)."""

    def __init__(self, options: IcebergSourceOptions) -> None:
        self.options = options
        self._io = _io_key(options.io_properties)

    def tasks(self) -> dict[str, PlannedFile]:
        o = self.options
        return scan_tasks(o.table, o.metadata_location, o.snapshot_id, self._io)

    def _field(self) -> Any:
        schema = static_table(self.options.metadata_location, self._io).schema()
        return schema.find_field(self.options.event_time_column)

    def files(self) -> list[DataFile]:
        files = [
            DataFile(
                path=path,
                size=task.file.file_size_in_bytes,
                mtime_ns=0,
                partition_dir=str(task.file.partition),
                partition_values={},
            )
            for path, task in self.tasks().items()
        ]
        files.sort(key=lambda f: f.path)
        return files

    def _stats(self, path: str) -> tuple[RowGroupStats, ...]:
        task = self.tasks().get(path)
        if task is None:
            raise DataError(
                f"Iceberg table {self.options.table!r}: file {path!r} is not in snapshot "
                f"{self.options.snapshot_id}; the slice cannot be replayed exactly"
            )
        f = task.file  # its record count is before deletes (see the module docstring)
        field = self._field()
        storage = self.options.storage
        lo = _bound(field.field_type, (f.lower_bounds or {}).get(field.field_id), storage)
        upper = (f.upper_bounds or {}).get(field.field_id)
        hi = _bound(field.field_type, upper, storage, upper=True)
        nulls = (f.null_value_counts or {}).get(field.field_id)
        if (lo is None or hi is None) and (self.options.table, path) not in _MISSING_LOGGED:
            _MISSING_LOGGED.add((self.options.table, path))
            log.info(
                "Iceberg table %r: file %s has no event-time bounds for %r (field id %d) in "
                "its manifest; it is read whole in every slice",
                self.options.table,
                path,
                self.options.event_time_column,
                field.field_id,
            )
        return (RowGroupStats(0, f.record_count, f.file_size_in_bytes, lo, hi, nulls),)

    def stats(self, f: DataFile) -> tuple[RowGroupStats, ...]:
        return self._stats(f.path)

    def stats_of_entry(self, entry: ManifestEntry) -> tuple[RowGroupStats, ...]:
        return self._stats(entry.path)

    def times(self, f: DataFile, group: int) -> np.ndarray:
        o = self.options
        batches = list(read_task(o, f.path, [o.event_time_column], None, None))
        if not batches:
            return np.empty(0, dtype=np.int64)
        column = pa.Table.from_batches(batches).column(o.event_time_column)
        return np.sort(stored_micros_array(column, o.storage))

    def partition_frontier(self, files: list[DataFile]) -> int | None:
        return None  # a snapshot is complete: its data's end is the frontier


def read_task(
    options: IcebergSourceOptions,
    path: str,
    columns: list[str],
    lo: int | None,
    hi: int | None,
) -> Iterator[pa.RecordBatch]:
    """Rows of one data file of the pinned snapshot, its delete files applied, columns
    matched by field id (renamed and added columns read right across old files); with
    ``lo``/``hi`` pyiceberg prunes row groups and rows outside ``[lo, hi)`` (bounds in the
    stored unit or format when the event time is stored as numbers or strings).

    pyiceberg's Arrow scan applies the position deletes; the equality delete files that
    apply to the file are applied to its rows after, their equality columns read along
    (and dropped after) when the caller did not ask for them."""
    from pyiceberg.expressions import AlwaysTrue, And, GreaterThanOrEqual, LessThan
    from pyiceberg.io.pyarrow import ArrowScan

    io = _io_key(options.io_properties)
    static = static_table(options.metadata_location, io)
    planned = scan_tasks(options.table, options.metadata_location, options.snapshot_id, io)
    task = planned.get(path)
    if task is None:
        raise DataError(
            f"Iceberg table {options.table!r}: file {path!r} is not in snapshot "
            f"{options.snapshot_id}; the slice cannot be replayed exactly"
        )
    schema = static.schema()
    projected = schema.select(*columns)
    names = [f.name for f in projected.fields]
    matchers = [
        EqualityMatcher(
            options.table,
            options.snapshot_id,
            delete,
            equality_columns(schema, delete),
            static.io,
            io,
        )
        for delete in task.equality_deletes
    ]
    extra = sorted({c for m in matchers for c in m.columns} - set(names))
    if extra:
        projected = schema.select(*names, *extra)
    row_filter: Any = AlwaysTrue()
    if lo is not None and hi is not None:
        ts = options.event_time_column
        at_least: Any = GreaterThanOrEqual  # pydantic models: their typed __init__ is
        below: Any = LessThan  # keyword-only, the documented one positional
        # an event time stored as epoch numbers or strings: the slice's bounds converted
        # to the stored unit or format (the rows keep theirs); no filter where a format
        # does not sort as the times (the delivery filter is exact either way)
        bounds = stored_bounds(lo, hi, options.storage) if options.storage else (lo, hi)
        if bounds is not None:
            row_filter = And(at_least(ts, bounds[0]), below(ts, bounds[1]))
    scan = ArrowScan(static.metadata, static.io, projected, row_filter)
    try:
        for batch in scan.to_record_batches([task.task]):
            batch = apply_equality_deletes(batch, matchers)
            yield batch.select(names) if extra else batch
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(
            f"Iceberg table {options.table!r} snapshot {options.snapshot_id}: cannot read "
            f"data file {path!r}: {exc}"
        ) from exc
