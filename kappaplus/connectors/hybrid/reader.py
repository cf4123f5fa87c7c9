"""Executor side of the hybrid source's Kafka phase: one offset range of one partition,
decoded into lake rows, de-duplicated against the lake, failures dead-lettered.

For each record of ``[from, until)``:

- it is decoded with the job's :class:`~kappaplus.codecs.DecoderSpec` (the same decoder
  the Kafka-only path uses); a record that fails is a *dead letter*;
- a decoded event with event time ``< cutoff`` is *skipped*: the lake owns it and already
  delivered it (this is what makes starting Kafka early, at ``cutoff - lateness``, or on a
  broker whose offset-for-time lookup answers "earliest", still exact);
- the others are *delivered*, conformed to the lake's schema: columns in lake order and
  types, time-partition columns (``dt=``) derived from the event time. A value that cannot
  be converted to the lake's type makes its record a dead letter too. In a ``mapped``
  source they are delivered as decoded (the event fields), for the runtime to map.

Dead letters are written to ``deadLetterPath`` (Parquet, :data:`~kappaplus.codecs.DLQ_ARROW_SCHEMA`)
and the counts of every range to ``deadLetterPath/_counts/`` (JSON); both are named after
the job and the range, so a replayed batch overwrites its own files: no duplicates, and
:func:`hybrid_counts` sums exactly one entry per range. Nothing is dropped silently.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.fs as pafs

from kappaplus.codecs import (
    ERROR_COL,
    RECORD_ARROW_TYPE,
    RECORD_COL,
    dead_letter_arrow,
    decode_batches,
)
from kappaplus.connectors.hybrid.options import HybridSourceOptions, safe_file_part
from kappaplus.connectors.kafka.reader import OffsetRange, read_range
from kappaplus.connectors.lake.delivery import output_arrow_schema
from kappaplus.connectors.lake.filesystems import filesystem_for
from kappaplus.core.event_time import bound_violation, far_ahead_reasons
from kappaplus.core.timeutil import iso
from kappaplus.dead_letters.staging import stage
from kappaplus.slicing.files import TS_UTC

COUNTS_DIR = "_counts"


@dataclass
class HybridCounts:
    """What the Kafka phase did with the records it read (``records = delivered +
    skipped + dead``)."""

    records: int = 0
    delivered: int = 0
    skipped: int = 0  # event time before the cutoff: delivered by the lake
    dead: int = 0  # failed to decode, out of the event-time bounds, or not convertible

    def add(self, other: HybridCounts) -> None:
        self.records += other.records
        self.delivered += other.delivered
        self.skipped += other.skipped
        self.dead += other.dead

    def as_dict(self) -> dict[str, int]:
        return {
            "records": self.records,
            "delivered": self.delivered,
            "skipped": self.skipped,
            "dead": self.dead,
        }


def decoded_arrow_schema(options: HybridSourceOptions) -> pa.Schema:
    """The Arrow schema the shared decoder produces: event fields, error, raw record."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(options.decoder.decoded_schema(), timezone="UTC")
    return pa.schema(
        [f.with_type(RECORD_ARROW_TYPE) if f.name == RECORD_COL else f for f in schema]
    )


def event_arrow_schema(options: HybridSourceOptions) -> pa.Schema:
    """The decoded events' fields (what a ``mapped`` source delivers from Kafka)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(options.decoder.event_schema, timezone="UTC")


def range_name(options: HybridSourceOptions, rng: OffsetRange) -> str:
    """The file-name stem of one range's dead letters and counts."""
    return (
        f"{safe_file_part(options.job_name)}-{safe_file_part(rng.topic)}-{rng.partition}-"
        f"{rng.from_offset}-{rng.until_offset}"
    )


def read_kafka_range(
    options: HybridSourceOptions, rng: OffsetRange, planned_micros: int | None = None
) -> Iterator[pa.RecordBatch]:
    """Yield the delivered events of ``rng`` as batches of the lake's Arrow schema; write
    the range's dead letters and counts once the range is fully read. ``planned_micros``:
    when the batch was planned (kept in its offset, so a replay decides as the first
    attempt did), the "now" of ``maxFuture``."""
    target = event_arrow_schema(options) if options.mapped else output_arrow_schema(options.lake)
    counts = HybridCounts()
    dead: list[pa.Table] = []
    records = read_range(options.kafka, rng)
    decoded_batches = decode_batches(options.decoder, decoded_arrow_schema(options), records)
    if options.max_ahead is not None:
        # a record's peers are every record of its range (as in a stream): judge them
        # together, once the range is read
        held = list(decoded_batches)
        decoded_batches = iter([_whole(held, decoded_arrow_schema(options))] if held else [])
    for decoded in decoded_batches:
        rows, bad, batch_counts = split_decoded(options, decoded, target, planned_micros)
        counts.add(batch_counts)
        if bad is not None:
            dead.append(bad)
        if rows.num_rows:
            yield from rows.to_batches()
    if dead:
        stage_range_dead_letters(options, rng, pa.concat_tables(dead))
    write_counts(options, rng, counts)


