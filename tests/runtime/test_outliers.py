"""A watermark one outlier cannot move (issue 24, item 5: "a record dated 3 days ahead of its
peers (inside ``max_future``) made 2,201 of the next 3,000 good rows late").

Flights every 20 s on four partitions (one origin each), stamped with their event time; one
more record, among them, carries an event time three days ahead (its Kafka timestamp is
that of its neighbours). With ``max_ahead = "none"`` (opted out) the watermark jumps three
days and most later rows are late (kept in the late table): the defect, shown by the same
run with the rule off. With ``max_ahead = "2 days"`` the outlier is a dead letter with its
reason, nothing is late and the output equals the counts computed by hand without it. (The
default, ``"auto"``, does the same: ``tests/runtime/test_outlier_default.py``.)
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import functions as F
from runtime_helpers import uid
from test_catch_up import JOB, ORIGINS, START, flights, output, truth

from kappaplus.config import config_from_dict
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

LIMIT = 300


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]]) -> None:
    """One origin per partition; Kafka timestamp = ``arrival`` (default the event time)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    for row in rows:
        value = {k: row[k] for k in ("flight_id", "origin")}
        value["event_time"] = row["event_time"].isoformat()
        arrival = row.get("arrival", row["event_time"])
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            partition=ORIGINS.index(row["origin"]),
            timestamp=int(arrival.timestamp() * 1000),
        )
    assert producer.flush(60) == 0


def run(spark: Any, topic: str, bootstrap: str, scratch: Path, bounds: dict[str, Any]) -> Any:
    out, late, dlq = f"outlier_counts_{uid()}", f"outlier_late_{uid()}", f"outlier_dlq_{uid()}"
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
                        "dlq": {"table": dlq},
                    },
                    "event_time_bounds": bounds,
                }
            },
            "outputs": {"counts": {"hive": {"table": out}, "late": {"table": late}}},
        }
    )
    result = run_job(spark, JOB, config, RunOptions("stream", trigger="available-now"))
    assert result.status == "finished"
    return result, out, dlq


