"""The fixed cost of one stateful micro-batch of a backfill, per setting, side by side.

    .venv/bin/python bench/bench_microbatch.py [--rows 24000] [--hours 24] [--rounds 2]

Writes a small event-time table (``--rows`` events over ``--hours`` hourly partitions), then
runs the same windowed aggregation over ``kappa_hive`` with fixed 1-hour slices (one
micro-batch per hour, so the per-batch cost dominates) under each setting, alternating
the settings for ``--rounds`` rounds in one process:

- state store: Spark's default (HDFS-backed, in-memory maps) or RocksDB with changelog
  checkpointing;
- ``spark.sql.shuffle.partitions`` (= state store partitions): 4 (the session's old
  default) or the number of local cores.

Prints per setting the median wall time of a whole run, the median ``durationMs`` of a data
micro-batch and of an end-of-input marker batch (one row: the pure fixed cost), split by
phase, and the time from ``start()`` to the end of the first micro-batch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TABLE = "bench_microbatch_events"
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
HDFS = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def settings(cores: int) -> dict[str, dict[str, str]]:
    changelog = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
    return {
        "hdfs, 4 partitions": {"provider": HDFS, "partitions": "4"},
        f"hdfs, {cores} partitions": {"provider": HDFS, "partitions": str(cores)},
        f"rocksdb+changelog, {cores} partitions": {
            "provider": ROCKSDB,
            "partitions": str(cores),
            changelog: "true",
        },
    }


def write_table(spark, rows: int, hours: int) -> None:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    (
        spark.range(0, rows)
        .select(
            "id",
            (F.col("id") % 50).cast("int").alias("key"),
            (F.col("id") * 31 % 1000).alias("amount"),
            (F.lit(BASE) + (F.rand(3) * hours * 3600).cast("long")).cast("timestamp").alias("ts"),
        )
        .withColumn("dt", F.date_format("ts", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("ts", "HH"))
        .repartition(hours, "dt", "hr")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(TABLE)
    )


def run_once(spark, conf: dict[str, str], hours: int, work: Path, name: str) -> dict:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    from kappaplus.connectors.hive import read_hive_stream

    spark.conf.set("spark.sql.streaming.stateStore.providerClass", conf["provider"])
    spark.conf.set("spark.sql.shuffle.partitions", conf["partitions"])
    for key, value in conf.items():
        if key.startswith("spark."):
            spark.conf.set(key, value)
    shutil.rmtree(work / name, ignore_errors=True)
    stream = read_hive_stream(
        spark,
        TABLE,
        event_time_column="ts",
        start=iso(BASE),
        end=iso(BASE + hours * 3600),
        max_event_time_per_trigger="1 hour",
        watermark_delay="10 minutes",
        columns="ts,key,amount",
        manifestDir=str(work / name / "manifests"),
    )
    counts = stream.groupBy(F.window("ts", "1 hour"), "key").agg(
        F.count("*").alias("n"), F.sum("amount").alias("total")
    )
    began = time.perf_counter()
    query = (
        counts.writeStream.format("noop")
        .outputMode("append")
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    first = None
    while query.isActive and first is None:
        if query.lastProgress is not None:
            first = time.perf_counter() - began
        time.sleep(0.05)
    query.awaitTermination()
    wall = time.perf_counter() - began
    progress = list(query.recentProgress)
    data = [p for p in progress if json.loads(p["sources"][0]["endOffset"])["phase"] == "data"]
    markers = [p for p in progress if json.loads(p["sources"][0]["endOffset"])["phase"] == "end"]
    spark.conf.unset("spark.sql.streaming.stateStore.providerClass")
    return {"wall": wall, "first": first or wall, "data": data, "markers": markers}


def median_phase(progress: list[dict], phase: str) -> float:
    values = [p["durationMs"].get(phase, 0) for p in progress]
    return statistics.median(values) / 1000 if values else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=24_000)
    parser.add_argument("--hours", type=int, default=24)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args()

    from kappaplus.session import create_session, stop_session

    work = Path(tempfile.mkdtemp(prefix="bench-microbatch-"))
    spark = create_session(
        "bench-microbatch",
        master=args.master,
        home=work / "home",
        conf={"spark.ui.enabled": "false"},
    )
    cores = spark.sparkContext.defaultParallelism
    write_table(spark, args.rows, args.hours)
    runs: dict[str, list[dict]] = {name: [] for name in settings(cores)}
    run_once(spark, settings(cores)["hdfs, 4 partitions"], 3, work, "warmup")
    for r in range(args.rounds):
        for name, conf in settings(cores).items():
            runs[name].append(
                run_once(
                    spark, conf, args.hours, work, f"r{r}-{len(runs[name])}-{hash(name) & 0xFFFF}"
                )
            )
    stop_session(spark)
    shutil.rmtree(work, ignore_errors=True)

    phases = (
        "triggerExecution",
        "addBatch",
        "walCommit",
        "commitOffsets",
        "latestOffset",
        "queryPlanning",
    )
    print(
        f"{args.rows} rows over {args.hours} hourly slices, master {args.master}, "
        f"{args.rounds} rounds"
    )
    print(
        "| setting | run s | first batch s | data batch s | marker batch s | marker: "
        + " / ".join(phases[1:])
        + " |"
    )
    print("|---|---:|---:|---:|---:|---|")
    for name, items in runs.items():
        data = [p for i in items for p in i["data"]]
        markers = [p for i in items for p in i["markers"]]
        parts = " / ".join(f"{median_phase(markers, ph):.2f}" for ph in phases[1:])
        print(
            f"| {name} | {statistics.median(i['wall'] for i in items):.1f} "
            f"| {statistics.median(i['first'] for i in items):.1f} "
            f"| {median_phase(data, 'triggerExecution'):.2f} "
            f"| {median_phase(markers, 'triggerExecution'):.2f} | {parts} |"
        )


if __name__ == "__main__":
    main()
