"""The audit table: per-bucket counts of every stage, written once per micro-batch.

One row per (job, mode, query, batch, stage, name, io, bucket). The runtime's
:class:`AuditRecorder` turns each finished micro-batch's progress (its observed audit
histograms, :mod:`kappaplus.audit.counts`) into rows and appends them, all rows of one
write sharing one ``recorded_at``. The key of a micro-batch is ``(query, batch_id)``: the
query name carries the checkpoint's id, and Spark re-runs a batch that did not commit
with the same id and the same input. Readers (:func:`read_counts`) keep, per key, only
the rows of its latest write, so a replayed micro-batch *replaces* its counts: the table
behaves like a compacted topic, and counting twice is impossible by construction.

The table is ``kappa_audit.counts`` (``$KAPPA_AUDIT_TABLE`` to change it), Parquet,
created on first use. Compaction of its small files is not implemented.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from kappaplus.audit.counts import BUCKET_SECONDS, NO_TIME, stage_counts
from kappaplus.core.table.catalogs import described

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

AUDIT_TABLE_ENV = "KAPPA_AUDIT_TABLE"
DEFAULT_AUDIT_TABLE = "kappa_audit.counts"
SCHEMA = (
    "job string, mode string, query string, batch_id bigint, stage string, name string, "
    "io string, dataset string, bucket timestamp, bucket_seconds int, `rows` bigint, "
    "exact boolean, recorded_at timestamp"
)
COLUMNS = [part.strip().split(" ")[0].strip("`") for part in SCHEMA.split(",")]


def audit_table() -> str:
    """The audit table's name: ``$KAPPA_AUDIT_TABLE`` or ``kappa_audit.counts``."""
    return os.environ.get(AUDIT_TABLE_ENV) or DEFAULT_AUDIT_TABLE


def ensure_table(spark: SparkSession, table: str | None = None) -> str:
    """Create the audit table (and its database) if missing; return its name.

    One catalog question when the table is there (the usual case: every run after the
    first), instead of two ``IF NOT EXISTS`` statements at every run's end."""
    name = table or audit_table()
    if spark.catalog.tableExists(name):
        return name
    if "." in name:
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {name.split('.', 1)[0]}")
    spark.sql(f"CREATE TABLE IF NOT EXISTS {name} ({SCHEMA}) USING parquet")
    return name


def _get(entry: Any, key: str, default: Any = None) -> Any:
    try:
        value = entry[key]
    except (KeyError, TypeError, IndexError):
        return default
    return default if value is None else value


def bucket_time(index: int, bucket_seconds: int = BUCKET_SECONDS) -> datetime | None:
    """The start of bucket ``index`` (None for rows without a time)."""
    if index == NO_TIME:
        return None
    return datetime.fromtimestamp(index * bucket_seconds, UTC)


