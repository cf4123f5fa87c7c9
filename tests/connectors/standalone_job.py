"""A Hive streaming job run against a Spark standalone cluster, in its own process.

    python tests/connectors/standalone_job.py --master spark://127.0.0.1:7077 --home /tmp/x

Used by ``test_hive_standalone.py``: the pytest process already holds a local-mode
SparkSession, so the cluster job needs a process of its own. It writes a partitioned
parquet table of generated events, streams it through ``read_hive_stream`` with a 1-hour
tumbling count (``Trigger.AvailableNow``, memory sink), computes the same aggregation as a
batch query and prints one JSON line (prefixed ``RESULT``) with the comparison and what the
cluster looked like (master URL, executors, the Python the executors ran).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from hive_tables import BASE, DAY, events, iso, write_event_time_table  # noqa: E402
from pyspark.sql import DataFrame, SparkSession  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from kappaplus.connectors.hive import read_hive_stream  # noqa: E402
from kappaplus.session import create_session, hive_conf  # noqa: E402

HOUR = 3600
TABLE = "standalone_events"


def executor_count(spark: SparkSession) -> int:
    """Executors registered with the driver, the driver itself not counted."""
    return int(spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size()) - 1  # type: ignore[union-attr]


def wait_for_executors(spark: SparkSession, timeout: float) -> int:
    deadline = time.monotonic() + timeout
    while (count := executor_count(spark)) < 1 and time.monotonic() < deadline:
        time.sleep(0.5)
    return count


def executor_pythons(spark: SparkSession) -> list[dict[str, str]]:
    """The interpreter (and executor id) of the Python workers that ran tasks."""

    def probe(_: Iterator[int]) -> Iterator[dict[str, str]]:
        yield {
            "python": sys.executable,
            "executor_cwd": os.getcwd(),
            "host": socket.gethostname(),
            "pid": str(os.getpid()),
        }

    return spark.sparkContext.parallelize(range(2), 2).mapPartitions(probe).collect()


def data_batch(progress: dict) -> bool:
    """A micro-batch that read an event-time slice (not an end-of-input marker batch)."""
    offset = json.loads(progress["sources"][0]["endOffset"] or "{}")
    return offset.get("phase") == "data" and offset.get("lo") != offset.get("hi")


def window_counts(df: DataFrame) -> DataFrame:
    return df.groupBy(F.window("ts", "1 hour"), "key").agg(
        F.count("*").alias("n"), F.sum("id").alias("ids")
    )


def rows_of(df: DataFrame) -> list[tuple[int, int, int, int, int]]:
    return sorted(
        (int(r.s), int(r.e), int(r.key), int(r.n), int(r.ids))
        for r in df.select(
            F.col("window.start").cast("long").alias("s"),
            F.col("window.end").cast("long").alias("e"),
            "key",
            "n",
            "ids",
        ).collect()
    )


def run(master: str, home: Path, rows: int, days: float) -> dict:
    started = time.monotonic()
    spark = create_session(
        "kappaplus-standalone-test",
        master=master,
        home=home,
        conf={
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.executor.memory": "512m",
            "spark.cores.max": "1",
            "spark.driver.memory": "1g",
            "spark.sql.shuffle.partitions": "2",
            # on a cluster create_session sets none of its local defaults: the job names the
            # executors' interpreter and its catalog, as a production job's settings would
            "spark.pyspark.python": sys.executable,
            "spark.driver.extraJavaOptions": f"-Dderby.system.home={home}",
            **hive_conf(home),
        },
    )
    try:
        phases = {"session": time.monotonic() - started}
        executors_at_start = wait_for_executors(spark, 90)
        pythons = executor_pythons(spark)
        phases["executors"] = time.monotonic() - started
        write_event_time_table(spark, TABLE, events(spark, rows, days, seed=11), 2)
        phases["table"] = time.monotonic() - started

        start, end = BASE + 2 * HOUR + 900, BASE + DAY + 14 * HOUR
        stream = read_hive_stream(
            spark,
            TABLE,
            event_time_column="ts",
            start=iso(start),
            end=iso(end),
            max_event_time_per_trigger="8 hours",
            watermark_delay="15 minutes",
            manifestDir=str(home / "manifests"),
        )
        query = (
            window_counts(stream)
            .writeStream.format("memory")
            .queryName("standalone_out")
            .outputMode("append")
            .option("checkpointLocation", str(home / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()
        progress = list(query.recentProgress)
        phases["stream"] = time.monotonic() - started
        got = rows_of(spark.table("standalone_out"))

        inside = spark.table(TABLE).where(
            (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
            & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        )
        truth = rows_of(
            window_counts(inside).where(F.col("window.end") <= F.lit(iso(end)).cast("timestamp"))
        )
        mismatches = len(set(got) ^ set(truth)) + abs(len(got) - len(set(got)))
        return {
            "master": spark.sparkContext.master,
            "executors": executor_count(spark),
            "executors_at_start": executors_at_start,
            "driver_python": sys.executable,
            "executor_pythons": sorted({p["python"] for p in pythons}),
            "executor_cwds": sorted({p["executor_cwd"] for p in pythons}),
            "windows": len(truth),
            "rows_compared": len(got),
            "mismatches": mismatches,
            "batches": len(progress),
            "data_batches": sum(1 for p in progress if data_batch(p)),
            "input_rows": sum(p["numInputRows"] for p in progress),
            "table_rows": spark.table(TABLE).count(),
            "phases": {k: round(v, 1) for k, v in phases.items()},
            "seconds": round(time.monotonic() - started, 1),
        }
    finally:
        spark.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--master", required=True)
    parser.add_argument("--home", required=True, type=Path)
    parser.add_argument("--rows", type=int, default=4000)
    parser.add_argument("--days", type=float, default=2)
    args = parser.parse_args()
    result = run(args.master, args.home, args.rows, args.days)
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
