"""``--mode bootstrap`` of the runtime: the sessionization job reads the lake up to the
cutoff, then Kafka, as one source, and its output equals the hand-made ground truth over
the whole range although neither the lake nor Kafka alone holds every event."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from runtime_helpers import (
    FLUSH_RIDER,
    SESSION_COLUMNS,
    example_config,
    flush_events,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.core.errors import ConfigError, StateError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import (
    RIDER_EVENT_DDL,
    arrival_order,
    produce,
    rider_events,
    to_json,
    write_table,
)
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
T0 = datetime.fromisoformat(START + "+00:00")
CUTOFF = T0 + timedelta(hours=5)
RETAINED_FROM = T0 + timedelta(hours=4)  # what Kafka's retention still holds (arrival time)
LAKE_UNTIL = T0 + timedelta(hours=6)  # the archive has more than the lake owns
COLUMNS = SESSION_COLUMNS
GAP = 30 * 60


def test_bootstrap_lake_then_kafka_equals_truth(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    # Disorder (jitter) but no event later than the watermark: every event must count.
    events = rider_events(riders=30, start=START, hours=8, seed=5, late_fraction=0.0)
    lake = [e for e in events if e["event_time"] < LAKE_UNTIL]
    kafka = [e for e in arrival_order(events) if e["arrival_time"] >= RETAINED_FROM]
    assert len(lake) < len(events) and len(kafka) < len(events)
    assert {e["event_id"] for e in lake} | {e["event_id"] for e in kafka} == {
        e["event_id"] for e in events
    }, "lake and Kafka together hold every event"
    assert all(e["arrival_time"] >= RETAINED_FROM for e in events if e["event_time"] >= CUTOFF)

    table, out, topic = f"lake_events_{uid()}", f"sessions_{uid()}", new_topic(prefix="boot")
    dlq = f"boot_dlq_{uid()}"
    write_table(spark, table, lake, RIDER_EVENT_DDL)
    # far-future events of one extra rider close every real session (then left out)
    flush_at = events[-1]["event_time"] + timedelta(days=1)
    flush = flush_events(flush_at, 3)
    # a record no stream would deliver (more than max_future = 1 day ahead): a dead letter
    # with its reason, as in a stream, not a row left out (issue 24 item 7)
    future = to_json(flush_events(datetime(2099, 1, 1, tzinfo=UTC), 1)[0])
    garbage = [b"{not json", future]
    produce(kafka_bootstrap, topic, kafka + flush, extra=garbage)
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "dlq": {"topic": None, "table": dlq},
                    },
                    "hive": {"table": table},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
        },
        scratch,
    )

    began = time.monotonic()
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("bootstrap", start=START, cutoff=CUTOFF.isoformat(), trigger="available-now"),
    )
    assert result.status == "finished"
    assert result.job.transform is sessionization.sessionize
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    truth = sessions_by_hand(events, GAP)
    assert set(rows) == truth
    assert result.rows_dropped_late == 0
    counts = result.record.inputs["rider_events"]
    before_cutoff = sum(1 for e in kafka if e["event_time"] < CUTOFF)
    assert counts["skipped"] == before_cutoff, "Kafka's records the lake owns are skipped"
    assert counts["delivered"] == len(kafka) - before_cutoff + len(flush)
    assert counts["dead"] == len(garbage)
    assert counts["records"] == len(kafka) + len(flush) + len(garbage)
    assert result.record.cutoff == CUTOFF.isoformat()
    # the records Kafka could not decode are in the input's dead-letter table, with reasons,
    # written by the same writer as a stream's; a rerun (resume) writes them once, not twice
    assert counts["dead_letters_written"] == len(garbage)
    letters = spark.table(dlq).collect()
    assert sorted(bytes(r.value) for r in letters) == sorted(garbage)
    assert all(r.reason for r in letters)
    (ahead,) = [r.reason for r in letters if bytes(r.value) == future]
    assert "2099-01-01" in ahead and "max_future" in ahead, ahead
    assert {r.topic for r in letters} == {topic} and {r.job for r in letters} == {"rider-sessions"}
    again = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("bootstrap", start=START, cutoff=CUTOFF.isoformat(), trigger="available-now"),
    )
    assert again.status == "finished"
    assert again.record.inputs["rider_events"]["dead_letters_written"] == len(garbage)
    spark.catalog.refreshTable(dlq)
    assert sorted(bytes(r.value) for r in spark.table(dlq).collect()) == sorted(garbage)
    print(
        f"bootstrap: {len(truth)} sessions, lake {len(lake)} events, Kafka {len(kafka)} "
        f"({before_cutoff} skipped) in {time.monotonic() - began:.0f}s"
    )

    # the checkpoint belongs to this start/cutoff: another cutoff is refused
    with pytest.raises(StateError, match="cutoff"):
        run_job(
            spark,
            sessionization.JOB,
            config,
            RunOptions("bootstrap", start=START, cutoff=(CUTOFF + timedelta(hours=1)).isoformat()),
        )


def test_bootstrap_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="end"):
        RunOptions("bootstrap", start=START, end="2024-03-02", cutoff="2024-03-01T05:00:00")
    with pytest.raises(ConfigError, match="cutoff"):
        RunOptions("backfill", start=START, cutoff="2024-03-01T05:00:00")
    with pytest.raises(ConfigError, match="start"):
        RunOptions("bootstrap", start="2024-03-02", cutoff="2024-03-01T05:00:00")
