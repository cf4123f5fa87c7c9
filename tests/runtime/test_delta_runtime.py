"""Jobs bound to a Delta table (``[inputs.<name>.delta]``): a backfill from a table
partitioned by day (the partition values live in the log, not the files), and a bootstrap
from an unpartitioned table's pinned version up to the cutoff, then Kafka (embedded
broker). The sessionization job's output equals the hand-made ground truth over the events
written (sessions_by_hand), not a re-read of the table."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
from runtime_helpers import (
    FLUSH_RIDER,
    example_config,
    flush_events,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.examples import sessionization
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START = "2024-03-01T00:00:00"
T0 = datetime.fromisoformat(START + "+00:00")
CUTOFF = T0 + timedelta(hours=5)
RETAINED_FROM = T0 + timedelta(hours=4)
LAKE_UNTIL = T0 + timedelta(hours=6)
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
COLUMNS += ["trip_requested"]
GAP = 30 * 60
TEXT = ["event_id", "rider_id", "event_type", "area"]


def write_events(path: Path, events: list[dict[str, Any]], by_day: bool) -> None:
    """A Delta table of rider events in four appends in arrival order (files out of
    event-time order); ``by_day``: partitioned by a ``day`` string column."""
    from deltalake import write_deltalake

    ordered = arrival_order(events)
    for k in range(4):
        chunk = ordered[k::4]
        columns = {c: pa.array([e[c] for e in chunk], pa.string()) for c in TEXT}
        times = [e["event_time"] for e in chunk]
        columns["event_time"] = pa.array(times, pa.timestamp("us", tz="UTC"))
        if by_day:
            columns["day"] = pa.array([t.strftime("%Y-%m-%d") for t in times], pa.string())
        write_deltalake(
            str(path), pa.table(columns), mode="append", partition_by=["day"] if by_day else None
        )


def delta_config(scratch: Path, path: Path, out: str, kafka: dict | None = None) -> Any:
    binding: dict[str, Any] = {
        "hive": None,
        "delta": {"path": str(path), "event_time_column": "event_time"},
    }
    if kafka is not None:
        binding["kafka"] = kafka
    return example_config(
        "sessionization",
        {
            "inputs": {"rider_events": binding},
            "outputs": {"sessions": {"hive": {"table": out}}},
            # the example slices its Hive history by 2 hours: not this binding's
            "mode": {"backfill": {"inputs": {"rider_events": {"hive": None}}}},
        },
        scratch,
    )


def test_backfill_from_delta_partitioned_by_day_equals_truth(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=20, start=START, hours=30, seed=11, late_fraction=0.0)
    path, out = scratch / "lake" / "rides", f"sessions_{uid()}"
    write_events(path, events, by_day=True)
    config = delta_config(scratch, path, out)
    end = (events[-1]["event_time"] + timedelta(hours=2)).isoformat()
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("backfill", start=START, end=end, trigger="available-now"),
    )
    assert result.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)  # a backfill's own output table
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    entry = result.record.identity["inputs"]["rider_events"]
    assert entry["delta.path"] == str(path) and entry["delta.version"] == "pinned"


def test_bootstrap_delta_then_kafka_equals_truth(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(riders=20, start=START, hours=8, seed=5, late_fraction=0.0)
    lake = [e for e in events if e["event_time"] < LAKE_UNTIL]
    kafka = [e for e in arrival_order(events) if e["arrival_time"] >= RETAINED_FROM]
    assert {e["event_id"] for e in lake} | {e["event_id"] for e in kafka} == {
        e["event_id"] for e in events
    }, "lake and Kafka together hold every event"
    assert all(e["arrival_time"] >= RETAINED_FROM for e in events if e["event_time"] >= CUTOFF)
    path, out, topic = scratch / "lake" / "rides", f"sessions_{uid()}", new_topic(prefix="dboot")
    write_events(path, lake, by_day=False)
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 3)
    produce(kafka_bootstrap, topic, kafka + flush)
    config = delta_config(
        scratch, path, out, {"topic": topic, "bootstrap_servers": kafka_bootstrap}
    )
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("bootstrap", start=START, cutoff=CUTOFF.isoformat(), trigger="available-now"),
    )
    assert result.status == "finished"
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    counts = result.record.inputs["rider_events"]
    before_cutoff = sum(1 for e in kafka if e["event_time"] < CUTOFF)
    assert counts["skipped"] == before_cutoff, "Kafka's records the lake owns are skipped"


def test_bootstrap_delta_then_a_nested_topic_maps_the_topic_by_its_own_columns(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """The topic of a Delta bootstrap carries nested records under other names (``ids.rider``,
    ``type``, ``at``) and a field the job lacks; the Kafka binding's ``fields``, ``columns``
    and ``event_time`` map them while the lake is read by name: the sessions equal the
    truth, and Kafka's records the lake owns are skipped by their own event-time field."""
    events = rider_events(riders=20, start=START, hours=8, seed=7, late_fraction=0.0)
    lake = [e for e in events if e["event_time"] < LAKE_UNTIL]
    kafka = [e for e in arrival_order(events) if e["arrival_time"] >= RETAINED_FROM]
    path, out, topic = scratch / "lake" / "rides", f"sessions_{uid()}", new_topic(prefix="dnest")
    write_events(path, lake, by_day=False)
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 3)
    nested = [
        {
            "ids": {"event": e["event_id"], "rider": e["rider_id"]},
            "type": e["event_type"],
            "area": e["area"],
            "at": e["event_time"],
            "device": "ios",
        }
        for e in kafka + flush
    ]
    produce(kafka_bootstrap, topic, nested)
    binding = {
        "topic": topic,
        "bootstrap_servers": kafka_bootstrap,
        "fields": "ids struct<event:string, rider:string>, type string, area string, "
        "at timestamp, device string",
        "event_time": {"column": "at"},
        "columns": {"event_id": "ids.event", "rider_id": "ids.rider", "event_type": "type"},
    }
    config = delta_config(scratch, path, out, binding)
    result = run_job(
        spark,
        sessionization.JOB,
        config,
        RunOptions("bootstrap", start=START, cutoff=CUTOFF.isoformat(), trigger="available-now"),
    )
    assert result.status == "finished"
    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows)), "no duplicate sessions"
    assert set(rows) == sessions_by_hand(events, GAP)
    counts = result.record.inputs["rider_events"]
    before_cutoff = sum(1 for e in kafka if e["event_time"] < CUTOFF)
    assert counts["skipped"] == before_cutoff and counts["dead"] == 0, counts
    assert counts["delivered"] == len(kafka) - before_cutoff + len(flush), counts
