"""Catching up is not paced by the production trigger (issue 24, item 3).

A stream behind its input by thousands of records, ``maxOffsetsPerTrigger`` small and a
processing-time trigger of ONE HOUR: paced by the trigger it would read one batch and then
wait an hour, so a run stopped by ``--until-idle`` would hold a tenth of the input. Caught
up, it runs every batch back to back (each within the per-trigger limit, partitions aligned)
and only then switches to the hour-long trigger on the same checkpoints. The runs are
deterministic without timing assertions: the run's own batch counts say how many batches
ran before the first processing-time wait, and the output must equal the ground truth
(counts per window computed by hand) exactly once: no window twice, no record lost, none
counted twice, also across a restart after an "outage" (a second run resuming the
checkpoint after more records arrived) and across a bootstrap's switch from lake to Kafka.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from runtime_helpers import uid

from kappaplus.config import config_from_dict
from kappaplus.jobs import InputSpec, Job, OutputSpec
from kappaplus.runtime.catch_up import LIVE
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import RunResult, run_job

START = datetime(2024, 6, 1, tzinfo=UTC)
LIMIT = 150  # maxOffsetsPerTrigger
WINDOW = 600  # seconds
ORIGINS = ("JFK", "SFO", "ORD", "SEA")
HOUR_TRIGGER = "1 hour"


def counts(inputs: dict[str, Any], params: Any) -> dict[str, Any]:
    flights = inputs["flights"]
    per_window = flights.groupBy(F.window("event_time", "10 minutes"), "origin").count()
    return {"counts": per_window.select(F.col("window.start").alias("start"), "origin", "count")}


JOB = Job(
    name="catch-up-counts",
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


def flights(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` flights from the ``first``-th on, one every 20 s, origins in turn."""
    return [
        {
            "flight_id": f"f-{i}",
            "origin": ORIGINS[i % len(ORIGINS)],
            "event_time": START + timedelta(seconds=20 * i),
        }
        for i in range(first, first + count)
    ]


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]]) -> None:
    """One origin per partition, stamped with the event time."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for row in rows:
        value = {**row, "event_time": row["event_time"].isoformat()}
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            partition=ORIGINS.index(row["origin"]),
            timestamp=int(row["event_time"].timestamp() * 1000),
        )
        producer.poll(0)
    assert producer.flush(60) == 0


def truth(rows: list[dict[str, Any]]) -> Counter[tuple[int, str]]:
    out: Counter[tuple[int, str]] = Counter()
    for row in rows:
        seconds = int(row["event_time"].timestamp())
        out[(seconds - seconds % WINDOW, row["origin"])] += 1
    return out


def config(topic: str, bootstrap: str, scratch: Path, out: str, late: str, **extra: Any) -> Any:
    return config_from_dict(
        {
            "job": "tests:JOB",
            "checkpoint_dir": str(scratch / "checkpoints"),
            "trigger_interval": HOUR_TRIGGER,
            "inputs": {
                "flights": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": bootstrap,
                        "starting_offsets": "earliest",
                        "maxOffsetsPerTrigger": LIMIT,
                    },
                    **extra,
                }
            },
            "outputs": {"counts": {"hive": {"table": out}, "late": {"table": late}}},
        }
    )


def output(spark: Any, table: str, before: datetime) -> Counter[tuple[int, str]]:
    rows = spark.table(table).where(F.col("start") < F.lit(before)).collect()
    got = Counter({(int(r.start.timestamp()), r.origin): r["count"] for r in rows})
    assert len(rows) == len(got), "each window once"
    return got


def assert_caught_up(result: RunResult, records: int) -> None:
    """Every batch but the trigger's first one ran while catching up, each within the
    per-trigger limit; the run ended on its trigger with nothing left behind."""
    stats = result.tracker.stats["counts"]
    assert result.status == "finished"
    assert result.tracker.phase == LIVE
    assert stats.rows == records
    assert stats.catch_up_batches >= records // LIMIT  # back to back, no hour between them
    assert stats.batches - stats.catch_up_batches <= 1  # the trigger's first, immediate batch
    assert all(batch.input_rows <= LIMIT for batch in stats.history)
    assert sum(stats.behind.values()) == 0
    assert result.record.outputs["counts"]["catch_up_batches"] == stats.catch_up_batches
    assert result.record.trigger == HOUR_TRIGGER


@pytest.mark.slow  # about 2 minutes
@pytest.mark.timeout(900)
def test_a_stream_behind_catches_up_back_to_back_then_runs_on_its_trigger(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    first, second = flights(0, 1200), flights(1200, 1200)
    # a day later on every partition: closes the last windows, left out of the comparison
    flush = [
        {**row, "event_time": row["event_time"] + timedelta(days=1)} for row in flights(2400, 8)
    ]
    topic = new_topic(partitions=4, prefix="catch-up")
    out, late = f"catch_up_counts_{uid()}", f"catch_up_late_{uid()}"
    job_config = config(topic, kafka_bootstrap, scratch, out, late)
    # paced by the hour-long trigger, --until-idle would never see the run idle (its last
    # trigger found data): --timeout stops it, and the output misses most of the input
    options = {"until_idle": 4.0, "timeout": 300.0}

    produce(kafka_bootstrap, topic, first)
    result = run_job(spark, JOB, job_config, RunOptions("stream", **options))
    assert_caught_up(result, len(first))

    # an outage: more records arrive; the same command resumes the same checkpoint
    produce(kafka_bootstrap, topic, second + flush)
    again = run_job(spark, JOB, job_config, RunOptions("stream", **options))
    assert_caught_up(again, len(second) + len(flush))

    # in event-time order and aligned: nothing late (the late table is created by a late row)
    assert result.rows_dropped_late == again.rows_dropped_late == 0
    assert not spark.catalog.tableExists(late)
    assert output(spark, out, START + timedelta(hours=23)) == truth(first + second)


@pytest.mark.slow  # about 2 minutes
@pytest.mark.timeout(900)
def test_without_catch_up_the_trigger_paces_every_batch(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """The contrast (``--no-catch-up``, the behaviour before): one batch, then the hour
    (``--until-idle`` cannot end it: the last trigger found data; ``--timeout`` does)."""
    topic = new_topic(partitions=4, prefix="paced")
    produce(kafka_bootstrap, topic, flights(0, 1000))
    out, late = f"paced_counts_{uid()}", f"paced_late_{uid()}"
    result = run_job(
        spark,
        JOB,
        config(topic, kafka_bootstrap, scratch, out, late),
        RunOptions("stream", until_idle=4.0, timeout=45.0, catch_up=False),
    )
    stats = result.tracker.stats["counts"]
    assert result.record.stopped_by == "timeout" and result.tracker.phase is None
    assert stats.batches == 1 and stats.rows <= LIMIT and stats.catch_up_batches == 0
    assert sum(stats.behind.values()) == 1000 - stats.rows  # the backlog, shown


@pytest.mark.timeout(900)
def test_a_bootstrap_catches_up_through_lake_and_kafka_then_runs_on_its_trigger(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """The lake owns the first four hours, Kafka (read from ``cutoff - 1 hour``) the rest:
    with the hour-long trigger, the lake slices and the Kafka phase's batches run back to
    back, the Kafka phase within ``maxOffsetsPerTrigger``; the output is every flight once."""
    from kappaplus.examples.generate import write_table

    rows = flights(0, 2400)
    flush = [
        {**row, "event_time": row["event_time"] + timedelta(days=1)} for row in flights(2400, 8)
    ]
    cutoff = START + timedelta(hours=4)
    table, out, late = f"catch_up_lake_{uid()}", f"catch_up_boot_{uid()}", f"boot_late_{uid()}"
    lake = [r for r in rows if r["event_time"] < cutoff + timedelta(hours=2)]
    write_table(spark, table, lake, "flight_id string, origin string, event_time timestamp")
    topic = new_topic(partitions=4, prefix="catch-up-boot")
    produce(kafka_bootstrap, topic, rows + flush)
    hive = {
        "hive": {
            "table": table,
            "event_time_column": "event_time",
            "partition_format": "dt=%Y-%m-%d/hr=%H",
        }
    }
    result = run_job(
        spark,
        JOB,
        config(topic, kafka_bootstrap, scratch, out, late, **hive),
        RunOptions(
            "bootstrap",
            start=START.isoformat(),
            cutoff=cutoff.isoformat(),
            lateness="1 hour",
            until_idle=4.0,
            timeout=300.0,
        ),
    )
    stats = result.tracker.stats["counts"]
    assert result.status == "finished" and result.tracker.phase == LIVE
    assert stats.batches - stats.catch_up_batches <= 1
    kafka_batches = [
        b for b in stats.history if b.end_offsets and b.end_offsets[0].get("phase") == "kafka"
    ]
    assert len(kafka_batches) >= (len(rows) - len(lake)) // LIMIT
    assert all(b.input_rows <= LIMIT for b in kafka_batches)
    assert sum(stats.behind.values()) == 0
    assert result.rows_dropped_late == 0
    assert output(spark, out, START + timedelta(hours=23)) == truth(rows)
