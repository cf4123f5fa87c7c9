"""Late rows kept in a Kafka topic (``[outputs.<o>.late] topic``): a sessionization stream
over events in arrival order drops some as late; the topic holds exactly those events, once
each, keyed by query/batch/partition/row, with the watermark each missed; the audit counts
them (``late_kept``) and ``kappa reconcile`` reads them back."""

from __future__ import annotations

import json
import time
from datetime import datetime, timedelta
from pathlib import Path

from runtime_helpers import (
    SESSION_COLUMNS,
    consume_topic,
    dropped_by_watermark,
    example_config,
    flush_events,
    iso_micros,
    micros,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.examples import sessionization
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
COLUMNS = SESSION_COLUMNS
GAP = 30 * 60
BATCH = 150


def test_late_rows_kept_in_a_kafka_topic(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(
        riders=40, start=START, hours=8, seed=11, late_fraction=0.3, late_delay=(3 * 3600, 5 * 3600)
    )
    out = f"rider_sessions_{uid()}"
    topic = new_topic(prefix="rider-events")
    late_topic = new_topic(prefix="rider-sessions-late")
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": BATCH,
                        "dlq": {"topic": new_topic(prefix="rider-dlq")},
                    },
                    "hive": {"table": f"rider_events_{uid()}"},
                }
            },
            "outputs": {
                "sessions": {
                    "hive": {"table": out},
                    "late": {"topic": late_topic, "bootstrap_servers": kafka_bootstrap},
                }
            },
        },
        scratch,
    )
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 2 * BATCH)
    produce(kafka_bootstrap, topic, arrival_order(events) + flush)

    t0 = time.monotonic()
    stream = run_job(
        spark, sessionization.JOB, config, RunOptions("stream", trigger="available-now")
    )
    assert stream.status == "finished"
    print(f"stream: {time.monotonic() - t0:.0f}s")

    # the late events, from Spark's own batches (offsets read, previous batch's watermark)
    history = stream.tracker.stats["sessions"].history
    late, batch_of = dropped_by_watermark(
        history, dict(enumerate(arrival_order(events))), GAP * 1_000_000
    )
    missed = {
        batch.batch_id: iso_micros(previous.watermark)
        for previous, batch in zip(history, history[1:], strict=False)
    }
    late_ids = {e["event_id"] for e in late}
    assert len(late) >= 3
    # the stream's output lacks exactly them, and Spark counted them (one per session)
    on_time = [e for e in events if e["event_id"] not in late_ids]
    assert set(table_rows(spark, out, COLUMNS)) == sessions_by_hand(on_time, GAP)
    assert stream.rows_dropped_late == len(late)

    # the topic holds exactly the late events, once each, with the watermark each missed
    records = consume_topic(kafka_bootstrap, late_topic)
    values = [json.loads(r.value()) for r in records]
    keys = [r.key().decode() for r in records]
    assert sorted(v["event_id"] for v in values) == sorted(late_ids)
    assert len(set(keys)) == len(keys) == len(late)
    query = stream.plans["sessions"].query_name
    by_id = {e["event_id"]: e for e in late}
    for key, value in zip(keys, values, strict=True):
        prefix, batch, staged, row = key.rsplit("/", 3)
        assert prefix == query and staged.startswith("rider_events-") and row.isdigit()
        assert int(batch) == batch_of[value["event_id"]]
        assert value["kappa_input"] == "rider_events"
        watermark = micros(datetime.fromisoformat(value["kappa_missed_watermark"]))
        assert watermark == missed[int(batch)]
        event_time = micros(datetime.fromisoformat(value["event_time"]))
        assert event_time == micros(by_id[value["event_id"]]["event_time"]), "to the microsecond"
        assert event_time + GAP * 1_000_000 <= watermark, "its session had closed"

    # the audit counts them as rows per 10-minute event-time bucket, dataset the topic
    from kappaplus.audit.table import read_counts

    kept = (
        read_counts(spark, jobs=[sessionization.JOB.name])
        .where(f"stage = 'late_kept' AND dataset = '{late_topic}'")
        .selectExpr("unix_seconds(bucket) AS at", "rows")
        .collect()
    )
    per_bucket: dict[int, int] = {}
    for e in late:
        at = int(e["event_time"].timestamp()) // 600 * 600
        per_bucket[at] = per_bucket.get(at, 0) + 1
    recorded: dict[int, int] = {}
    for r in kept:
        recorded[r["at"]] = recorded.get(r["at"], 0) + r["rows"]
    assert recorded == per_bucket

    # kappa reconcile reads the topic back: one per key, in the range of the event time
    from kappaplus.audit.reconcile import late_rows_kept_in
    from kappaplus.runtime.reconcile_target import target_of

    target = target_of(sessionization.JOB, config, "sessions", watermark_micros=0)
    assert target.late_topic == late_topic
    assert late_rows_kept_in(spark, target) == len(late)
    middle = sorted(e["event_time"] for e in late)[len(late) // 2]
    ranged = target_of(sessionization.JOB, config, "sessions", start=middle, watermark_micros=0)
    assert late_rows_kept_in(spark, ranged) == sum(e["event_time"] >= middle for e in late)
