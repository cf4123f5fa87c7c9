"""Iceberg snapshot planning with equality deletes, and equality deletes applied to rows.

pyiceberg (0.12) plans a scan with position deletes only: its ``plan_files()`` raises on an
equality delete file. :func:`plan_snapshot` reads the snapshot's manifests itself and returns,
per data file, pyiceberg's :class:`~pyiceberg.table.FileScanTask` (the data file and the
position delete files pyiceberg applies) plus the equality delete files that apply to it,
by the Iceberg spec's rule: an equality delete file applies to a data file when the data
file's data sequence number is *strictly* less than the delete file's and the delete file is
in the same partition (spec id and partition values) or its spec is unpartitioned (a global
delete).

:class:`EqualityMatcher` removes the rows whose equality columns (by field id) equal those of
any delete row, null equal to null as the spec says. Delete files are read with pyarrow, their
columns found by the Parquet ``field_id`` metadata, and cached per process (a data file read in
several slices does not reread them). What this reader cannot compare exactly is refused in
one line naming the table, snapshot and delete file, never ignored: a non-Parquet delete file,
an equality column of a floating-point or nested type, a field id the table's schema or the
delete file lacks.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from kappaplus.core.errors import DataError

if TYPE_CHECKING:
    from pyiceberg.io import FileIO
    from pyiceberg.manifest import DataFile, ManifestEntry
    from pyiceberg.schema import Schema
    from pyiceberg.table import FileScanTask, StaticTable

FIELD_ID = b"PARQUET:field_id"


@dataclass(frozen=True)
class PlannedFile:
    """One data file of a snapshot: pyiceberg's task (the data file and its position delete
    files) and the equality delete files that apply to it (oldest first)."""

    task: FileScanTask
    equality_deletes: tuple[DataFile, ...] = ()

    @property
    def file(self) -> DataFile:
        return self.task.file


@dataclass
class _EqualityIndex:
    """Equality delete files by (spec id, partition) and the global ones, each list sorted by
    data sequence number so the files newer than a data file are a suffix (bisect)."""

    by_partition: dict[tuple[int, Any], list[tuple[int, DataFile]]] = field(default_factory=dict)
    global_: list[tuple[int, DataFile]] = field(default_factory=list)

    def add(self, seq: int, delete: DataFile, is_global: bool) -> None:
        key = (delete.spec_id or 0, delete.partition)
        (self.global_ if is_global else self.by_partition.setdefault(key, [])).append((seq, delete))

    def sort(self) -> None:
        for entries in [self.global_, *self.by_partition.values()]:
            entries.sort(key=lambda e: (e[0], e[1].file_path))

    def for_data_file(self, seq: int, data: DataFile) -> tuple[DataFile, ...]:
        found: list[tuple[int, DataFile]] = []
        partition = self.by_partition.get((data.spec_id or 0, data.partition), [])
        for entries in (self.global_, partition):
            start = bisect.bisect_right([e[0] for e in entries], seq)  # strictly newer only
            found.extend(entries[start:])
        found.sort(key=lambda e: (e[0], e[1].file_path))
        return tuple(e[1] for e in found)


def plan_snapshot(table: str, static: StaticTable, snapshot_id: int) -> dict[str, PlannedFile]:
    """The data files of ``snapshot_id`` with the delete files that apply to each, by path.

    Position deletes are matched by pyiceberg's own index (as its ``plan_files()`` does);
    equality deletes by the spec's rule (see the module docstring). Every equality delete
    file is checked here, on the driver, so an unsupported one fails the run before any
    slice is read.
    """
    from pyiceberg.manifest import INITIAL_SEQUENCE_NUMBER, DataFileContent, FileFormat
    from pyiceberg.table import FileScanTask
    from pyiceberg.table.delete_file_index import DeleteFileIndex
    from pyiceberg.utils.concurrent import ExecutorFactory

    snapshot = static.metadata.snapshot_by_id(snapshot_id)
    assert snapshot is not None
    manifests = snapshot.manifests(static.io)
    entries: Iterable[list[ManifestEntry]] = ExecutorFactory.get_or_create().map(
        lambda m: m.fetch_manifest_entry(static.io, discard_deleted=True), manifests
    )
    specs = static.metadata.specs()
    schema = static.schema()
    data_entries: list[ManifestEntry] = []
    positions = DeleteFileIndex()
    equality = _EqualityIndex()
    for entry in (e for group in entries for e in group):
        f = entry.data_file
        seq = entry.sequence_number or INITIAL_SEQUENCE_NUMBER  # the data sequence number
        if f.content == DataFileContent.DATA:
            if f.file_format != FileFormat.PARQUET:
                raise DataError(
                    f"Iceberg table {table!r} snapshot {snapshot_id}: data file "
                    f"{f.file_path!r} is {f.file_format}; this reader reads Parquet data files"
                )
            if f.record_count > 0:  # as pyiceberg's plan_files(): an empty file has no rows
                data_entries.append(entry)
        elif f.content == DataFileContent.POSITION_DELETES:
            positions.add_delete_file(entry, partition_key=f.partition)
        elif f.content == DataFileContent.EQUALITY_DELETES:
            check_equality_delete(table, snapshot_id, schema, f)
            spec = specs.get(f.spec_id or 0)
            equality.add(seq, f, spec is None or spec.is_unpartitioned())
        else:
            raise DataError(
                f"Iceberg table {table!r} snapshot {snapshot_id}: file {f.file_path!r} has "
                f"unknown content {f.content}; this reader cannot tell what it holds"
            )
    equality.sort()
    planned: dict[str, PlannedFile] = {}
    for entry in data_entries:
        f = entry.data_file
        seq = entry.sequence_number or INITIAL_SEQUENCE_NUMBER
        task = FileScanTask(f, delete_files=positions.for_data_file(seq, f, f.partition))
        planned[f.file_path] = PlannedFile(task, equality.for_data_file(seq, f))
    return planned


def _unsupported(
    table: str, snapshot_id: int, delete: DataFile, why: str, way_out: str = ""
) -> DataError:
    return DataError(
        f"Iceberg table {table!r} snapshot {snapshot_id}: equality delete file "
        f"{delete.file_path!r} {why}; "
        + (way_out or "rewrite the table's deletes (compaction) before the backfill")
    )


def check_equality_delete(table: str, snapshot_id: int, schema: Schema, delete: DataFile) -> None:
    """Refuse (one line) an equality delete file this reader cannot apply exactly."""
    from pyiceberg.manifest import FileFormat
    from pyiceberg.types import DoubleType, FloatType, PrimitiveType

    if delete.file_format != FileFormat.PARQUET:
        raise _unsupported(table, snapshot_id, delete, f"is {delete.file_format}, not Parquet")
    ids = list(delete.equality_ids or [])
    if not ids:
        raise _unsupported(table, snapshot_id, delete, "names no equality field ids")
    for field_id in ids:
        try:
            column = schema.find_field(field_id)
        except ValueError:
            raise _unsupported(
                table,
                snapshot_id,
                delete,
                f"compares field id {field_id}, which the table's schema no longer has",
            ) from None
        kind = column.field_type
        if not isinstance(kind, PrimitiveType) or isinstance(kind, FloatType | DoubleType):
            raise _unsupported(
                table,
                snapshot_id,
                delete,
                f"compares column {column.name!r} of type {kind}, which this reader does not "
                "compare for equality deletes (floating-point and nested types)",
            )


def equality_columns(schema: Schema, delete: DataFile) -> tuple[str, ...]:
    """The current names of a delete file's equality columns (found by field id)."""
    return tuple(schema.find_field(i).name for i in delete.equality_ids or [])


