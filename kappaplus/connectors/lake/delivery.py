"""Executor side, every lake format: the rows a format's ``read_file`` read, delivered as
Arrow batches of the source's exact schema.

Rows are delivered when their event time is in the slice ``[lo, hi)`` *and* in the range
their partition admits. The slice that owns a file also scans it for rows no slice can
deliver (null event time, event time outside the admissible range) and routes them by the
null-event-time policy: fail with a clear error, or write them to the dead-letter path.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import InputPartition

from kappaplus.connectors.lake.filesystems import filesystem_for
from kappaplus.connectors.lake.options import MARKER_COLUMN, LakeSourceOptions, NullEventTimePolicy
from kappaplus.core.errors import DataError
from kappaplus.core.table import HIVE_DEFAULT_PARTITION as HIVE_DEFAULT
from kappaplus.core.timeutil import iso
from kappaplus.dead_letters.staging import lake_dead_letters, stage
from kappaplus.slicing.files import TS_UTC, UNBOUNDED_HI
from kappaplus.slicing.manifest import ManifestEntry
from kappaplus.slicing.stored_time import column_micros


@dataclass
class SlicePartition(InputPartition):
    """Part of a slice: some row groups of some files, or the end-of-input marker row."""

    lo: int
    hi: int
    origin: int
    entries: list[ManifestEntry] = field(default_factory=list)
    marker_time: int | None = None


def output_arrow_schema(options: LakeSourceOptions) -> pa.Schema:
    """The Arrow schema of every batch: the delivered columns (+ the marker column)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(options.output_schema, timezone="UTC")
    if options.emits_end_marker:
        schema = schema.append(pa.field(MARKER_COLUMN, pa.bool_()))
    return schema


def marker_batch(options: LakeSourceOptions, marker_time: int) -> pa.RecordBatch:
    """One row with every column null but the event time (+ marker flag)."""
    schema = output_arrow_schema(options)
    arrays = []
    for f in schema:
        if f.name == options.event_time_column:
            arrays.append(pa.array([marker_time], type=pa.int64()).cast(f.type))
        elif f.name == MARKER_COLUMN:
            arrays.append(pa.array([True]))
        else:
            arrays.append(pa.nulls(1, type=f.type))
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def deliver(
    options: LakeSourceOptions,
    part: SlicePartition,
    entry: ManifestEntry,
    batches: Iterable[pa.RecordBatch],
    schema: pa.Schema,
) -> Iterator[pa.RecordBatch]:
    """The rows of ``batches`` (read from ``entry``'s file) whose event time is in the slice
    and in the range the file admits, conformed to ``schema``; the slice that owns the file
    routes the rows no slice can deliver. Shared by every lake format's Python reader."""
    owner = bool(entry.route_row_groups)
    lo, hi = max(part.lo, entry.admissible_lo), min(part.hi, entry.admissible_hi)
    end = options.ending_timestamp if options.ending_timestamp is not None else UNBOUNDED_HI
    ts_name = options.event_time_column
    routed: list[pa.Table] = []
    reasons: list[str] = []
    for batch in batches:
        table = pa.Table.from_batches([batch])
        if ts_name not in table.column_names:
            raise DataError(
                f"table {options.table!r}: file {entry.path!r} has no event-time column {ts_name!r}"
            )
        micros = column_micros(table.column(ts_name), options.storage)
        delivered = table
        if options.storage:  # delivered as the timestamp it stands for (dead letters: as stored)
            index = table.column_names.index(ts_name)
            delivered = table.set_column(index, ts_name, pc.cast(micros, TS_UTC))
        keep = pc.and_(pc.greater_equal(micros, lo), pc.less(micros, hi))
        keep = pc.fill_null(keep, False)
        selected = delivered.filter(keep)
        if selected.num_rows:
            yield from _conform(selected, entry, schema, options).to_batches()
        if owner:
            outside = pc.or_(
                pc.less(micros, entry.admissible_lo), pc.greater_equal(micros, entry.admissible_hi)
            )
            in_run = pc.and_(pc.greater_equal(micros, part.origin), pc.less(micros, end))
            route = pc.or_kleene(pc.is_null(micros), pc.and_(outside, in_run))
            route = pc.fill_null(route, False)
            bad = table.filter(route)
            if bad.num_rows:
                routed.append(bad)
                reasons += _reasons(micros.filter(route), entry)
    if routed:
        _route(options, entry, pa.concat_tables(routed, promote_options="default"), reasons)