def _whole(batches: list[pa.RecordBatch], schema: pa.Schema) -> pa.RecordBatch:
    """One record batch of every decoded batch of a range."""
    table = pa.Table.from_batches(batches, schema=batches[0].schema if batches else schema)
    return table.combine_chunks().to_batches(max_chunksize=max(1, table.num_rows))[0]


def split_decoded(
    options: HybridSourceOptions,
    decoded: pa.RecordBatch,
    target: pa.Schema,
    planned_micros: int | None = None,
) -> tuple[pa.Table, pa.Table | None, HybridCounts]:
    """Apply the de-duplication rule, the event-time bounds and schema unification to one
    decoded batch.

    Returns the delivered rows (lake schema), the dead letters (DLQ schema, or None) and
    the counts of the batch.
    """
    table = pa.Table.from_batches([decoded])
    counts = HybridCounts(records=table.num_rows)
    failed = pc.is_valid(table.column(ERROR_COL))
    dead_parts = []
    if pc.any(failed).as_py():
        dead_parts.append(
            _dead_rows(table.filter(failed), table.column(ERROR_COL).filter(failed), options)
        )
    good = table.filter(pc.invert(failed))
    micros = pc.cast(pc.cast(good.column(options.kafka_event_time_column), TS_UTC), pa.int64())
    owned = pc.fill_null(pc.greater_equal(micros, options.cutoff), False)
    counts.skipped = good.num_rows - int(pc.sum(pc.cast(owned, pa.int64())).as_py() or 0)
    ahead = far_ahead(options, good, out_of_bounds_reasons(options, good, planned_micros))
    if ahead is not None:
        # judged among every decoded record of the range (its peers), skipped ones too
        far = pc.and_(pc.is_valid(ahead), owned)
        if pc.any(far).as_py():
            dead_parts.append(_dead_rows(good.filter(far), ahead.filter(far), options))
            owned = pc.and_(owned, pc.invert(far))
    kept = good.filter(owned)
    outside = out_of_bounds_reasons(options, kept, planned_micros)
    if outside is not None:
        bad = pc.is_valid(outside)
        dead_parts.append(_dead_rows(kept.filter(bad), outside.filter(bad), options))
        kept = kept.filter(pc.invert(bad))
    if options.mapped:
        rows, reasons = kept.select(target.names).cast(target), None
    else:
        rows, reasons = _conform(kept, target, options)
    if reasons is not None:
        bad = pc.is_valid(reasons)
        dead_parts.append(_dead_rows(kept.filter(bad), reasons.filter(bad), options))
        rows = rows.filter(pc.invert(bad))
    counts.delivered = rows.num_rows
    counts.dead = sum(part.num_rows for part in dead_parts)
    dead = pa.concat_tables(dead_parts) if dead_parts else None
    return rows, dead, counts


def far_ahead(
    options: HybridSourceOptions, good: pa.Table, outside: pa.Array | None = None
) -> pa.Array | None:
    """Per decoded record, why its event time is further ahead of its partition's median
    among ``good`` than ``maxAhead`` allows (null when it is not); None without
    ``maxAhead``. ``outside``: the records' out-of-bounds reasons (such a record is a dead
    letter for that reason, neither judged here nor a peer)."""
    if options.max_ahead is None or good.num_rows == 0:
        return None
    column = options.kafka_event_time_column
    times = pc.cast(pc.cast(good.column(column), TS_UTC), pa.int64()).combine_chunks()
    partitions = good.column(RECORD_COL).combine_chunks().field("partition")
    failed = pa.array([False] * good.num_rows) if outside is None else pc.is_valid(outside)
    reasons = far_ahead_reasons(times, partitions, failed, column, options.max_ahead)
    return pa.array(reasons, type=pa.string()) if any(reasons) else None


