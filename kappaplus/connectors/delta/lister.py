"""The Delta file lister: a pinned version's data files and their statistics from the log.

delta-rs replays the log up to the pinned version; each ``add`` action becomes a
:class:`~kappaplus.slicing.files.DataFile` that admits every event time (a Delta table need
not be partitioned by event time) with one
:class:`~kappaplus.slicing.files.RowGroupStats` for the whole file: ``numRecords``, the file
size and the event-time column's ``minValues`` / ``maxValues`` / ``nullCount`` (an event
time stored as epoch numbers or formatted strings converted to microseconds:
:mod:`kappaplus.slicing.stored_time`). A file
belongs to every slice its ``[min, max]`` overlaps and is read with the slice's filter.

Delta writes timestamp statistics truncated to milliseconds, so a file's maximum is
widened by 999 microseconds (as Delta's own data skipping does). A file without
statistics for the event-time column is read whole in every slice (said once per file).
The log's partition values (not stored in the files) are kept per file and delivered as
the partition columns.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from kappaplus.connectors.delta.log import add_actions, open_delta
from kappaplus.connectors.lake.filesystems import filesystem_for
from kappaplus.core.errors import DataError
from kappaplus.slicing.files import TS_UTC, DataFile, RowGroupStats
from kappaplus.slicing.manifest import ManifestEntry
from kappaplus.slicing.stored_time import stat_micros, stored_bounds, stored_micros_array

if TYPE_CHECKING:
    from kappaplus.connectors.delta.options import DeltaSourceOptions

log = logging.getLogger(__name__)
_MISSING_LOGGED: set[tuple[str, str]] = set()
STATS_TRUNCATION_US = 999
"""Delta's timestamp statistics are truncated to milliseconds: the true maximum may be up to
999 microseconds above the recorded one."""


def file_uri(location: str, path: str) -> str:
    """An add action's path (relative to the table, or absolute) as a full location."""
    from urllib.parse import unquote

    if "://" in path or path.startswith("/"):
        return path
    return f"{location.rstrip('/')}/{unquote(path)}"


def _micros(column: pa.ChunkedArray, storage: str = "") -> list[int | None]:
    """A statistics column of the event time as microseconds: a timestamp as it is, epoch
    numbers or formatted strings (``storage``) converted (None where it bounds nothing)."""
    if storage:
        return [stat_micros(v, storage) for v in column.to_pylist()]
    if not pa.types.is_timestamp(column.type):
        return [None] * len(column)
    as_us = pc.cast(column, pa.timestamp("us", tz=column.type.tz), safe=False)
    return list(as_us.cast(pa.int64()).to_pylist())


def _text(value: Any) -> str | None:
    if value is None:
        return None
    if hasattr(value, "isoformat"):
        return str(value.isoformat())
    return str(value)


@lru_cache(maxsize=16)
def version_files(
    table: str,
    location: str,
    version: int,
    event_time_column: str,
    storage: tuple[tuple[str, str], ...],
    stored: str = "",
) -> dict[str, tuple[DataFile, RowGroupStats]]:
    """The data files of ``version`` and their statistics, by full path; cached per process.
    ``stored``: how the event time is stored (:mod:`kappaplus.slicing.stored_time`)."""
    delta = open_delta(location, dict(storage), version)
    adds = add_actions(delta)
    names = adds.column_names
    n = adds.num_rows
    lo = (
        _micros(adds.column(f"min.{event_time_column}"), stored)
        if f"min.{event_time_column}" in names
        else [None] * n
    )
    hi = (
        _micros(adds.column(f"max.{event_time_column}"), stored)
        if f"max.{event_time_column}" in names
        else [None] * n
    )
    nulls_name = f"null_count.{event_time_column}"
    nulls = adds.column(nulls_name).to_pylist() if nulls_name in names else [None] * n
    records = adds.column("num_records").to_pylist()
    partitions = [c for c in names if c.startswith("partition.")]
    values = {c[len("partition.") :]: adds.column(c).to_pylist() for c in partitions}
    masks = (
        deletion_masks(table, location, version, storage)
        if "deletionVectors" in set(delta.protocol().reader_features or ())
        else {}
    )
    out: dict[str, tuple[DataFile, RowGroupStats]] = {}
    for i, (rel, size, mtime) in enumerate(
        zip(
            adds.column("path").to_pylist(),
            adds.column("size_bytes").to_pylist(),
            adds.column("modification_time").to_pylist(),
            strict=True,
        )
    ):
        path = file_uri(location, rel)
        parts = {k: t for k, v in values.items() if (t := _text(v[i])) is not None}
        f = DataFile(
            path=path,
            size=int(size),
            mtime_ns=int(mtime) * 1_000_000,
            partition_dir="/".join(f"{k}={v}" for k, v in sorted(parts.items())),
            partition_values=parts,
        )
        rows = records[i]
        top = hi[i]
        low = lo[i] if rows is not None else None
        widen = 0 if stored else STATS_TRUNCATION_US  # numbers and strings are exact
        high = top + widen if top is not None and rows is not None else None
        if rows is None:  # no statistics at all: the row count from the file's footer
            rows = _footer_rows(location, dict(storage), path)
        mask = masks.get(_local(path))
        if mask is not None:  # the rows left (numRecords counts the deleted ones)
            rows -= int((~mask).sum())
        stats = RowGroupStats(0, int(rows), int(size), low, high, nulls[i])
        out[path] = (f, stats)
    return out