_CACHE_FILES = 64
_cache: OrderedDict[tuple[str, tuple[int, ...], tuple[tuple[str, str], ...]], pa.Table | str] = (
    OrderedDict()
)
_cache_lock = threading.Lock()


def _delete_rows(
    file_io: FileIO, path: str, ids: tuple[int, ...], io: tuple[tuple[str, str], ...]
) -> pa.Table | str:
    """The distinct equality-column rows of one delete file (columns ``f<id>``), or the
    reason it cannot be read. Cached per process by (path, field ids, store properties),
    the last ``_CACHE_FILES`` files, so a data file read in several slices, and the many
    data files one delete file applies to, do not reread it."""
    key = (path, ids, io)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    with file_io.new_input(path).open() as stream:
        parquet = pq.ParquetFile(stream)
        by_id: dict[int, str] = {}
        for arrow_field in parquet.schema_arrow:
            raw = (arrow_field.metadata or {}).get(FIELD_ID)
            if raw is not None:
                by_id[int(raw)] = arrow_field.name
        missing = [i for i in ids if i not in by_id]
        if missing:
            found: pa.Table | str = (
                f"has no column with field id {missing[0]} (Parquet field_id metadata)"
            )
        else:
            rows = parquet.read(columns=[by_id[i] for i in ids])
            rows = rows.rename_columns([f"f{i}" for i in ids])
            found = rows.group_by(rows.column_names, use_threads=False).aggregate([])
    with _cache_lock:
        _cache[key] = found
        while len(_cache) > _CACHE_FILES:
            _cache.popitem(last=False)
    return found


