"""Following a table as partitions land (processing-time trigger, no end bound), and ORC."""

from __future__ import annotations

import json
import time
from pathlib import Path

from hive_tables import BASE, HOUR_S, events, iso, write_event_time_table
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.hive import read_hive_stream


def wait_for(predicate, seconds: float = 180.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.5)
    return False


def test_follows_new_partitions_without_an_end_bound(spark: SparkSession, scratch: Path):
    table = "hive_follow_events"
    first = events(spark, 1_200, 0.25, seed=21)  # hours 0-5
    write_event_time_table(spark, table, first, files_per_partition=1)
    stream = read_hive_stream(
        spark,
        table,
        event_time_column="ts",
        start=iso(BASE),
        max_event_time_per_trigger="2 hours",
        manifestDir=str(scratch / "m"),
    )
    query = (
        stream.writeStream.format("memory")
        .queryName("follow_out")
        .option("checkpointLocation", str(scratch / "ck"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        assert wait_for(lambda: spark.table("follow_out").count() == 1_200)
        # The next six hours land as new partitions while the query runs.
        later = events(spark, 1_000, 0.25, seed=22, base=BASE + 6 * HOUR_S).withColumn(
            "id", F.col("id") + 100_000
        )
        later.withColumn("dt", F.date_format("ts", "yyyy-MM-dd")).withColumn(
            "hr", F.date_format("ts", "HH")
        ).write.insertInto(table)
        assert wait_for(lambda: spark.table("follow_out").count() == 2_200)
    finally:
        query.stop()
    ids = [r.id for r in spark.table("follow_out").select("id").collect()]
    assert len(ids) == len(set(ids)) == 2_200
    ranges = [json.loads(p["sources"][0]["endOffset"]) for p in query.recentProgress]
    his = [r["hi"] for r in ranges if r["lo"] != r["hi"]]
    assert his == sorted(his), "slices only move forward"


def test_orc_table_equals_batch(spark: SparkSession, scratch: Path):
    spark.sql("DROP TABLE IF EXISTS hive_orc_events")
    rows = events(spark, 2_000, 0.5, seed=23)
    rows.withColumn("dt", F.date_format("ts", "yyyy-MM-dd")).write.partitionBy("dt").format(
        "orc"
    ).saveAsTable("hive_orc_events")
    end = BASE + 12 * HOUR_S
    stream = read_hive_stream(
        spark,
        "hive_orc_events",
        event_time_column="ts",
        start=iso(BASE),
        end=iso(end),
        max_event_time_per_trigger="4 hours",
        watermark_delay="5 minutes",
        manifestDir=str(scratch / "m"),
    )
    query = (
        stream.groupBy(F.window("ts", "1 hour"), "key")
        .count()
        .writeStream.format("memory")
        .queryName("orc_out")
        .outputMode("append")
        .option("checkpointLocation", str(scratch / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    truth = (
        spark.table("hive_orc_events")
        .where(F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        .groupBy(F.window("ts", "1 hour"), "key")
        .count()
    )
    got = spark.table("orc_out")
    assert got.count() == truth.count() > 100
    assert got.exceptAll(truth).count() == 0 and truth.exceptAll(got).count() == 0
