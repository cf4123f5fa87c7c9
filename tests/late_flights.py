"""A windowed job whose stream keeps its late rows, over flights where several late rows of
one origin and window arrive together (issue 24 item 2): Spark's dropped count (groups after
partial aggregation) is then below the late rows. Shared by the reconcile and promote tests.

Flights per 10-minute window and origin, 10-minute watermark, one Kafka partition read 200
records per micro-batch; the same flights are also in a Hive table (``dt``/``hr``) for the
backfill."""

from __future__ import annotations

import json
import random
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kappaplus.jobs import InputSpec, Job, OutputSpec

START = datetime(2024, 6, 1, tzinfo=UTC)
DAY_END = START + timedelta(days=1)
LIMIT = 200  # maxOffsetsPerTrigger
WINDOW = 600  # seconds
ORIGINS = ("JFK", "SFO", "ORD")
SCHEMA = "flight_id string, origin string, event_time timestamp"


def counts(inputs: dict[str, Any], params: Any) -> dict[str, Any]:
    per_window = inputs["flights"].groupBy(F.window("event_time", params.window), "origin").count()
    return {
        "counts": per_window.select(
            F.col("window.start").alias("start"),
            F.col("window.end").alias("end"),
            "origin",
            "count",
        )
    }


JOB = Job(
    name="late-flight-counts",
    inputs=[InputSpec("flights", SCHEMA, "event_time")],
    outputs=[
        OutputSpec(
            "counts", output_mode="append", event_time_column="start", late_by="window:window"
        )
    ],
    transform=counts,
    watermark_delay="10 minutes",
    params={"window": "10 minutes"},
    window_params=["window"],
)


def flights(seed: int = 5) -> list[dict[str, Any]]:
    """Four hours of flights, two a minute or so per origin, arriving within two minutes;
    plus late groups: in three early windows, 3, 2 and 1 flights of one origin that arrive
    together hours late (so one micro-batch holds each group)."""
    rng = random.Random(seed)
    rows: list[dict[str, Any]] = []
    for origin in ORIGINS:
        t = 0.0
        while t < 4 * 3600:
            t += rng.expovariate(1 / 40)
            event = START + timedelta(seconds=t)
            rows.append(
                _flight(
                    len(rows), origin, event, event + timedelta(seconds=rng.uniform(0, 120)), False
                )
            )
    groups = [("JFK", 1, 3), ("SFO", 5, 2), ("ORD", 9, 1)]  # (origin, window index, rows)
    for origin, window, n in groups:
        arrival = START + timedelta(hours=3, minutes=window)
        for i in range(n):
            event = START + timedelta(seconds=window * WINDOW + 60 * i + 7)
            rows.append(_flight(len(rows), origin, event, arrival, True))
    return rows


def _flight(i: int, origin: str, event: datetime, arrival: datetime, late: bool) -> dict[str, Any]:
    return {
        "flight_id": f"{origin}-{i}",
        "origin": origin,
        "event_time": event,
        "arrival_time": arrival,
        "late": late,
    }


FLUSH_AT = DAY_END + timedelta(hours=1)


def produce(
    bootstrap: str, topic: str, rows: list[dict[str, Any]], flush_at: datetime = FLUSH_AT
) -> None:
    """The flights in arrival order on partition 0, then ``2 * LIMIT`` flush records of
    JFK from ``flush_at`` on, one a second (they close every window of the day, are outside
    the reconciled range and stay in one open window themselves)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    ordered = sorted(rows, key=lambda r: (r["arrival_time"], r["flight_id"]))
    flush = [
        _flight(i, "JFK", flush_at + timedelta(seconds=i), flush_at, False)
        for i in range(2 * LIMIT)
    ]
    for row in ordered + flush:
        value = {
            "flight_id": row["flight_id"],
            "origin": row["origin"],
            "event_time": row["event_time"].isoformat(),
        }
        producer.produce(topic, value=json.dumps(value).encode(), partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0


def write_lake(spark: SparkSession, table: str, rows: list[dict[str, Any]]) -> None:
    """The flights as a Hive table partitioned by event ``dt``/``hr`` (the backfill's input)."""
    frame = spark.createDataFrame(
        [(r["flight_id"], r["origin"], r["event_time"]) for r in rows], SCHEMA
    )
    (
        frame.withColumn("dt", F.date_format("event_time", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("event_time", "HH"))
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )


def config_toml(
    directory: Path, *, topic: str, bootstrap: str, lake: str, out: str, late: str
) -> Path:
    """The job config as a TOML file (``kappa reconcile`` and ``kappa promote`` read it)."""
    text = f"""
job = "late_flights:JOB"
checkpoint_dir = "{directory / "checkpoints"}"

[inputs.flights.kafka]
topic = "{topic}"
bootstrap_servers = "{bootstrap}"
starting_offsets = "earliest"
maxOffsetsPerTrigger = {LIMIT}

[inputs.flights.hive]
table = "{lake}"
event_time_column = "event_time"

[outputs.counts.hive]
table = "{out}"

[outputs.counts.late]
table = "{late}"

[outputs.counts.reconcile]
key = ["start", "origin"]
window_end = "end"
measure = "count"

[mode.backfill.inputs.flights.hive]
maxEventTimePerTrigger = "2 hours"
"""
    file = directory / f"late_flights_{uuid.uuid4().hex[:6]}.toml"
    file.write_text(text)
    return file


def table_counts(spark: SparkSession, table: str) -> dict[tuple[int, str], int]:
    """``(window start seconds, origin) -> count`` of an output table (one row per window)."""
    spark.catalog.refreshTable(table)
    rows = spark.table(table).select(F.unix_seconds("start").alias("s"), "origin", "count")
    out: dict[tuple[int, str], int] = {}
    for r in rows.collect():
        assert (r.s, r.origin) not in out, f"window {(r.s, r.origin)} twice in {table}"
        out[(r.s, r.origin)] = r["count"]
    return out


def truth(rows: list[dict[str, Any]]) -> dict[tuple[int, str], int]:
    """Flights per (window start, origin), counted in plain Python."""
    out: dict[tuple[int, str], int] = {}
    for r in rows:
        key = (int(r["event_time"].timestamp()) // WINDOW * WINDOW, r["origin"])
        out[key] = out.get(key, 0) + 1
    return out


def stream_then_backfill(
    spark: SparkSession, bootstrap: str, topic: str, directory: Path
) -> tuple[Path, str, str, list[dict[str, Any]], Any, Any]:
    """The flights produced and archived, the job run as a stream (late rows kept) and as
    a backfill of the day; returns the config file, the output and late tables, the
    flights and both runs' results."""
    from kappaplus.config import load_config
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job

    rows = flights()
    tag = uuid.uuid4().hex[:8]
    lake, out, late = f"flights_{tag}", f"flight_counts_{tag}", f"late_{tag}"
    write_lake(spark, lake, rows)
    produce(bootstrap, topic, rows)
    file = config_toml(directory, topic=topic, bootstrap=bootstrap, lake=lake, out=out, late=late)
    config = load_config(file)
    stream = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert stream.status == "finished"
    backfill = run_job(
        spark, JOB, config, RunOptions("backfill", START.isoformat(), DAY_END.isoformat())
    )
    assert backfill.status == "finished"
    return file, out, late, rows, stream, backfill