class EqualityMatcher:
    """Removes from a data file's batches the rows an equality delete file deletes.

    Per delete file, each equality column's distinct delete values form a value set; a data
    row's value maps to its index in that set (``index_in`` with ``skip_nulls=False``: null
    matches null) and a row is deleted when its indices for all columns form one of the
    delete rows' index tuples (a left-semi join on the indices, which hold no nulls).
    """

    def __init__(
        self,
        table: str,
        snapshot_id: int,
        delete: DataFile,
        columns: tuple[str, ...],
        file_io: FileIO,
        io: tuple[tuple[str, str], ...],
    ) -> None:
        self.table, self.snapshot_id, self.delete = table, snapshot_id, delete
        self._file_io = file_io
        self.columns = columns
        self.ids = tuple(int(i) for i in delete.equality_ids or [])
        self._io = io
        self._sets: list[pa.Array] | None = None
        self._keys: pa.Table | None = None

    def _fail(self, why: str) -> DataError:
        return _unsupported(self.table, self.snapshot_id, self.delete, why)

    def _prepare(self, batch: pa.RecordBatch) -> None:
        try:
            rows = _delete_rows(self._file_io, str(self.delete.file_path), self.ids, self._io)
        except (OSError, pa.ArrowInvalid) as exc:
            raise self._fail(f"cannot be read: {exc}") from exc
        if isinstance(rows, str):
            raise self._fail(rows)
        sets: list[pa.Array] = []
        codes: dict[str, pa.Array] = {}
        try:
            for k, (name, field_id) in enumerate(zip(self.columns, self.ids, strict=True)):
                values = rows.column(f"f{field_id}").cast(batch.schema.field(name).type)
                unique = pc.unique(values)
                sets.append(unique)
                codes[f"k{k}"] = pc.index_in(values, value_set=unique, skip_nulls=False)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise self._fail(f"cannot be compared with the data: {exc}") from exc
        self._sets = sets
        self._keys = pa.table(codes) if len(sets) > 1 else None

    def keep(self, batch: pa.RecordBatch) -> pa.BooleanArray:
        """True for the rows of ``batch`` this delete file does not delete."""
        if self._sets is None:
            self._prepare(batch)
        assert self._sets is not None
        try:
            codes = [
                pc.index_in(batch.column(name), value_set=values, skip_nulls=False)
                for name, values in zip(self.columns, self._sets, strict=True)
            ]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise self._fail(f"cannot be compared with the data: {exc}") from exc
        if self._keys is None:
            return pc.invert(pc.is_valid(codes[0]))
        data = pa.table({f"k{k}": c for k, c in enumerate(codes)}).append_column(
            "row", pa.array(range(batch.num_rows), pa.int64())
        )
        hit = data.join(self._keys, keys=list(self._keys.column_names), join_type="left semi")
        deleted = pc.is_in(data.column("row"), value_set=hit.column("row"))
        return pc.invert(deleted)


def apply_equality_deletes(
    batch: pa.RecordBatch, matchers: list[EqualityMatcher]
) -> pa.RecordBatch:
    """``batch`` without the rows any of ``matchers`` deletes."""
    if not matchers or batch.num_rows == 0:
        return batch
    keep = matchers[0].keep(batch)
    for matcher in matchers[1:]:
        keep = pc.and_(keep, matcher.keep(batch))
    return batch.filter(keep)
