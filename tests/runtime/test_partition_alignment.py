"""Catching up on a multi-partition topic without watermark skew (issue: 65% of the rows of
a 3-partition backlog were dropped as late).

Flights of four origins, one origin per partition, one partition three times as dense as the
others, produced with their arrival time as the Kafka record timestamp. Most arrive within two
minutes of their event; a few arrive 10-12 hours late. The job counts flights per 10-minute
window and origin with a 10-minute watermark and keeps late rows in a table. Read as one
arrival order (one partition, or four partitions aligned by record time), a row is late
exactly when it arrived hours late: a batch spans about three hours of arrivals and Spark
judges a batch's rows by the watermark the previous batch ran under (the largest event time
two batches back, less 10 minutes), so that watermark never passes a row that arrived within
two minutes, and always passes one that arrived ten hours late among later arrivals. So
the ground truth of every run is known in advance:

- the late table holds exactly the flights that arrived late, once each;
- the output holds, per window and origin, the count of the other flights.

The same records on one partition give the same late rows. Read the old way (each partition
at its fair share of ``maxOffsetsPerTrigger``, ``alignPartitions = false``) the sparse
partitions run hours ahead and the dense one's rows fall behind the watermark.
"""

from __future__ import annotations

import random
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from runtime_helpers import uid

from kappaplus.config import config_from_dict
from kappaplus.jobs import InputSpec, Job, OutputSpec
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2024, 5, 1, tzinfo=UTC)
LIMIT = 400  # maxOffsetsPerTrigger: a batch spans about 3.3 hours of arrivals
WINDOW = 600  # seconds
ORIGINS = ("JFK", "SFO", "ORD", "SEA")  # JFK three times as dense


def counts(inputs: dict[str, Any], params: Any) -> dict[str, Any]:
    flights = inputs["flights"]
    per_window = flights.groupBy(F.window("event_time", params.window), "origin").count()
    return {"counts": per_window.select(F.col("window.start").alias("start"), "origin", "count")}


JOB = Job(
    name="flight-counts",
    inputs=[
        InputSpec("flights", "flight_id string, origin string, event_time timestamp", "event_time")
    ],
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


def flights(seed: int = 3) -> list[dict[str, Any]]:
    """One day of flights: (flight_id, origin, event_time, arrival_time, late)."""
    rng = random.Random(seed)
    out = []
    for origin in ORIGINS:
        every = 60 if origin == "JFK" else 180
        t = 0.0
        while t < 24 * 3600:
            t += rng.expovariate(1 / every)
            event = START + timedelta(seconds=t)
            # late ones arrive 6-9 hours late, among the others (not after the last of them,
            # where which batch they share is up to batch boundaries)
            late = t < 12 * 3600 and rng.random() < 0.03
            delay = rng.uniform(10 * 3600, 12 * 3600) if late else rng.uniform(0, 120)
            out.append(
                {
                    "flight_id": f"{origin}-{len(out)}",
                    "origin": origin,
                    "event_time": event,
                    "arrival_time": event + timedelta(seconds=delay),
                    "late": late,
                }
            )
    return out


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]], partitions: int) -> None:
    """The flights in arrival order, stamped with their arrival time; one origin per
    partition (or all in partition 0); then flush records a day later in every partition
    (they close the last windows and are left out of the comparison)."""
    import json

    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    ordered = sorted(rows, key=lambda r: (r["arrival_time"], r["flight_id"]))
    last = ordered[-1]["arrival_time"]
    flush = [
        {
            "flight_id": f"flush-{i}",
            "origin": ORIGINS[i % len(ORIGINS)],
            "event_time": last + timedelta(days=1, seconds=i),
            "arrival_time": last + timedelta(days=1, seconds=i),
        }
        for i in range(2 * LIMIT)
    ]
    for row in ordered + flush:
        value = {
            "flight_id": row["flight_id"],
            "origin": row["origin"],
            "event_time": row["event_time"].isoformat(),
        }
        partition = ORIGINS.index(row["origin"]) if partitions > 1 else 0
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            partition=partition,
            timestamp=int(row["arrival_time"].timestamp() * 1000),
        )
        producer.poll(0)
    assert producer.flush(60) == 0


def run_stream(
    spark: Any, bootstrap: str, topic: str, scratch: Path, *, align: bool
) -> tuple[Counter[tuple[int, str]], set[str], int, int]:
    """Run the job in stream mode over the whole topic; returns the output's counts per
    (window start, origin) before the flush, the late table's flight ids, its rows, and
    Spark's count of rows dropped by the watermark."""
    out, late = f"flight_counts_{uid()}", f"flight_counts_late_{uid()}"
    config = config_from_dict(
        {
            "job": "tests:JOB",
            "checkpoint_dir": str(scratch / f"checkpoints-{uid()}"),
            "inputs": {
                "flights": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": bootstrap,
                        "starting_offsets": "earliest",
                        "maxOffsetsPerTrigger": LIMIT,
                        "alignPartitions": align,
                    }
                }
            },
            "outputs": {"counts": {"hive": {"table": out}, "late": {"table": late}}},
        }
    )
    result = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    flushed = START + timedelta(days=1, hours=12)
    rows = spark.table(out).where(F.col("start") < F.lit(flushed)).collect()
    produced = Counter({(int(r.start.timestamp()), r.origin): r["count"] for r in rows})
    assert len(rows) == len(produced), "each window once"
    ids = [r.flight_id for r in spark.table(late).select("flight_id").collect()]
    assert len(ids) == len(set(ids)), "each late row once"
    # the run's late figure counts rows (Spark's own counts groups after partial aggregation)
    stats = result.tracker.stats["counts"]
    assert result.rows_dropped_late == len(ids) and stats.late_counted == "rows"
    assert result.record.rows_dropped_late == len(ids)
    return produced, set(ids), len(ids), stats.spark_dropped_late


