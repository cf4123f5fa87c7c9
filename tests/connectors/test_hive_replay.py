"""Stopping a backfill mid-way and replaying a batch after a crash.

The restarted run must produce exactly what an uninterrupted run produces, and a replayed
batch must read exactly what it read the first time even though a file was added since.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from hive_tables import BASE, DAY, events, iso, write_event_time_table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.hive import read_hive_stream, resolve_table

HOUR = 3600
START, END = BASE, BASE + DAY


def windowed(spark: SparkSession, table: str, manifests: Path) -> DataFrame:
    stream = read_hive_stream(
        spark,
        table,
        event_time_column="ts",
        start=iso(START),
        end=iso(END),
        max_event_time_per_trigger="2 hours",
        watermark_delay="15 minutes",
        manifestDir=str(manifests),
    )
    return stream.groupBy(F.window("ts", "30 minutes"), "key").agg(
        F.count("*").alias("n"), F.sum("id").alias("ids")
    )


class BatchRecorder:
    """foreachBatch sink keeping every delivery of every batch id."""

    def __init__(self) -> None:
        self.deliveries: dict[int, list[list[tuple]]] = {}

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(
            (r.start, r.key, r.n, r.ids)
            for r in batch.select(
                F.col("window.start").cast("long").alias("start"), "key", "n", "ids"
            ).collect()
        )
        self.deliveries.setdefault(batch_id, []).append(rows)

    def final_rows(self) -> list[tuple]:
        return sorted(r for runs in self.deliveries.values() for r in runs[-1])


def start_query(df: DataFrame, recorder: BatchRecorder, checkpoint: Path):  # type: ignore[no-untyped-def]
    return (
        df.writeStream.foreachBatch(recorder)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )


def remove_log_entry(entry: Path) -> None:
    """Delete a checkpoint log entry with its Hadoop checksum file."""
    entry.unlink()
    (entry.parent / f".{entry.name}.crc").unlink(missing_ok=True)


def add_file(spark: SparkSession, table: str, partition: str, first_id: int, at: int) -> int:
    """Write one more parquet file into ``partition`` with 50 events at time ``at``."""
    location = resolve_table(spark, table).location.replace("file:", "")
    schema = pa.schema(
        [
            ("id", pa.int64()),
            ("key", pa.int32()),
            ("kind", pa.string()),
            ("ts", pa.timestamp("us", tz="UTC")),
        ]
    )
    rows = pa.table(
        {
            "id": list(range(first_id, first_id + 50)),
            "key": [1] * 50,
            "kind": ["late"] * 50,
            "ts": [at * 1_000_000] * 50,
        },
        schema=schema,
    )
    pq.write_table(rows, f"{location}/{partition}/late-arrival.parquet")
    return 50


def test_restart_and_replay_match_an_uninterrupted_run(spark: SparkSession, scratch: Path):
    table = "hive_src_replay"
    write_event_time_table(spark, table, events(spark, 4_000, 1, seed=9), files_per_partition=2)

    reference = BatchRecorder()
    start_query(
        windowed(spark, table, scratch / "m1"), reference, scratch / "ck1"
    ).awaitTermination()
    expected = reference.final_rows()
    assert len(expected) > 300

    interrupted = BatchRecorder()
    query = start_query(windowed(spark, table, scratch / "m2"), interrupted, scratch / "ck2")
    deadline = time.time() + 300
    while time.time() < deadline and (query.lastProgress or {}).get("batchId", -1) < 3:
        time.sleep(0.2)
    query.stop()
    committed = max(
        int(p.name) for p in (scratch / "ck2" / "commits").iterdir() if p.name.isdigit()
    )
    for planned_only in (scratch / "ck2" / "offsets").iterdir():
        if planned_only.name.isdigit() and int(planned_only.name) > committed:
            remove_log_entry(planned_only)
    # Crash after the sink wrote the last committed batch but before Spark committed it:
    # Spark must replay that batch from its offset.
    remove_log_entry(scratch / "ck2" / "commits" / str(committed))
    planned = json.loads(
        (scratch / "ck2" / "offsets" / str(committed)).read_text().splitlines()[-1]
    )
    assert planned["phase"] == "data"

    # A file lands in the replayed slice's range after it was planned.
    slice_lo = planned["lo"] // 1_000_000
    hour = time.gmtime(slice_lo)
    partition = f"dt={time.strftime('%Y-%m-%d', hour)}/hr={time.strftime('%H', hour)}"
    late_rows = add_file(spark, table, partition, 10_000_000, slice_lo + 60)

    resumed = start_query(windowed(spark, table, scratch / "m2"), interrupted, scratch / "ck2")
    resumed.awaitTermination()

    replays = {b: runs for b, runs in interrupted.deliveries.items() if len(runs) > 1}
    assert committed in replays, "the crashed batch was delivered again"
    for batch_id, runs in replays.items():
        assert all(run == runs[0] for run in runs), f"batch {batch_id} replayed differently"
    final = interrupted.final_rows()
    keys = [(r[0], r[1]) for r in final]
    assert len(keys) == len(set(keys)), "no window emitted twice"
    assert final == expected, "restarted run equals the uninterrupted run"

    reported = [json.loads(p["sources"][0]["endOffset"]) for p in resumed.recentProgress]
    assert max(o["lateFiles"] for o in reported) == 1
    assert max(o["lateRows"] for o in reported) == late_rows
