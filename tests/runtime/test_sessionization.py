"""Rider sessionization in both modes: backfill == hand-made ground truth; the stream over
the same events in arrival order differs exactly by the late events it dropped."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from runtime_helpers import (
    SESSION_COLUMNS,
    dropped_by_watermark,
    example_config,
    flush_events,
    micros,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.examples import sessionization
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.runtime.state.records import list_runs, read_checkpoint

START, END = "2024-03-01T00:00:00", "2024-03-01T08:00:00"
COLUMNS = SESSION_COLUMNS
GAP = 30 * 60
BATCH = 150


def test_sessionization_backfill_and_stream(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    from kappaplus.examples.generate import RIDER_EVENT_DDL, write_table

    events = rider_events(
        riders=40, start=START, hours=8, seed=11, late_fraction=0.3, late_delay=(3 * 3600, 5 * 3600)
    )
    table, out = f"rider_events_{uid()}", f"rider_sessions_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    topic, dlq_topic = new_topic(prefix="rider-events"), new_topic(prefix="rider-dlq")
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": BATCH,
                        "dlq": {"topic": dlq_topic},
                    },
                    "hive": {"table": table},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}, "late": {"table": f"{out}_late"}}},
        },
        scratch,
    )

    # -- backfill: Hive, 2-hour slices, AvailableNow, writes <out>_backfill ---------------
    t0 = time.monotonic()
    backfill = run_job(spark, sessionization.JOB, config, RunOptions("backfill", START, END))
    assert backfill.status == "finished"
    backfill_rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(backfill_rows) == len(set(backfill_rows)), "no duplicates"
    truth = sessions_by_hand(events, GAP)
    assert set(backfill_rows) == truth
    assert backfill.rows_dropped_late == 0
    assert backfill.record.done == 1.0
    # the slice manifests are source state: they live in the run's checkpoint directory
    query_checkpoint = Path(backfill.record.checkpoints["sessions"])
    manifests = query_checkpoint.parent / "_sources" / "rider_events" / "manifests"
    assert manifests.is_dir() and any(manifests.iterdir()), manifests
    print(f"backfill: {len(truth)} sessions in {time.monotonic() - t0:.0f}s")

    # -- stream: the same events produced in arrival order, plus 2 undecodable records;
    # then far-future events of another rider push the watermark past every session.
    flush_at = events[-1]["event_time"] + timedelta(days=1)
    flush = flush_events(flush_at, 2 * BATCH)
    garbage = [b"not json", b'{"event_id": "x", "rider_id": "r", "event_time": null}']
    produce(kafka_bootstrap, topic, [], extra=garbage)
    produce(kafka_bootstrap, topic, arrival_order(events) + flush)

    t0 = time.monotonic()
    stream = run_job(
        spark, sessionization.JOB, config, RunOptions("stream", trigger="available-now")
    )
    assert stream.status == "finished"
    assert stream.job.transform is backfill.job.transform is sessionization.sessionize
    stream_rows = table_rows(spark, out, COLUMNS)
    assert len(stream_rows) == len(set(stream_rows)), "no duplicates"
    print(f"stream: {len(stream_rows)} sessions in {time.monotonic() - t0:.0f}s")

    # Which events were dropped is decided by Spark's own batches: the Kafka offsets each
    # batch read, and the watermark late rows are judged by -- the one the PREVIOUS batch
    # ran under (Spark evicts state with the current batch's watermark but filters late
    # input with the previous one). For session windows an event is late when its own
    # session window [t, t + gap) ends at or before that watermark.
    delivered = arrival_order(events)
    history = stream.tracker.stats["sessions"].history
    late, _ = dropped_by_watermark(
        history, {len(garbage) + i: e for i, e in enumerate(delivered)}, GAP * 1_000_000
    )
    print(f"{len(history)} stream batches, {len(late)} events dropped as late")
    assert len(late) >= 3
    assert all(e["arrival_time"] - e["event_time"] > timedelta(hours=1) for e in late)
    late_ids = {e["event_id"] for e in late}

    # stream output == sessions of the on-time events; it differs from the backfill
    # exactly in the sessions the late events touch, and the reported late rows
    # account for the difference.
    on_time = [e for e in events if e["event_id"] not in late_ids]
    assert set(stream_rows) == sessions_by_hand(on_time, GAP)
    touched = {
        s
        for s in truth
        if any(e["rider_id"] == s[0] and s[1] <= micros(e["event_time"]) < s[2] for e in late)
    }
    assert set(backfill_rows) - set(stream_rows) == touched
    assert len(touched) == len(late)  # one late event per rider, so one per session
    missing = sum(r[3] for r in backfill_rows) - sum(r[3] for r in stream_rows)
    assert missing == len(late) == stream.rows_dropped_late
    assert stream.record.rows_dropped_late == len(late)

    # the late rows are kept, not only counted: exactly the dropped events, once each,
    # with the watermark each arrived behind
    kept = spark.sql(
        f"SELECT event_id, event_time, kappa_input, kappa_missed_watermark FROM {out}_late"
    ).collect()
    assert sorted(r.event_id for r in kept) == sorted(late_ids)
    assert all(r.kappa_input == "rider_events" for r in kept)
    assert all(r.event_time + timedelta(seconds=GAP) <= r.kappa_missed_watermark for r in kept), (
        "each kept row's session ends at or before the watermark it missed"
    )
    # ... and the audit counts them as rows per 10-minute event-time bucket (late_kept)
    from kappaplus.audit.table import read_counts

    kept_counts = (
        read_counts(spark, jobs=[sessionization.JOB.name])
        # this run's late table only: other tests run this job too, into the same audit table
        .where(f"stage = 'late_kept' AND mode = 'stream' AND dataset = '{out}_late'")
        .selectExpr("unix_seconds(bucket) AS at", "rows")
        .collect()
    )
    per_bucket: dict[int, int] = {}
    for e in late:
        at = int(e["event_time"].timestamp()) // 600 * 600
        per_bucket[at] = per_bucket.get(at, 0) + 1
    recorded: dict[int, int] = {}
    for r in kept_counts:  # a bucket can have late rows in several micro-batches
        recorded[r["at"]] = recorded.get(r["at"], 0) + r["rows"]
    assert recorded == per_bucket

    # decode counts reconcile with the dead letters the output query wrote
    counts: dict[str, Any] = stream.record.inputs["rider_events"]
    assert counts["records"] == len(events) + len(flush) + len(garbage)
    assert counts["dead"] == len(garbage) == counts["dead_letters_written"]
    assert counts["good"] == len(events) + len(flush)
    assert counts["reconciled"] is True

    # run records and checkpoints say where the runs stand
    runs = {r.run_id: r for r in list_runs()}
    assert runs[backfill.record.run_id].status == "finished"
    assert runs[stream.record.run_id].rows_dropped_late == len(late)
    state = read_checkpoint(backfill.record.checkpoints["sessions"])
    assert state.done() == 1.0 and not state.pending