def out_of_bounds_reasons(
    options: HybridSourceOptions, kept: pa.Table, planned_micros: int | None
) -> pa.Array | None:
    """Per row, why its event time is out of the input's bounds (null when within), in
    the words of a stream's dead letters; None when no bound applies."""
    ahead, low, high = options.max_future, options.event_time_min, options.event_time_max
    if kept.num_rows == 0 or (low is None and high is None and planned_micros is None):
        return None
    column = options.kafka_event_time_column
    label = "the batch's planning time" + (f" {iso(planned_micros)}" if planned_micros else "")
    micros = pc.cast(pc.cast(kept.column(column), TS_UTC), pa.int64()).to_pylist()
    reasons = [
        bound_violation(
            column,
            value,
            low=low,
            high=high,
            max_future=ahead,
            now=planned_micros,
            now_label=label,
        )
        for value in micros
    ]
    return pa.array(reasons, type=pa.string()) if any(reasons) else None


def _conform(
    kept: pa.Table, target: pa.Schema, options: HybridSourceOptions
) -> tuple[pa.Table, pa.Array | None]:
    """Lake columns from decoded events; reasons (or None) for rows that do not convert."""
    n = kept.num_rows
    reasons: list[str | None] | None = None
    arrays = []
    for f in target:
        if f.name in options.derived:
            text = pc.strftime(
                kept.column(options.event_time_column), format=options.derived[f.name]
            )
            arrays.append(text if f.type == pa.string() else pc.cast(text, f.type))
            continue
        column = kept.column(f.name)
        if column.type == f.type:
            arrays.append(column)
            continue
        try:
            arrays.append(pc.cast(column, f.type))
            continue
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            pass
        # Some value does not fit the lake's type: find it, make that record a dead letter.
        reasons = reasons or [None] * n
        values = []
        for i, value in enumerate(column.to_pylist()):
            try:
                values.append(pa.array([value], type=column.type).cast(f.type)[0].as_py())
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                reasons[i] = reasons[i] or (
                    f"field {f.name!r}: {value!r} does not convert to the lake's type "
                    f"{f.type}: {exc}"
                )
                values.append(None)
        arrays.append(pa.array(values, type=f.type))
    rows = pa.Table.from_arrays(arrays, schema=target)
    return rows, (pa.array(reasons, type=pa.string()) if reasons is not None else None)


def _dead_rows(
    rows: pa.Table, reasons: pa.Array | pa.ChunkedArray, options: HybridSourceOptions
) -> pa.Table:
    """Dead letters in the DLQ schema: the raw record, the reason, the job, the time."""
    return dead_letter_arrow(rows, reasons, options.job_name)


def _write_atomically(
    fs: pafs.FileSystem, root: str, name: str, write: Callable[[str], object]
) -> None:
    fs.create_dir(root, recursive=True)
    tmp = f"{root}/.{name}.{os.getpid()}.tmp"
    write(tmp)
    fs.move(tmp, f"{root}/{name}")


def stage_range_dead_letters(
    options: HybridSourceOptions, rng: OffsetRange, dead: pa.Table
) -> None:
    """One Parquet file per range (a replay overwrites it)."""
    fs, root = filesystem_for(options.dead_letter_path)
    stage(dead, root, f"{range_name(options, rng)}.parquet", fs)


def write_counts(options: HybridSourceOptions, rng: OffsetRange, counts: HybridCounts) -> None:
    """The counts of one range as JSON under ``_counts/`` (hidden from Parquet readers)."""
    fs, root = filesystem_for(options.dead_letter_path)
    payload = json.dumps(
        {
            "job": options.job_name,
            "topic": rng.topic,
            "partition": rng.partition,
            "from": rng.from_offset,
            "until": rng.until_offset,
            **counts.as_dict(),
        }
    ).encode()

    def write(path: str) -> None:
        with fs.open_output_stream(path) as out:
            out.write(payload)

    _write_atomically(fs, f"{root}/{COUNTS_DIR}", f"{range_name(options, rng)}.json", write)


def hybrid_counts(dead_letter_path: str, job_name: str | None = None) -> HybridCounts:
    """The Kafka-phase counts written so far under ``dead_letter_path`` (optionally of one
    job): records read, delivered, skipped (before the cutoff) and dead letters."""
    fs, root = filesystem_for(str(dead_letter_path))
    total = HybridCounts()
    selector = pafs.FileSelector(f"{root}/{COUNTS_DIR}", allow_not_found=True)
    for info in fs.get_file_info(selector):
        if info.type != pafs.FileType.File or not info.base_name.endswith(".json"):
            continue
        if info.base_name.startswith("."):
            continue
        with fs.open_input_stream(info.path) as stream:
            data = json.loads(stream.read())
        if job_name is not None and data.get("job") != job_name:
            continue
        total.add(HybridCounts(data["records"], data["delivered"], data["skipped"], data["dead"]))
    return total