@pytest.mark.slow  # two stream runs, about 2 minutes
@pytest.mark.timeout(900)
def test_one_record_days_ahead_of_its_peers_does_not_move_the_watermark(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    rows = flights(0, 1500)
    neighbour = rows[300]
    outlier = {
        "flight_id": "outlier",
        "origin": neighbour["origin"],
        "event_time": neighbour["event_time"] + timedelta(days=3),
        "arrival": neighbour["event_time"],
    }
    flush = [{**r, "event_time": r["event_time"] + timedelta(days=1)} for r in flights(1500, 8)]
    topic = new_topic(partitions=4, prefix="outlier")
    produce(kafka_bootstrap, topic, [*rows[:301], outlier, *rows[301:], *flush])

    # opted out: the outlier moves the watermark three days ahead, most later rows are late
    moved, _, _ = run(spark, topic, kafka_bootstrap, scratch, {"max_ahead": "none"})
    assert moved.rows_dropped_late > len(rows) // 3  # 609 of the 1,199 after it, measured

    guarded, out, dlq = run(spark, topic, kafka_bootstrap, scratch, {"max_ahead": "2 days"})
    assert guarded.rows_dropped_late == 0
    assert output(spark, out, START + timedelta(hours=23)) == truth(rows)
    dead = spark.table(dlq).select("value", "reason").collect()
    assert len(dead) == 1 and json.loads(dead[0].value)["flight_id"] == "outlier"
    assert "more than max_ahead = 2 days ahead of its peers" in dead[0].reason
    assert guarded.record.inputs["flights"]["out_of_bounds"] == 1
    assert guarded.record.inputs["flights"]["reconciled"] is True
    assert spark.table(out).where(F.col("start") >= F.lit(START + timedelta(days=3))).count() == 0


def test_max_ahead_is_validated_when_the_config_is_read() -> None:
    from kappaplus.config import EventTimeBounds
    from kappaplus.core.errors import ConfigError

    assert EventTimeBounds().max_ahead == "auto"  # on by default (issue 47, item 1)
    assert EventTimeBounds(max_ahead="none").max_ahead is None
    assert EventTimeBounds(max_ahead="AUTO").max_ahead == "auto"
    assert EventTimeBounds(max_ahead="6 hours").max_ahead.micros == 6 * 3600 * 10**6
    with pytest.raises(ValueError, match="max_ahead"):
        EventTimeBounds(max_ahead="0 seconds")
    raw = {
        "inputs": {
            "a": {
                "kafka": {"topic": "t", "bootstrap_servers": "127.0.0.1:9092"},
                "event_time_bounds": {"max_ahead": "a while"},
            }
        },
        "outputs": {"o": {"hive": {"table": "o"}}},
    }
    with pytest.raises(ConfigError, match="event_time_bounds.max_ahead"):
        config_from_dict(raw)


@pytest.mark.slow  # one bootstrap, about 2 minutes
@pytest.mark.timeout(900)
def test_a_bootstraps_kafka_phase_dead_letters_a_record_days_ahead_of_its_peers(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """``max_ahead`` in bootstrap (it was stream only): the lake owns the first four hours,
    Kafka the rest; one record three days ahead of its neighbour arrives in the Kafka phase.
    It is a dead letter with its reason (counted as dead), it does not move the watermark:
    nothing is late and the output equals the counts computed by hand without it. Without
    the rule the bootstrap's watermark jumped three days and the later rows were dropped
    (this test on main, before the change: the outlier delivered, ``dead`` 0, and
    ``rows_dropped_late`` 13, Spark's count of the window groups it dropped)."""
    from kappaplus.examples.generate import write_table

    rows = flights(0, 1500)
    cutoff = START + timedelta(hours=4)
    neighbour = rows[900]  # in the Kafka phase (after the cutoff, 5 h in)
    assert neighbour["event_time"] > cutoff
    outlier = {
        "flight_id": "outlier",
        "origin": neighbour["origin"],
        "event_time": neighbour["event_time"] + timedelta(days=3),
        "arrival": neighbour["event_time"],
    }
    flush = [{**r, "event_time": r["event_time"] + timedelta(days=1)} for r in flights(1500, 8)]
    topic = new_topic(partitions=4, prefix="outlier-boot")
    produce(kafka_bootstrap, topic, [*rows[:901], outlier, *rows[901:], *flush])
    table, out, dlq = f"outlier_lake_{uid()}", f"outlier_boot_{uid()}", f"outlier_bdlq_{uid()}"
    lake = [r for r in rows if r["event_time"] < cutoff + timedelta(hours=1)]
    write_table(spark, table, lake, "flight_id string, origin string, event_time timestamp")
    config = config_from_dict(
        {
            "job": "tests:JOB",
            "checkpoint_dir": str(scratch / f"checkpoints-{uid()}"),
            "inputs": {
                "flights": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": LIMIT,
                        "dlq": {"topic": None, "table": dlq},
                    },
                    "hive": {
                        "table": table,
                        "event_time_column": "event_time",
                        "partition_format": "dt=%Y-%m-%d/hr=%H",
                    },
                    "event_time_bounds": {"max_ahead": "2 days"},
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
    assert result.rows_dropped_late == 0
    assert output(spark, out, START + timedelta(hours=23)) == truth(rows)
    counts = result.record.inputs["flights"]
    assert counts["dead"] == 1 and counts["dead_letters_written"] == 1
    kafka_from = cutoff - timedelta(hours=1)
    in_kafka = [r for r in rows if r["event_time"] >= kafka_from]
    assert counts["skipped"] == sum(1 for r in in_kafka if r["event_time"] < cutoff)
    assert counts["delivered"] == sum(1 for r in in_kafka if r["event_time"] >= cutoff) + len(flush)
    dead = spark.table(dlq).select("value", "reason").collect()
    assert len(dead) == 1 and json.loads(dead[0].value)["flight_id"] == "outlier"
    assert "more than max_ahead = 2 days ahead of its peers" in dead[0].reason