def _footer_rows(location: str, storage: dict[str, str], path: str) -> int:
    import pyarrow.parquet as pq

    fs, _ = delta_filesystem(location, storage)
    with fs.open_input_file(_path_in(fs, path)) as handle:
        return int(pq.ParquetFile(handle).metadata.num_rows)


def _local(uri: str) -> str:
    """A file's location without a ``file://`` scheme (how the log and delta-rs differ)."""
    from urllib.parse import unquote

    if uri.startswith("file://"):
        return unquote(uri[len("file://") :])
    if uri.startswith("file:"):
        return unquote(uri[len("file:") :])
    return uri


@lru_cache(maxsize=16)
def deletion_masks(
    table: str, location: str, version: int, storage: tuple[tuple[str, str], ...]
) -> dict[str, np.ndarray]:
    """Per data file with a deletion vector (by :func:`_local` location), the rows to keep
    (a boolean array by row position; rows past its end are kept); cached per process."""
    delta = open_delta(location, dict(storage), version)
    try:
        vectors = pa.table(delta.deletion_vectors())
    except Exception as exc:
        raise DataError(
            f"Delta table {table!r} version {version}: its deletion vectors cannot be read "
            f"({exc}); no file of this version is read without them"
        ) from exc
    return {
        _local(str(uri)): np.asarray(keep, dtype=bool)
        for uri, keep in zip(
            vectors.column("filepath").to_pylist(),
            vectors.column("selection_vector").to_pylist(),
            strict=True,
        )
    }


def _storage_key(options: DeltaSourceOptions) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(options.storage_options.items()))


class DeltaFileLister:
    """A pinned version's data files and log statistics (a
    :class:`~kappaplus.slicing.planner.FileLister`)."""

    def __init__(self, options: DeltaSourceOptions) -> None:
        self.options = options

    def _files(self) -> dict[str, tuple[DataFile, RowGroupStats]]:
        o = self.options
        return version_files(
            o.table, o.location, o.delta_version, o.event_time_column, _storage_key(o), o.storage
        )

    def files(self) -> list[DataFile]:
        return sorted((f for f, _ in self._files().values()), key=lambda f: f.path)

    def _stats(self, path: str) -> tuple[RowGroupStats, ...]:
        found = self._files().get(path)
        if found is None:
            raise DataError(
                f"Delta table {self.options.table!r}: file {path!r} is not in version "
                f"{self.options.delta_version}; the slice cannot be replayed exactly"
            )
        stats = found[1]
        key = (self.options.table, path)
        if (stats.ts_min is None or stats.ts_max is None) and key not in _MISSING_LOGGED:
            _MISSING_LOGGED.add(key)
            log.info(
                "Delta table %r version %d: file %s has no statistics for %r in the log; "
                "it is read whole in every slice",
                self.options.table,
                self.options.delta_version,
                path,
                self.options.event_time_column,
            )
        return (stats,)

    def stats(self, f: DataFile) -> tuple[RowGroupStats, ...]:
        return self._stats(f.path)

    def stats_of_entry(self, entry: ManifestEntry) -> tuple[RowGroupStats, ...]:
        return self._stats(entry.path)

    def times(self, f: DataFile, group: int) -> np.ndarray:
        o = self.options
        batches = list(read_delta_file(o, f.path, f.size, [o.event_time_column], None, None))
        if not batches:
            return np.empty(0, dtype=np.int64)
        column = pa.Table.from_batches(batches).column(o.event_time_column)
        return np.sort(stored_micros_array(column, o.storage))

    def partition_frontier(self, files: list[DataFile]) -> int | None:
        return None  # a version is complete: its data's end is the frontier


