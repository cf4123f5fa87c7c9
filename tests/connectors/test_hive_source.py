"""The Hive streaming source against real Spark and tables in the embedded metastore.

Every streaming result is compared with a plain Spark batch query over the same table.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

import pytest
from hive_tables import BASE, DAY, events, iso, write_arrival_time_table, write_event_time_table
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.codecs import DLQ_ARROW_SCHEMA
from kappaplus.connectors.hive import read_hive_stream
from kappaplus.core.errors import ConfigError

HOUR = 3600


def run_available_now(
    stream: DataFrame, checkpoint: Path, name: str, mode: str = "append"
) -> list[dict]:
    """Run to completion into a memory table ``name``; return the query's progress list."""
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .outputMode(mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def collect_batches(stream: DataFrame, checkpoint: Path) -> tuple[list[dict], list[dict]]:
    """Run to completion recording each micro-batch's rows; returns (batches, progress)."""
    batches: list[dict] = []

    def record(batch: DataFrame, batch_id: int) -> None:
        rows = batch.select("id", F.col("ts").cast("long").alias("t")).collect()
        batches.append({"id": batch_id, "ids": [r.id for r in rows], "ts": [r.t for r in rows]})

    query = (
        stream.writeStream.foreachBatch(record)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return batches, list(query.recentProgress)


def in_event_range(start: int, end: int) -> Column:
    """``start <= ts < end``: the rows a bounded read of ``[start, end)`` must deliver."""
    return (F.col("ts") >= F.lit(iso(start)).cast("timestamp")) & (
        F.col("ts") < F.lit(iso(end)).cast("timestamp")
    )


def data_offsets(progress: list[dict]) -> list[dict]:
    ends = [json.loads(p["sources"][0]["endOffset"]) for p in progress]
    return [o for o in ends if o["phase"] == "data" and o["lo"] != o["hi"]]


def assert_same(got: DataFrame, truth: DataFrame) -> None:
    got_rows, truth_rows = sorted(map(tuple, got.collect())), sorted(map(tuple, truth.collect()))
    assert len(got_rows) == len(truth_rows), (len(got_rows), len(truth_rows))
    assert got_rows == truth_rows


@pytest.fixture(scope="module")
def event_table(spark: SparkSession) -> str:
    """Two days of events, out of order inside files, 48 hourly partitions x 3 files."""
    write_event_time_table(spark, "hive_src_events", events(spark, 12_000, 2, seed=1))
    return "hive_src_events"


def test_tumbling_windows_equal_batch_query(spark: SparkSession, event_table: str, scratch: Path):
    start, end = BASE + 3 * HOUR + 1800, BASE + DAY + 17 * HOUR
    stream = read_hive_stream(
        spark,
        event_table,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="4 hours",
        watermark_delay="20 minutes",
        manifestDir=str(scratch / "manifests"),
    )
    # A job filter that does not name the event-time column: Spark would push it below the
    # watermark, where it would drop the end markers, unless apply_watermark prevents it.
    counts = (
        stream.where(F.col("kind") != "pay")
        .groupBy(F.window("ts", "1 hour"), "key")
        .agg(F.count("*").alias("n"), F.sum("id").alias("ids"))
    )
    progress = run_available_now(counts, scratch / "ck", "tumbling_out")
    assert len(data_offsets(progress)) >= 8

    inside = spark.table(event_table).where(in_event_range(start, end))
    truth = (
        inside.where(F.col("kind") != "pay")
        .groupBy(F.window("ts", "1 hour"), "key")
        .agg(F.count("*").alias("n"), F.sum("id").alias("ids"))
    )
    # every window that ends at or before the end bound is emitted, none missing
    truth = truth.where(F.col("window.end") <= F.lit(iso(end)).cast("timestamp"))
    assert_same(spark.table("tumbling_out"), truth)


def sessions_by_hand(rows: list[tuple[int, int, int]], gap: int, end: int) -> list[tuple]:
    """Independent ground truth: (key, start, end, count, first id) of gap-based sessions
    over (key, epoch second, id) rows, keeping sessions that end at or before ``end``.
    An event at exactly the previous end joins the session, as in Spark."""
    result = []
    by_key: dict[int, list[tuple[int, int]]] = {}
    for key, t, i in rows:
        by_key.setdefault(key, []).append((t, i))
    for key, items in by_key.items():
        items.sort()
        first_t, last_t, ids = items[0][0], items[0][0], [items[0][1]]
        for t, i in items[1:]:
            if t <= last_t + gap:  # Spark merges sessions that touch
                last_t, ids = max(last_t, t), ids + [i]
                continue
            result.append((key, first_t, last_t + gap, len(ids), min(ids)))
            first_t, last_t, ids = t, t, [i]
        result.append((key, first_t, last_t + gap, len(ids), min(ids)))
    return sorted(r for r in result if r[2] <= end)


def test_session_windows_equal_ground_truth(spark: SparkSession, event_table: str, scratch: Path):
    start, end = BASE, BASE + DAY + 6 * HOUR
    stream = read_hive_stream(
        spark,
        event_table,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="3 hours",
        watermark_delay="10 minutes",
        manifestDir=str(scratch / "manifests"),
    )
    sessions = stream.groupBy(F.session_window("ts", "4 minutes"), "key").agg(
        F.count("*").alias("n"), F.min("id").alias("first_id")
    )
    run_available_now(sessions, scratch / "ck", "session_out")
    got, truth = sessions_and_truth(spark, "session_out", event_table, start, end)
    assert len(truth) > 1000
    assert got == truth


def test_slices_never_overlap_and_respect_budgets(
    spark: SparkSession, event_table: str, scratch: Path
):
    start, end = BASE, BASE + DAY
    stream = read_hive_stream(
        spark,
        event_table,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="3 hours",
        maxRowsPerTrigger=700,
        manifestDir=str(scratch / "manifests"),
    )
    batches, progress = collect_batches(stream, scratch / "ck")
    offsets = data_offsets(progress)
    by_batch = {p["batchId"]: json.loads(p["sources"][0]["endOffset"]) for p in progress}

    previous_hi = start
    for batch in batches:
        offset = by_batch[batch["id"]]
        lo, hi = offset["lo"] // 1_000_000, offset["hi"] // 1_000_000
        assert previous_hi <= lo < hi or lo == hi, "slices go forward without overlap"
        assert offset["hi"] - offset["lo"] <= 3 * HOUR * 1_000_000
        assert len(batch["ids"]) <= 700, "row budget per trigger"
        assert all(lo <= t < offset["hi"] / 1_000_000 for t in batch["ts"]), "rows in their slice"
        previous_hi = max(previous_hi, offset["hi"] // 1_000_000)
    assert len(offsets) > 8, "the row budget split the 3-hour slices"

    delivered = [i for b in batches for i in b["ids"]]
    expected = {
        r.id
        for r in spark.table(event_table).where(in_event_range(start, end)).select("id").collect()
    }
    assert len(delivered) == len(set(delivered)), "no duplicates"
    assert set(delivered) == expected, "no loss"
    assert sum(p["numInputRows"] for p in progress) == len(expected)


def test_arrival_time_partitions_deliver_late_events_in_their_slice(
    spark: SparkSession, scratch: Path
):
    lateness = 3 * HOUR
    base = events(spark, 6_000, 1.5, seed=3)
    # 90% arrive within 3 h; 10% arrive up to 6 h late (beyond the declared lateness).
    arrived = write_arrival_time_table(spark, "hive_src_arrivals", base, 3 * HOUR, seed=4)
    very_late = base.where(F.col("id") % 10 == 0).withColumn(
        "ts", (F.col("ts").cast("long") - 4 * HOUR).cast("timestamp")
    )
    (
        very_late.withColumn("arrival", (F.col("ts").cast("long") + 5 * HOUR).cast("timestamp"))
        .withColumn("dt", F.date_format("arrival", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("arrival", "HH"))
        .drop("arrival")
        .write.insertInto("hive_src_arrivals")
    )
    start, end = BASE + 2 * HOUR, BASE + DAY + 6 * HOUR
    stream = read_hive_stream(
        spark,
        "hive_src_arrivals",
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="2 hours",
        partitionTimeKind="arrival",
        maxLateness="3 hours",
        nullEventTimePolicy="deadLetter",
        deadLetterPath=str(scratch / "dead"),
        manifestDir=str(scratch / "manifests"),
    )
    batches, progress = collect_batches(stream, scratch / "ck")
    by_batch = {p["batchId"]: json.loads(p["sources"][0]["endOffset"]) for p in progress}
    for batch in batches:
        offset = by_batch[batch["id"]]
        assert all(offset["lo"] <= t * 1_000_000 < offset["hi"] for t in batch["ts"])

    in_range = in_event_range(start, end)
    on_time = {r.id for r in arrived.where(in_range).select("id").collect()}
    # Very late rows are dead-lettered by the slice that reads their arrival partition;
    # partitions whose admitted range lies past end + lateness are outside this run.
    arrival_hour = F.floor((F.col("ts").cast("long") + 5 * HOUR) / HOUR) * HOUR
    too_late = {
        r.id
        for r in very_late.where(in_range & (arrival_hour - lateness < end)).select("id").collect()
    }
    assert len(too_late) > 30
    delivered = [i for b in batches for i in b["ids"]]
    assert len(delivered) == len(set(delivered))
    # The very late copies share ids with on-time rows: count by (id, ts) instead.
    assert len(delivered) == len(on_time), "every event within the lateness is delivered"
    dead = spark.read.parquet(str(scratch / "dead"))
    assert dead.schema.fieldNames() == [f.name for f in DLQ_ARROW_SCHEMA]
    dead_ids = [json.loads(r.value)["id"] for r in dead.select("value").collect()]
    assert sorted(dead_ids) == sorted(too_late), "events later than maxLateness are dead-lettered"
    assert dead.where(~F.col("reason").contains("outside the range")).count() == 0


def test_column_pruning_reads_and_delivers_only_the_named_columns(
    spark: SparkSession, event_table: str, scratch: Path
):
    start, end = BASE + 2 * HOUR, BASE + 14 * HOUR
    table_columns = spark.table(event_table).columns
    stream = read_hive_stream(
        spark,
        event_table,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="6 hours",
        manifestDir=str(scratch / "manifests"),
        columns="kind,key",
    )
    # table order, the event-time column always included
    assert stream.columns == [c for c in table_columns if c in ("key", "kind", "ts")]
    assert len(stream.columns) < len(table_columns)
    run_available_now(stream, scratch / "ck", "pruned_out")
    truth = spark.table(event_table).where(in_event_range(start, end)).select(*stream.columns)
    assert_same(spark.table("pruned_out"), truth)

    with pytest.raises(ConfigError, match="'columns' = 'colour'.*no such column"):
        read_hive_stream(
            spark, event_table, event_time_column="ts", columns="kind,colour", start=iso(start)
        )


def sessions_and_truth(
    spark: SparkSession, out_table: str, event_table: str, start: datetime, end: datetime
) -> tuple[list[tuple], list[tuple]]:
    """The sessions a query wrote to ``out_table`` and the sessions computed by hand (gap
    4 minutes) from the rows of ``event_table`` in ``[start, end)``."""
    got = sorted(
        (r.key, int(r.s), int(r.e), r.n, r.first_id)
        for r in spark.table(out_table)
        .select(
            "key",
            F.col("session_window.start").cast("long").alias("s"),
            F.col("session_window.end").cast("long").alias("e"),
            "n",
            "first_id",
        )
        .collect()
    )
    rows = [
        (r.key, int(r.t), r.id)
        for r in spark.table(event_table)
        .where(in_event_range(start, end))
        .select("key", F.col("ts").cast("long").alias("t"), "id")
        .collect()
    ]
    return got, sessions_by_hand(rows, 4 * 60, end)
