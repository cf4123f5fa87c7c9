"""One far-future event time does not move the watermark by default (issue 47, item 1).

3,000 good records over six hours on a one-partition topic, 100 records per trigger, and one
more record dated three days ahead of its neighbours (a 2024 time: inside ``max_future``,
which is measured against the clock). No ``event_time_bounds`` in the config: the default
``max_ahead = "auto"`` makes the outlier a dead letter with its reason, nothing is late and
every ten-minute window equals the counts computed by hand. Before the default, the outlier
moved the watermark three days ahead: 1,300 of the 3,000 good rows went to the late table
and 32 of the 72 windows were missing.
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
from test_catch_up import JOB

from kappaplus.config import config_from_dict
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = datetime(2024, 3, 4, tzinfo=UTC)
GOOD = 3_000
SPACING = timedelta(seconds=7.2)  # 3,000 records over six hours
TAIL = 150  # 18 minutes more: the watermark passes the six hours' last window
ORIGINS = ("JFK", "SFO")
WINDOW = 600


def good_rows(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {"flight_id": f"f-{i}", "origin": ORIGINS[i % 2], "event_time": START + SPACING * i}
        for i in range(first, first + count)
    ]


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]]) -> None:
    """Every record on partition 0, its Kafka timestamp ``arrival`` (default its event time)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for row in rows:
        value = {"flight_id": row["flight_id"], "origin": row["origin"]}
        value["event_time"] = row["event_time"].isoformat()
        arrival = row.get("arrival", row["event_time"])
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            partition=0,
            timestamp=int(arrival.timestamp() * 1000),
        )
        producer.poll(0)
    assert producer.flush(60) == 0


def windows(rows: list[dict[str, Any]]) -> Counter[tuple[int, str]]:
    """The ground truth: rows per (ten-minute window start, origin), by hand."""
    out: Counter[tuple[int, str]] = Counter()
    for row in rows:
        seconds = int(row["event_time"].timestamp())
        out[(seconds - seconds % WINDOW, row["origin"])] += 1
    return out


@pytest.mark.slow  # one stream run of 32 batches, about a minute
@pytest.mark.timeout(900)
def test_one_record_days_ahead_is_a_dead_letter_by_default(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    good = good_rows(0, GOOD)
    tail = good_rows(GOOD, TAIL)
    neighbour = good[1000]
    outlier = {
        "flight_id": "outlier",
        "origin": neighbour["origin"],
        "event_time": neighbour["event_time"] + timedelta(days=3),
        "arrival": neighbour["event_time"],
    }
    assert outlier["event_time"] < datetime.now(UTC)  # a plausible time, inside max_future
    topic = new_topic(partitions=1, prefix="outlier-default")
    produce(kafka_bootstrap, topic, [*good[:1001], outlier, *good[1001:], *tail])

    out, late, dlq = f"od_counts_{uid()}", f"od_late_{uid()}", f"od_dlq_{uid()}"
    config = config_from_dict(
        {
            "job": "tests:JOB",
            "checkpoint_dir": str(scratch / "checkpoints"),
            "inputs": {
                "flights": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "starting_offsets": "earliest",
                        "maxOffsetsPerTrigger": 100,
                        "dlq": {"table": dlq},
                    }
                }
            },
            "outputs": {"counts": {"hive": {"table": out}, "late": {"table": late}}},
        }
    )
    result = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"

    # no good row late: the late table is created by the first late row
    assert result.rows_dropped_late == 0
    assert not spark.catalog.tableExists(late) or spark.table(late).count() == 0
    # every window of the six hours, each once, equal to the counts by hand
    six_hours = START + SPACING * GOOD
    rows = spark.table(out).where(F.col("start") < F.lit(six_hours)).collect()
    got = Counter({(int(r.start.timestamp()), r.origin): r["count"] for r in rows})
    assert len(rows) == len(got) == 72
    assert got == windows(good)
    assert spark.table(out).where(F.col("start") >= F.lit(START + timedelta(days=1))).count() == 0
    # the outlier: a dead letter with its reason, counted as out of bounds
    dead = spark.table(dlq).select("value", "reason").collect()
    assert [json.loads(d.value)["flight_id"] for d in dead] == ["outlier"]
    assert "ahead of its peers in partition 0" in dead[0].reason
    assert "max_ahead = auto" in dead[0].reason
    assert result.record.inputs["flights"]["out_of_bounds"] == 1