def truth(rows: list[dict[str, Any]]) -> Counter[tuple[int, str]]:
    out: Counter[tuple[int, str]] = Counter()
    for row in rows:
        seconds = int(row["event_time"].timestamp())
        out[(seconds - seconds % WINDOW, row["origin"])] += 1
    return out


def flights_on_topic(
    bootstrap: str, new_topic: Any, partitions: int
) -> tuple[list[dict[str, Any]], set[str], str]:
    """The flights, the ids of the late ones, and a new topic of ``partitions`` holding them."""
    rows = flights()
    topic = new_topic(partitions=partitions, prefix=f"flights{partitions}")
    produce(bootstrap, topic, rows, partitions=partitions)
    return rows, {r["flight_id"] for r in rows if r["late"]}, topic


@pytest.mark.timeout(900)
def test_a_backlog_on_four_partitions_is_read_as_one_arrival_order(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    rows, late_ids, four = flights_on_topic(kafka_bootstrap, new_topic, partitions=4)
    on_time = truth([r for r in rows if not r["late"]])
    assert 20 <= len(late_ids) <= 100 and sum(on_time.values()) > 2500

    produced, late, late_rows, _ = run_stream(spark, kafka_bootstrap, four, scratch, align=True)
    assert late == late_ids
    assert produced == on_time

    # read the old way, the dense partition falls behind the watermark: most of it late
    _, skewed, skewed_rows, groups = run_stream(spark, kafka_bootstrap, four, scratch, align=False)
    assert late_ids < skewed and skewed_rows > 10 * late_rows
    # Spark's figure counts one per window, origin and batch: far fewer than the late rows
    assert groups < skewed_rows
    print(
        f"late rows: aligned 4 partitions {late_rows}, "
        f"not aligned {skewed_rows} of {len(rows)} (Spark's figure {groups})"
    )


# slow: a third stream run (~20 s); the 4-partition test above checks the same truth
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_same_records_on_one_partition_give_the_same_late_rows(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    rows, late_ids, one = flights_on_topic(kafka_bootstrap, new_topic, partitions=1)
    produced, late, _, _ = run_stream(spark, kafka_bootstrap, one, scratch, align=True)
    assert late == late_ids
    assert produced == truth([r for r in rows if not r["late"]])


@pytest.mark.timeout(900)
def test_a_bootstraps_kafka_phase_is_aligned_too(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """The lake (event partitions) up to a cutoff six hours in, then the 4-partition topic
    from the offsets of ``cutoff - 1 hour``: the lake owns every event before the cutoff (also
    those arriving late), Kafka the rest, read aligned. Late are exactly the flights after the
    cutoff that arrived hours late; the output is every other flight."""
    from kappaplus.examples.generate import write_table

    rows = flights()
    cutoff = START + timedelta(hours=6)
    late_ids = {r["flight_id"] for r in rows if r["late"] and r["event_time"] >= cutoff}
    expected = truth([r for r in rows if r["flight_id"] not in late_ids])
    assert len(late_ids) >= 10

    table, out = f"flights_lake_{uid()}", f"flight_counts_{uid()}"
    lake = [r for r in rows if r["event_time"] < cutoff + timedelta(hours=2)]
    write_table(spark, table, lake, "flight_id string, origin string, event_time timestamp")
    topic = new_topic(partitions=4, prefix="flights-boot")
    produce(kafka_bootstrap, topic, rows, partitions=4)
    config = config_from_dict(
        {
            "job": "tests:JOB",
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "flights": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": LIMIT,
                    },
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "partition_format": "dt=%Y-%m-%d/hr=%H",
                    },
                }
            },
            "outputs": {"counts": {"hive": {"table": out}}},
        }
    )
    result = run_job(
        spark,
        JOB,
        config,
        RunOptions(
            "bootstrap",
            start=START.isoformat(),
            cutoff=cutoff.isoformat(),
            lateness="1 hour",
            trigger="available-now",
        ),
    )
    assert result.status == "finished"
    flushed = START + timedelta(days=1, hours=12)
    got = spark.table(out).where(F.col("start") < F.lit(flushed)).collect()
    produced = Counter({(int(r.start.timestamp()), r.origin): r["count"] for r in got})
    assert len(got) == len(produced), "each window once"
    assert produced == expected
