"""Dead letters set aside during a run, before they reach their target: one way to stage
them, in one schema (:data:`~kappaplus.codecs.DLQ_ARROW_SCHEMA`), whoever finds them.

- a lake source's rows no event-time slice can place
  (:mod:`kappaplus.connectors.lake.delivery`), made dead letters by :func:`lake_dead_letters`;
- a bootstrap's Kafka records that do not decode (:mod:`kappaplus.connectors.hybrid.reader`);
- a stream's failed records, tapped in the publishing query
  (:mod:`kappaplus.runtime.side_outputs.dead_letter_tap`).

Contract: a staged file holds one unit of work (a source file's row groups, an offset range,
a task's partition) and is written atomically under a name that unit determines, so a
replayed unit replaces its file whole: staging never duplicates. The run publishes what was
staged with :mod:`kappaplus.dead_letters.targets`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from datetime import datetime

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from kappaplus.codecs import DLQ_ARROW_SCHEMA

KAFKA_COLUMNS = ("kafka_topic", "kafka_partition", "kafka_offset")
"""Columns of a lake table that archives Kafka records: they fill a dead letter's
``topic``, ``partition`` and ``offset``."""


def lake_dead_letters(
    rows: pa.Table,
    reasons: Sequence[str],
    *,
    table: str,
    source_file: str,
    job: str,
    now: datetime,
) -> pa.Table:
    """Rows of a lake table as dead letters: ``value`` is the row as JSON (every column, as
    stored), ``reason`` says why and names the table and file; ``topic``, ``partition`` and
    ``offset`` come from the row's :data:`KAFKA_COLUMNS` when the table has them."""
    records = rows.to_pylist()
    n = len(records)
    values = [
        json.dumps({k: v for k, v in r.items()}, default=str, sort_keys=True).encode()
        for r in records
    ]

    def column(name: str) -> list[object]:
        return [r.get(name) for r in records]

    columns = {
        "key": pa.nulls(n, pa.binary()),
        "value": pa.array(values, pa.binary()),
        "topic": pa.array(column("kafka_topic"), pa.string()),
        "partition": pa.array(column("kafka_partition"), pa.int32()),
        "offset": pa.array(column("kafka_offset"), pa.int64()),
        "kafka_timestamp": pa.nulls(n, pa.timestamp("us", tz="UTC")),
        "reason": pa.array(
            [f"{reason} (table {table}, file {source_file})" for reason in reasons], pa.string()
        ),
        "job": pa.array([job] * n, pa.string()),
        "dead_letter_time": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
    }
    return pa.Table.from_arrays(
        [columns[f.name] for f in DLQ_ARROW_SCHEMA], schema=DLQ_ARROW_SCHEMA
    )


def stage(dead: pa.Table, root: str, name: str, fs: pafs.FileSystem | None = None) -> str:
    """Write ``dead`` (:data:`DLQ_ARROW_SCHEMA`) as ``root/name``, atomically (a replayed
    unit of work replaces its file whole); the path written. ``fs``: the file system of
    ``root`` (default the local one)."""
    if not dead.schema.equals(DLQ_ARROW_SCHEMA):
        dead = dead.select([f.name for f in DLQ_ARROW_SCHEMA]).cast(DLQ_ARROW_SCHEMA)
    fs = fs or pafs.LocalFileSystem()
    fs.create_dir(root, recursive=True)
    tmp = f"{root}/.{name}.{os.getpid()}.tmp"
    pq.write_table(dead.replace_schema_metadata(None), tmp, filesystem=fs)
    fs.move(tmp, f"{root}/{name}")
    return f"{root}/{name}"


def read_staged(root: str) -> pa.Table:
    """Every dead letter staged directly under ``root`` (local), in :data:`DLQ_ARROW_SCHEMA`
    (an empty table when none)."""
    from pathlib import Path

    files = sorted(Path(root).glob("*.parquet")) if Path(root).is_dir() else []
    if not files:
        return DLQ_ARROW_SCHEMA.empty_table()
    tables = [pq.read_table(f).cast(DLQ_ARROW_SCHEMA) for f in files]
    return pa.concat_tables(tables)