def delta_filesystem(location: str, storage: dict[str, str]) -> tuple[pafs.FileSystem, str]:
    """The pyarrow filesystem of the table's files: local, or S3 with delta-rs storage
    options (``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ``AWS_SECRET_ACCESS_KEY``,
    ``AWS_REGION``, ``AWS_ALLOW_HTTP``) when they are given."""
    upper = {k.upper(): v for k, v in storage.items()}
    if location.startswith(("s3://", "s3a://")) and upper:
        endpoint = upper.get("AWS_ENDPOINT_URL") or upper.get("AWS_ENDPOINT")
        scheme = None
        if endpoint and "://" in endpoint:
            scheme, endpoint = endpoint.split("://", 1)
        fs = pafs.S3FileSystem(
            access_key=upper.get("AWS_ACCESS_KEY_ID"),
            secret_key=upper.get("AWS_SECRET_ACCESS_KEY"),
            region=upper.get("AWS_REGION") or upper.get("AWS_DEFAULT_REGION"),
            endpoint_override=endpoint,
            scheme=scheme or "https",
        )
        return fs, location.split("://", 1)[1].rstrip("/")
    return filesystem_for(location)


def _path_in(fs: pafs.FileSystem, path: str) -> str:
    if isinstance(fs, pafs.LocalFileSystem):
        return filesystem_for(path)[1]
    return path.split("://", 1)[1] if "://" in path else path


def read_delta_file(
    options: DeltaSourceOptions,
    path: str,
    size: int,
    columns: list[str],
    lo: int | None,
    hi: int | None,
) -> Iterator[pa.RecordBatch]:
    """Rows of one data file of the pinned version (the given data columns; partition
    columns are the caller's, from the log); with ``lo``/``hi`` row groups and rows outside
    ``[lo, hi)`` are skipped by the Parquet statistics of the file."""
    fs, _ = delta_filesystem(options.location, options.storage_options)
    where = _path_in(fs, path)
    info = fs.get_file_info(where)
    if info.type != pafs.FileType.File or info.size != size:
        raise DataError(
            f"Delta table {options.table!r} version {options.delta_version}: data file "
            f"{path!r} is missing or rewritten (vacuumed?); the version cannot be read"
        )
    if options.deletion_vectors:
        masks = deletion_masks(
            options.table, options.location, options.delta_version, _storage_key(options)
        )
        keep = masks.get(_local(path))
        if keep is not None:
            yield from _read_kept_rows(options, fs, where, path, columns, keep)
            return
    try:
        dataset = pads.dataset([where], format="parquet", filesystem=fs)
        present = [c for c in columns if c in dataset.schema.names]
        row_filter = None
        ts = options.event_time_column
        if lo is not None and hi is not None and ts in dataset.schema.names:
            kind = dataset.schema.field(ts).type
            bounds = stored_bounds(lo, hi, options.storage) if options.storage else None
            if bounds is not None:  # epoch numbers or strings: the bounds converted
                low_s, high_s = pa.scalar(bounds[0]), pa.scalar(bounds[1])
                row_filter = (pc.field(ts) >= low_s) & (pc.field(ts) < high_s)
            elif not options.storage and pa.types.is_timestamp(kind):
                low = pa.scalar(lo, TS_UTC).cast(kind)
                high = pa.scalar(hi, TS_UTC).cast(kind)
                row_filter = (pc.field(ts) >= low) & (pc.field(ts) < high)
        yield from dataset.to_batches(columns=present, filter=row_filter, batch_size=65_536)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(
            f"Delta table {options.table!r} version {options.delta_version}: cannot read data "
            f"file {path!r}: {exc}"
        ) from exc


def _read_kept_rows(
    options: DeltaSourceOptions,
    fs: pafs.FileSystem,
    where: str,
    path: str,
    columns: list[str],
    keep: np.ndarray,
) -> Iterator[pa.RecordBatch]:
    """A file with a deletion vector: every row in file order, those it deletes dropped by
    row position (no row-group pruning, which would lose the positions)."""
    import pyarrow.parquet as pq

    try:
        with fs.open_input_file(where) as handle:
            pfile = pq.ParquetFile(handle)
            present = [c for c in columns if c in pfile.schema_arrow.names]
            position = 0
            for batch in pfile.iter_batches(batch_size=65_536, columns=present):
                n = batch.num_rows
                mask = np.ones(n, dtype=bool)
                covered = keep[position : position + n]
                mask[: len(covered)] = covered
                position += n
                yield batch.filter(pa.array(mask))
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(
            f"Delta table {options.table!r} version {options.delta_version}: cannot read data "
            f"file {path!r}: {exc}"
        ) from exc
