"""The Hive file lister: a table's data files (partition directories, the admissible
event-time range each partition gives) and their footers' statistics, in the model of
:mod:`kappaplus.slicing.files` that drives slice planning.

Everything here runs without Spark (in the source's planner process or on executors) and
talks to storage through :mod:`pyarrow.fs`, so local disks, HDFS and object stores work
alike.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import date, datetime
from functools import lru_cache
from urllib.parse import urlsplit

import numpy as np
import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.orc as orc
import pyarrow.parquet as pq

from kappaplus.connectors.hive.layout import (
    PartitionTimeLayout,
    is_hidden,
    parse_partition_values,
)
from kappaplus.connectors.lake.filesystems import filesystem_for
from kappaplus.core.errors import DataError
from kappaplus.core.table.commit_log import COMMITS_DIR, parse_published
from kappaplus.core.timeutil import to_micros
from kappaplus.slicing.files import (
    TS_UTC,
    UNBOUNDED_HI,
    UNBOUNDED_LO,
    DataFile,
    RowGroupStats,
    to_micros_array,
)
from kappaplus.slicing.stored_time import stat_micros, stored_micros_array

log = logging.getLogger(__name__)

__all__ = [
    "TS_UTC",
    "UNBOUNDED_HI",
    "UNBOUNDED_LO",
    "DataFile",
    "RowGroupStats",
    "event_times",
    "file_stats",
    "list_data_files",
    "read_columns",
    "to_micros_array",
]


def file_uri(location: str, path: str) -> str:
    """The Hadoop URI of a manifest path (a path of the pyarrow filesystem of ``location``)."""
    parts = urlsplit(location)
    if parts.scheme in ("", "file"):
        return "file://" + path
    if parts.netloc and path.startswith(parts.netloc + "/"):
        return f"{parts.scheme}://{path}"  # object stores: bucket/key
    return f"{parts.scheme}://{parts.netloc}{path if path.startswith('/') else '/' + path}"


def list_data_files(
    location: str,
    partition_columns: tuple[str, ...],
    layout: PartitionTimeLayout | None,
    max_lateness: int,
    arrival_time: bool,
    table: str,
    max_earliness: int = 0,
) -> list[DataFile]:
    """Every visible data file below ``location`` with its partition's admissible time range.

    In a table the kappaplus Hive sink writes (it has a ``_kappa_commits`` directory) a
    file the sink published counts only once its batch's commit marker exists, so this
    reader, which lists files rather than asking the metastore, sees whole committed
    batches only: never a batch the sink was still moving or registering, nor one a crash
    left half published (:mod:`kappaplus.core.table.commit_log`).
    """
    fs, root = filesystem_for(location)
    try:
        infos = fs.get_file_info(pafs.FileSelector(root, recursive=True, allow_not_found=False))
    except (FileNotFoundError, OSError) as exc:
        raise DataError(f"table {table!r}: cannot list its location {location!r}: {exc}") from exc
    entries = [(info, info.path[len(root) :].lstrip("/").split("/")) for info in infos]
    committed = _committed_batches(entries)
    files: list[DataFile] = []
    # a partition directory's values and hiddenness worked out once per directory rather
    # than once per file (its time range is kept by the layout itself)
    directories: dict[str, tuple[dict[str, str], bool]] = {}
    uncommitted = 0
    for info, parts in entries:
        if info.type != pafs.FileType.File:
            continue
        if is_hidden(parts[-1]) or info.size == 0:
            continue
        partition_dir = "/".join(parts[:-1])
        known = directories.get(partition_dir)
        if known is None:
            known = directories[partition_dir] = (
                parse_partition_values(partition_dir),
                any(is_hidden(p) for p in parts[:-1]),
            )
        values, hidden = known
        if hidden:
            continue
        if committed is not None:
            batch = parse_published(parts[-1])
            if batch is not None and batch not in committed:
                uncommitted += 1
                continue
        if partition_columns and list(values)[: len(partition_columns)] != list(partition_columns):
            log.warning(
                "table %r: skipping %s, which is not under a partition directory %s",
                table,
                info.path,
                "/".join(f"{c}=..." for c in partition_columns),
            )
            continue
        lo, hi = admissible_range(layout, partition_dir, arrival_time, max_lateness, max_earliness)
        files.append(
            DataFile(
                path=info.path,
                size=info.size,
                mtime_ns=info.mtime_ns or 0,
                partition_dir=partition_dir,
                partition_values=dict(values),
                admissible_lo=lo,
                admissible_hi=hi,
            )
        )
    if uncommitted:
        log.info(
            "table %r: %d published file(s) of batches without a commit marker left out "
            "(a sink is writing them, or will replay them after a crash)",
            table,
            uncommitted,
        )
    files.sort(key=lambda f: (f.admissible_lo, f.path))
    return files


def admissible_range(
    layout: PartitionTimeLayout | None,
    partition_dir: str,
    arrival_time: bool,
    max_lateness: int,
    max_earliness: int,
) -> tuple[int, int]:
    """The event times a partition directory admits: its time range widened, for arrival
    partitions, by ``max_lateness`` before and ``max_earliness`` after (skewed clocks); for
    event partitions the other way round. Unbounded without a time layout."""
    if layout is None:
        return UNBOUNDED_LO, UNBOUNDED_HI
    lo, hi = layout.range_of(partition_dir)
    if arrival_time:
        return lo - max_lateness, hi + max_earliness
    return lo - max_earliness, hi + max_lateness


def _committed_batches(
    entries: list[tuple[pafs.FileInfo, list[str]]],
) -> set[tuple[str, int]] | None:
    """(query, batch) of every commit marker under the table; None if it has no commit log."""
    committed: set[tuple[str, int]] | None = None
    for info, parts in entries:
        if parts[0] != COMMITS_DIR:
            continue
        if committed is None:
            committed = set()
        if info.type == pafs.FileType.File and len(parts) == 3 and parts[2].isdigit():
            committed.add((parts[1], int(parts[2])))
    return committed


def _stat_micros(value: object) -> int | None:
    if isinstance(value, datetime):
        return to_micros(value)
    if isinstance(value, date):
        return to_micros(datetime(value.year, value.month, value.day))
    return None


FILE_STATS_CACHE = 1 << 16
"""Files whose statistics the driver keeps (a few hundred bytes each). The planner sizes a
query's first slices from the statistics of every file of the range, in path order; an LRU
cache smaller than the table misses on every file of such a pass (every footer re-read,
for several micro-batches)."""


@lru_cache(maxsize=FILE_STATS_CACHE)
def file_stats(
    path: str,
    size: int,
    mtime_ns: int,
    fmt: str,
    event_time: str,
    location: str,
    storage: str = "",
) -> tuple[RowGroupStats, ...]:
    """Row-group (Parquet) or stripe (ORC) statistics; cached by path, size and mtime.
    ``storage``: how the event time is stored (:mod:`~kappaplus.slicing.stored_time`)."""
    fs, _ = filesystem_for(location)
    try:
        if fmt == "parquet":
            return _parquet_stats(fs, path, event_time, storage)
        return _orc_stats(fs, path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(f"cannot read {fmt} metadata of file {path!r}: {exc}") from exc


def _parquet_stats(
    fs: pafs.FileSystem, path: str, event_time: str, storage: str = ""
) -> tuple[RowGroupStats, ...]:
    with fs.open_input_file(path) as handle:
        meta = pq.ParquetFile(handle).metadata
    names = [meta.schema.column(i).path for i in range(meta.num_columns)]
    column = names.index(event_time) if event_time in names else None
    groups = []
    for i in range(meta.num_row_groups):
        rg = meta.row_group(i)
        lo = hi = nulls = None
        if column is not None:
            stats = rg.column(column).statistics
            if stats is not None:
                nulls = stats.null_count if stats.has_null_count else None
                if stats.has_min_max and storage:
                    lo, hi = stat_micros(stats.min, storage), stat_micros(stats.max, storage)
                    lo, hi = (lo, hi) if lo is not None and hi is not None else (None, None)
                elif stats.has_min_max and stats.physical_type != "INT96":
                    lo, hi = _stat_micros(stats.min), _stat_micros(stats.max)
        groups.append(RowGroupStats(i, rg.num_rows, rg.total_byte_size, lo, hi, nulls))
    return tuple(groups)


def _orc_stats(fs: pafs.FileSystem, path: str) -> tuple[RowGroupStats, ...]:
    # pyarrow exposes no ORC column statistics: stripes are pruned by partition only.
    with fs.open_input_file(path) as handle:
        reader = orc.ORCFile(handle)
        total, stripes = reader.nrows, reader.nstripes
        per = max(1, total // max(1, stripes))
        return tuple(
            RowGroupStats(i, per, reader.content_length // max(1, stripes), None, None, None)
            for i in range(stripes)
        )


def read_columns(
    fs: pafs.FileSystem, path: str, fmt: str, row_groups: list[int], columns: list[str]
) -> Iterator[pa.RecordBatch]:
    """Stream the given row groups (Parquet) or stripes (ORC) of a file, selected columns only.

    Columns the file lacks (older files of an evolved schema) are simply absent.
    """
    try:
        if fmt == "parquet":
            with fs.open_input_file(path) as handle:
                pfile = pq.ParquetFile(handle)
                present = [c for c in columns if c in pfile.schema_arrow.names]
                yield from pfile.iter_batches(
                    batch_size=65_536, row_groups=row_groups, columns=present
                )
        else:
            with fs.open_input_file(path) as handle:
                reader = orc.ORCFile(handle)
                present = [c for c in columns if c in reader.schema.names]
                for stripe in row_groups:
                    yield reader.read_stripe(stripe, columns=present)
    except (OSError, pa.ArrowInvalid) as exc:
        raise DataError(f"cannot read {fmt} file {path!r}: {exc}") from exc


@lru_cache(maxsize=512)
def event_times(
    path: str,
    size: int,
    mtime_ns: int,
    fmt: str,
    event_time: str,
    location: str,
    row_group: int,
    storage: str = "",
) -> np.ndarray:
    """Sorted event times (microseconds) of one row group; cached for budget planning."""
    fs, _ = filesystem_for(location)
    batches = list(read_columns(fs, path, fmt, [row_group], [event_time]))
    if not batches or event_time not in batches[0].schema.names:
        return np.empty(0, dtype=np.int64)
    table = pa.Table.from_batches(batches)
    values = stored_micros_array(table.column(event_time), storage)
    values = np.sort(values)
    return values