def _conform(
    table: pa.Table, entry: ManifestEntry, schema: pa.Schema, options: LakeSourceOptions
) -> pa.Table:
    arrays = []
    for f in schema:
        if f.name == MARKER_COLUMN:
            arrays.append(pa.repeat(pa.scalar(False), table.num_rows))
        elif f.name in options.partition_columns:
            raw = entry.partition_values.get(f.name)
            value = None if raw is None or raw == HIVE_DEFAULT else raw
            arrays.append(_constant(value, f.type, table.num_rows, entry.path, f.name))
        elif f.name in table.column_names:
            column = table.column(f.name)
            arrays.append(column if column.type == f.type else _widen(column, f, entry, options))
        else:
            arrays.append(pa.nulls(table.num_rows, type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _widen(
    column: pa.ChunkedArray, field: pa.Field, entry: ManifestEntry, options: LakeSourceOptions
) -> pa.ChunkedArray:
    """``column`` of one file as the type the table reads it as: a widening (int to
    bigint, float to double, a finer timestamp unit truncated to microseconds) casts; a value
    the type cannot hold (a narrowing or incompatible change the planner could not see, e.g.
    a file written after the table's schema changed) is one line naming the file, never
    silently truncated."""
    if pa.types.is_timestamp(column.type) and pa.types.is_timestamp(field.type):
        return pc.cast(column, field.type, safe=False)  # ns -> us: sub-microseconds dropped
    try:
        return pc.cast(column, field.type)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"table {options.table!r}: column {field.name!r} of file {entry.path!r} is "
            f"{column.type}, read as {field.type}: a narrowing or incompatible change ({exc}); "
            "widen the declared type, or rewrite the file"
        ) from None


def _constant(value: str | None, kind: pa.DataType, n: int, path: str, column: str) -> pa.Array:
    if value is None:
        return pa.nulls(n, type=kind)
    return pa.repeat(partition_scalar(value, kind, path, column), n)


def partition_scalar(value: str, kind: pa.DataType, path: str, column: str) -> pa.Scalar:
    """A partition directory's value as a scalar of the column's type; :class:`DataError`
    naming the file and column when it is not one."""
    try:
        return pa.array([value]).cast(kind)[0]
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(
            f"partition value {column}={value!r} of file {path!r} is not a valid {kind}"
        ) from exc


def _reasons(micros: pa.Array, entry: ManifestEntry) -> list[str]:
    return [
        "event time is null"
        if t is None
        else f"event time {iso(t)} is outside the range its partition admits "
        f"[{iso(entry.admissible_lo) if entry.admissible_lo > -(2**61) else '-inf'}, "
        f"{iso(entry.admissible_hi) if entry.admissible_hi < 2**61 else '+inf'})"
        for t in micros.to_pylist()
    ]


def unplaceable_advice(options: LakeSourceOptions) -> str:
    """The settings that admit rows no slice can place or route them to dead letters, named
    as the user set the source up: job configuration keys or source options."""
    if options.advice_prefix:
        return (
            f"In [{options.advice_prefix}] widen max_earliness / max_lateness (clock skew, "
            f'late arrivals), or set unplaceable = "dead_letter" (and dlq = {{ table = ... }}) '
            "to route them to a dead-letter table instead."
        )
    return (
        "Widen maxEarliness / maxLateness (clock skew, late arrivals), or set "
        "nullEventTimePolicy=deadLetter with deadLetterPath to route them instead."
    )


def _route(
    options: LakeSourceOptions, entry: ManifestEntry, bad: pa.Table, reasons: list[str]
) -> None:
    if options.null_event_time_policy is NullEventTimePolicy.FAIL:
        shown = sorted(set(reasons))[:3]
        raise DataError(
            f"table {options.table!r}: {bad.num_rows} rows of file {entry.path!r} cannot be "
            f"placed in any event-time slice ({'; '.join(shown)}). " + unplaceable_advice(options)
        )
    assert options.dead_letter_path is not None
    dead = lake_dead_letters(
        bad,
        reasons,
        table=options.table,
        source_file=entry.path,
        job=options.job_name or f"lake:{options.table}",
        now=datetime.now(tz=UTC),
    )
    # One file per source file and row groups: a replayed slice overwrites it, no duplicates.
    identity = f"{entry.path}|{entry.size}|{entry.mtime_ns}|{sorted(entry.route_row_groups)}"
    key = hashlib.sha256(identity.encode()).hexdigest()[:24]
    fs, root = filesystem_for(options.dead_letter_path)
    stage(dead, root, f"{key}.parquet", fs)
