"""The Python data source of every lake format: a table's listed data files read as an
unbounded stream, one half-open event-time slice ``[lo, hi)`` per micro-batch.

Offsets are event times, so slices never overlap, never go backwards, and Spark's checkpoint
makes every row with event time in ``[start, end)`` arrive exactly once. A format
(``kappa_hive``, ``kappa_iceberg``, ``kappa_delta``) subclasses :class:`ListedFilesStreamReader`
with its file lister and ``read_file``, and :class:`ListedFilesDataSource` with its name and
options class; open a table through its format's ``read_*_stream``.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from typing import ClassVar

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import BooleanType, StructField, StructType

from kappaplus.connectors.lake.delivery import (
    SlicePartition,
    deliver,
    marker_batch,
    output_arrow_schema,
)
from kappaplus.connectors.lake.options import MARKER_COLUMN, LakeSourceOptions
from kappaplus.core.draining import drain_requested
from kappaplus.slicing.manifest import ManifestEntry, ManifestStore
from kappaplus.slicing.offsets import PHASE_DATA, Position, marker_times
from kappaplus.slicing.planner import FileLister, SlicePlanner

TARGET_PARTITIONS = 8
MIN_PARTITION_ROWS = 20_000


def source_schema(options: LakeSourceOptions) -> StructType:
    """The delivered columns, all nullable (marker rows are null but for the event time)."""
    delivered = options.output_schema.fields
    fields = [StructField(f.name, f.dataType, True, f.metadata) for f in delivered]
    if options.emits_end_marker:
        fields.append(StructField(MARKER_COLUMN, BooleanType(), True))
    return StructType(fields)


class ListedFilesStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans event-time slices on the driver and reads their files on executors: the
    offsets, manifests, slice sizing, markers and routing of unplaceable rows of every lake
    format, which says only how its files are listed (:meth:`file_lister`), read
    (:meth:`read_file`) and named for the JVM reader (:meth:`data_file_uri`)."""

    def __init__(self, options: LakeSourceOptions) -> None:
        self.options = options
        self._planner: SlicePlanner | None = None

    def __getstate__(self) -> dict:
        # Executors need the options only; the planner's caches stay on the driver.
        return {"options": self.options, "_planner": None}

    @abstractmethod
    def file_lister(self) -> FileLister:
        """The lister of the table's data files with their statistics (driver side)."""

    @abstractmethod
    def read_file(
        self, entry: ManifestEntry, columns: list[str], lo: int | None, hi: int | None
    ) -> Iterator[pa.RecordBatch]:
        """The rows of one data file in the source's columns, those with event time in
        ``[lo, hi)`` where the bounds are given (executor side)."""

    @abstractmethod
    def data_file_uri(self, path: str) -> str:
        """The Hadoop URI of a manifest entry's path (what the JVM reader opens)."""

    @property
    def planner(self) -> SlicePlanner:
        if self._planner is None:
            self._planner = self.make_planner()
        return self._planner

    def make_planner(self) -> SlicePlanner:
        """The slice planner over :meth:`file_lister` (driver side)."""
        return SlicePlanner(self.options, self.file_lister())

    def initialOffset(self) -> dict:
        return self.planner.initial_offset()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_rows_per_trigger is not None:
            return ReadMaxRows(self.options.max_rows_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        # The event-time span per trigger is intrinsic to the offsets (it is what keeps
        # windows and watermarks meaningful), so it holds whatever the read limit is.
        if drain_requested(self.options.drain_file):
            return start  # the run is stopping: the batch under way is the last
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        return self.planner.next(start, budget)

    def prepareForTriggerAvailableNow(self) -> None:
        self.planner.prepare_available_now()

    def reportLatestOffset(self) -> dict | None:
        target = self.planner.target
        end = target if target is not None else self.options.ending_timestamp
        return None if end is None else {"hi": end}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        first, last = Position.parse(start), Position.parse(end)
        # the end-of-input markers, and the watermark-ahead marker of a slice that fixed its
        # successor (kappaplus.slicing.offsets)
        markers: list[InputPartition] = [
            SlicePartition(last.hi or 0, last.hi or 0, last.origin or 0, [], marker)
            for marker in marker_times(first, last, self.options.watermark_delay)
        ]
        if last.phase != PHASE_DATA or last.manifest is None or last.evict or start == end:
            return markers
        manifest = ManifestStore(self.options.manifest_dir).get(last.manifest)
        data = split_slice(
            manifest.entries, manifest.lo, manifest.hi, last.origin or 0, self.options, self.planner
        )
        return [*data, *markers]

    def commit(self, end: dict) -> None:
        """Nothing to release (manifests are kept for replays from older checkpoints); the
        batch's duration sizes the next slice under ``targetBatchDuration``."""
        self.planner.batch_committed(end)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        """The rows of one input partition of a slice, as record batches of the source
        schema: each file read with the slice's filter, or whole by the file's owner (which
        also looks for the rows no slice can place)."""
        assert isinstance(partition, SlicePartition)
        options = self.options
        if partition.marker_time is not None:
            yield marker_batch(options, partition.marker_time)
            return
        schema = output_arrow_schema(options)
        for entry in partition.entries:
            if entry.route_row_groups:  # the owner reads the whole file
                batches = self.read_file(entry, options.table_data_columns, None, None)
            else:
                batches = self.read_file(entry, options.data_columns, partition.lo, partition.hi)
            yield from deliver(options, partition, entry, batches, schema)


class ListedFilesDataSource(DataSource):
    """A ``kappa_<format>`` data source of a :class:`ListedFilesStreamReader`: the options
    parsed once by ``options_class``, the reader made by ``reader_class``."""

    format_name: ClassVar[str]
    options_class: ClassVar[type[LakeSourceOptions]]
    reader_class: ClassVar[type[ListedFilesStreamReader]]

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = self.options_class.parse(options)

    @classmethod
    def name(cls) -> str:
        return cls.format_name

    def schema(self) -> StructType:
        return source_schema(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return self.reader_class(self.parsed)


def split_slice(
    entries: list[ManifestEntry],
    lo: int,
    hi: int,
    origin: int,
    options: LakeSourceOptions,
    planner: SlicePlanner,
) -> list[InputPartition]:
    """Input partitions of whole files or runs of row groups, read in parallel.

    A slice is cut into about :data:`TARGET_PARTITIONS` pieces so every core reads, but no
    piece is smaller than :data:`MIN_PARTITION_ROWS` or larger than ``rowsPerPartition``.
    """
    sizes = {e.path: {g.index: g.num_rows for g in planner.stats_of_entry(e)} for e in entries}
    total = sum(sum(s.values()) for s in sizes.values())
    target = max(
        MIN_PARTITION_ROWS, min(options.rows_per_partition, -(-total // TARGET_PARTITIONS))
    )
    parts: list[InputPartition] = []
    current: list[ManifestEntry] = []
    rows = 0
    for entry in entries:
        groups = sorted(set(entry.row_groups) | set(entry.route_row_groups))
        run: list[int] = []
        for group in groups:
            run.append(group)
            rows += sizes[entry.path].get(group, 0)
            if rows >= target:
                current.append(_subset(entry, run))
                parts.append(SlicePartition(lo, hi, origin, current))
                current, run, rows = [], [], 0
        if run:
            current.append(_subset(entry, run))
    if current:
        parts.append(SlicePartition(lo, hi, origin, current))
    return parts


def _subset(entry: ManifestEntry, groups: list[int]) -> ManifestEntry:
    chosen = set(groups)
    return ManifestEntry(
        entry.path,
        entry.size,
        entry.mtime_ns,
        entry.partition_values,
        entry.admissible_lo,
        entry.admissible_hi,
        [g for g in entry.row_groups if g in chosen],
        [g for g in entry.route_row_groups if g in chosen],
    )