@dataclass
class AuditRecorder:
    """Turns finished micro-batches of a run's queries into audit rows and writes them.

    - ``input_stages_from``: the one query whose input-side stages (``kafka``, ``lake``,
      ``job``) are recorded -- every output query runs the input plan again and observes
      the same rows; the others contribute their ``output`` and ``late`` stages only.
    - ``datasets``: ``(stage, name) -> dataset`` (topic or table the stage counts).
    """

    spark: SparkSession
    job: str
    mode: str
    query_names: Mapping[str, str]
    input_stages_from: str | None
    datasets: Mapping[tuple[str, str], str] = field(default_factory=dict)
    table: str = field(default_factory=audit_table)
    pending: list[tuple[Any, ...]] = field(default_factory=list)
    seen: dict[str, set[int]] = field(default_factory=dict)
    written_batches: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    local_dir: str | None = field(default=None, repr=False)
    """The table's directory when it is on this machine's filesystem (set on first flush)."""
    """Guards ``pending``: :meth:`add_late_kept` runs on a ``foreachBatch`` thread."""

    def collect(self, key: str, entries: Iterable[Any]) -> int:
        """Queue the audit rows of the finished batches of query ``key`` not yet seen."""
        seen = self.seen.setdefault(key, set())
        added = 0
        for entry in entries:
            batch_id = _get(entry, "batchId")
            if batch_id is None or int(batch_id) in seen:
                continue
            if "addBatch" not in (_get(entry, "durationMs", {}) or {}):
                continue
            seen.add(int(batch_id))
            rows = self.rows_of(key, int(batch_id), entry)
            with self.lock:
                self.pending.extend(rows)
            added += len(rows)
        return added

    def add_late_kept(
        self, output: str, table: str, batch_id: int, counts: Mapping[int, int]
    ) -> None:
        """Queue the rows an output kept as late in ``batch_id``, per bucket index: input
        rows, not Spark's partially aggregated groups. Keyed by its own query name
        (``<query>-late``) so it never shares a micro-batch key with the output's counts."""
        query = f"{self.query_names.get(output, output)}-late"
        rows = [
            (self.job, self.mode, query, batch_id, "late_kept", output, "kept", table)
            + (bucket_time(index), BUCKET_SECONDS, n, True)
            for index, n in sorted(counts.items())
        ]
        with self.lock:
            self.pending.extend(rows)

    def rows_of(self, key: str, batch_id: int, entry: Any) -> list[tuple[Any, ...]]:
        """The audit rows of one finished micro-batch of query ``key``."""
        query = self.query_names.get(key, key)
        observed = _get(entry, "observedMetrics", {}) or {}
        out: list[tuple[Any, ...]] = []
        for counts in stage_counts(observed, _get(entry, "sources", []) or []):
            if counts.stage != "output" and key != self.input_stages_from:
                continue
            dataset = self.datasets.get((counts.stage, counts.name), counts.name)
            for index, rows in sorted(counts.rows.items()):
                out.append(
                    (
                        self.job,
                        self.mode,
                        query,
                        batch_id,
                        counts.stage,
                        counts.name,
                        counts.io,
                        dataset,
                        bucket_time(index),
                        BUCKET_SECONDS,
                        rows,
                        counts.exact,
                    )
                )
        operators = _get(entry, "stateOperators", []) or []
        dropped = sum(int(_get(op, "numRowsDroppedByWatermark", 0)) for op in operators)
        if dropped:
            # Spark's count: rows reaching the stateful operator after partial aggregation
            out.append(
                (self.job, self.mode, query, batch_id, "late", key, "dropped", key, None)
                + (BUCKET_SECONDS, dropped, True)
            )
        return out

    def flush(self) -> int:
        """Append the queued rows (one ``recorded_at`` for all); returns how many."""
        with self.lock:
            if not self.pending:
                return 0
            rows, self.pending = self.pending, []
        from pyspark.sql import functions as F

        try:
            recorded_at = datetime.fromtimestamp(time.time(), UTC)
            if self.local_dir is None:
                ensure_table(self.spark, self.table)
                self.local_dir = _local_location(self.spark, self.table) or ""
            if self.local_dir:
                write_parquet_rows(self.local_dir, rows, recorded_at)
            else:
                df = self.spark.createDataFrame(rows, SCHEMA.rsplit(",", 1)[0])
                df = df.withColumn("recorded_at", F.lit(recorded_at))
                df.select(*COLUMNS).write.insertInto(self.table)
        except Exception:
            with self.lock:
                self.pending = rows + self.pending
            raise
        self.written_batches += len({(r[2], r[3]) for r in rows})
        log.debug("audit: %d rows of %s written to %s", len(rows), self.job, self.table)
        return len(rows)


def _local_location(spark: SparkSession, table: str) -> str | None:
    """The directory of ``table`` when it is a local path (``file:``), else None."""
    location = described(spark, table)[1].get("Location", "")
    if location.startswith("file:"):
        return location.removeprefix("file://").removeprefix("file:")
    return None


def write_parquet_rows(directory: str, rows: list[tuple[Any, ...]], recorded_at: datetime) -> str:
    """Append ``rows`` to the table in ``directory`` as one Parquet file (written under a
    hidden name, then renamed: a reader sees all of it or nothing); returns its path.

    The audit table is an unpartitioned Parquet table, so a file in its directory is a
    committed append: no Spark job and no metastore call, which is what a flush in a
    run's loop would cost (docs/benchmarks.md). Used for
    tables on this machine's filesystem; elsewhere the recorder appends through Spark.
    """
    import uuid

    import pyarrow as pa
    import pyarrow.parquet as pq

    ts = pa.timestamp("us", tz="UTC")
    schema = pa.schema(
        [
            ("job", pa.string()),
            ("mode", pa.string()),
            ("query", pa.string()),
            ("batch_id", pa.int64()),
            ("stage", pa.string()),
            ("name", pa.string()),
            ("io", pa.string()),
            ("dataset", pa.string()),
            ("bucket", ts),
            ("bucket_seconds", pa.int32()),
            ("rows", pa.int64()),
            ("exact", pa.bool_()),
            ("recorded_at", ts),
        ]
    )
    columns = list(zip(*rows, strict=True)) if rows else [()] * 12
    arrays = [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=False)]
    arrays.append(pa.array([recorded_at] * len(rows), type=ts))
    name = f"part-{uuid.uuid4().hex}-audit.parquet"
    hidden = os.path.join(directory, f".{name}.tmp")
    os.makedirs(directory, exist_ok=True)
    pq.write_table(pa.Table.from_arrays(arrays, schema=schema), hidden)
    target = os.path.join(directory, name)
    os.replace(hidden, target)
    return target


def read_counts(
    spark: SparkSession,
    *,
    jobs: Iterable[str] | None = None,
    table: str | None = None,
) -> DataFrame:
    """The audit rows of ``jobs`` (all when None), each micro-batch's latest write only."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    name = ensure_table(spark, table)
    spark.catalog.refreshTable(name)
    df = spark.table(name)
    if jobs is not None:
        df = df.where(F.col("job").isin(list(jobs)))
    latest = Window.partitionBy("query", "batch_id")
    return (
        df.withColumn("_latest", F.max("recorded_at").over(latest))
        .where(F.col("recorded_at") == F.col("_latest"))
        .drop("_latest")
    )
