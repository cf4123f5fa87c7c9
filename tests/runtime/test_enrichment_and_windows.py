"""Stateless enrichment (Hive + Kafka outputs) in both modes, and tumbling + sliding
event-time windows of a small inline job: backfill == plain Spark batch queries."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from runtime_helpers import consume_topic, example_config, micros, table_rows, uid

from kappaplus.config import config_from_dict
from kappaplus.examples import enrichment
from kappaplus.examples.generate import (
    CITY_OF_AREA,
    RIDER_EVENT_DDL,
    arrival_order,
    events_frame,
    produce,
    rider_events,
    write_table,
)
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START, END = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
COLUMNS = ["event_id", "rider_id", "city", "event_time", "event_hour", "is_trip_request"]


@pytest.fixture(scope="module")
def rider_table(spark: SparkSession):  # type: ignore[no-untyped-def]
    events = rider_events(riders=30, bots=3, start=START, hours=6, seed=3)
    table = f"rider_events_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    return events, table


def expected_enriched(events: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    out = set()
    for e in events:
        if e["rider_id"].startswith("bot-"):
            continue
        t = micros(e["event_time"])
        hour = t - t % (3600 * 1_000_000)
        city = CITY_OF_AREA.get(e["area"], "unknown")
        out.add((e["event_id"], e["rider_id"], city, t, hour, e["event_type"] == "request_trip"))
    return out


def test_enrichment_backfill_and_stream(  # type: ignore[no-untyped-def]
    spark, rider_table, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events, table = rider_table
    out = f"enriched_{uid()}"
    source, sink = new_topic(prefix="riders"), new_topic(prefix="enriched")
    backfill_sink = new_topic(prefix="enriched-backfill")
    config = example_config(
        "enrichment",
        {
            "inputs": {
                "rider_events": {
                    "hive": {"table": table},
                    "kafka": {"topic": source, "bootstrap_servers": kafka_bootstrap},
                }
            },
            "outputs": {
                "enriched": {
                    "hive": {"table": out},
                    "kafka": {
                        "topic": sink,
                        "bootstrap_servers": kafka_bootstrap,
                        "backfill_topic": backfill_sink,
                    },
                }
            },
        },
        scratch,
    )
    truth = expected_enriched(events)
    backfill = run_job(spark, enrichment.JOB, config, RunOptions("backfill", START, END))
    assert backfill.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)) and set(rows) == truth
    messages = consume_topic(kafka_bootstrap, backfill_sink)
    values = [json.loads(m.value()) for m in messages]
    assert Counter(v["event_id"] for v in values) == Counter(r[0] for r in truth)
    assert all(m.key().decode() == _sha(m.value()) for m in messages)

    produce(kafka_bootstrap, source, arrival_order(events))
    stream = run_job(spark, enrichment.JOB, config, RunOptions("stream", trigger="available-now"))
    assert stream.status == "finished" and stream.rows_dropped_late == 0
    assert stream.job.transform is backfill.job.transform
    assert set(table_rows(spark, out, COLUMNS)) == truth  # stateless: nothing is late
    assert len(consume_topic(kafka_bootstrap, sink)) == len(truth)
    assert stream.record.inputs["rider_events"]["good"] == len(events)


def _sha(value: bytes) -> str:
    import hashlib

    return hashlib.sha256(value).hexdigest()


def window_counts(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Events per area in tumbling and in sliding windows."""
    events = inputs["rider_events"]
    tumbling = events.groupBy(F.window("event_time", params.tumbling).alias("w"), "area").count()
    sliding = events.groupBy(
        F.window("event_time", params.sliding, params.slide).alias("w"), "area"
    ).count()
    shape = ["area", F.col("w.start").alias("start"), F.col("w.end").alias("end"), "count"]
    return {"tumbling": tumbling.select(*shape), "sliding": sliding.select(*shape)}


WINDOW_JOB = Job(
    name="window-counts",
    inputs=[InputSpec("rider_events", RIDER_EVENT_DDL, "event_time")],
    outputs=[
        OutputSpec("tumbling", event_time_column="start"),
        OutputSpec("sliding", event_time_column="start"),
    ],
    transform=window_counts,
    watermark_delay="2 minutes",
    params={"tumbling": "15 minutes", "sliding": "30 minutes", "slide": "10 minutes"},
    window_params=["tumbling", "sliding", "slide"],
)


def test_tumbling_and_sliding_windows_backfill(  # type: ignore[no-untyped-def]
    spark, rider_table, scratch: Path
) -> None:
    events, table = rider_table
    out = f"windows_{uid()}"
    config = config_from_dict(
        {
            "checkpoint_dir": str(scratch / "ckpt"),
            "inputs": {
                "rider_events": {
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "maxEventTimePerTrigger": "90 minutes",
                    }
                }
            },
            "outputs": {
                "tumbling": {"hive": {"table": f"{out}_t"}},
                "sliding": {"hive": {"table": f"{out}_s"}},
            },
            "mode": {"backfill": {"watermark_delay": "30 minutes"}},
        }
    )
    result = run_job(spark, WINDOW_JOB, config, RunOptions("backfill", START, END))
    assert result.status == "finished" and result.rows_dropped_late == 0
    frame = events_frame(spark, events, RIDER_EVENT_DDL)
    cols = ["area", "start", "end", "count"]
    for name, window in (
        ("t", F.window("event_time", "15 minutes")),
        ("s", F.window("event_time", "30 minutes", "10 minutes")),
    ):
        truth = (
            frame.groupBy(window.alias("w"), "area")
            .count()
            .select("area", F.unix_micros("w.start"), F.unix_micros("w.end"), "count")
        )
        expected = {tuple(r) for r in truth.collect()}
        got = table_rows(spark, f"{out}_{name}_backfill", cols)
        assert len(got) == len(set(got)) and set(got) == expected, name
