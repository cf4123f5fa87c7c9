"""Arbitrary state (transformWithStateInPandas: running trip count per rider) and a
processing-time window, run by the runtime from Hive (backfill) and from Kafka (stream),
checked against hand-made truths; the stream differs exactly by the late rows it drops."""

from __future__ import annotations

import sys
import time
from collections import Counter, defaultdict
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import (
    dropped_by_watermark,
    example_config,
    flush_events,
    micros,
    table_rows,
    uid,
)

from kappaplus.cli.run import ROCKSDB
from kappaplus.examples import rider_trips
from kappaplus.examples.generate import (
    RIDER_EVENT_DDL,
    arrival_order,
    produce,
    rider_events,
    write_table,
)
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

sys.path.insert(0, str(Path(__file__).parents[1]))
from planner_watch import PlannerWatch  # noqa: E402

START, END = "2024-03-01T00:00:00", "2024-03-01T06:00:00"
PROVIDER = "spark.sql.streaming.stateStore.providerClass"


@pytest.fixture()
def rocksdb(spark):  # type: ignore[no-untyped-def]
    """transformWithState needs the RocksDB state store (``kappa run`` always sets it)."""
    before = spark.conf.get(PROVIDER, None)
    spark.conf.set(PROVIDER, ROCKSDB)
    yield
    if before is None:
        spark.conf.unset(PROVIDER)
    else:
        spark.conf.set(PROVIDER, before)


def trip_numbers_by_hand(events: list[dict[str, Any]]) -> set[tuple[Any, ...]]:
    """Per rider, request_trip events numbered 1, 2, ... by (event time, event id)."""
    per_rider: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for e in events:
        if e["event_type"] == "request_trip":
            per_rider[e["rider_id"]].append((micros(e["event_time"]), e["event_id"]))
    out = set()
    for rider, trips in per_rider.items():
        for number, (t, event_id) in enumerate(sorted(trips), start=1):
            out.add((rider, event_id, t, number))
    return out


def test_rider_trips_backfill(spark, rocksdb, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=25, start=START, hours=6, seed=8)
    table, out = f"rider_events_{uid()}", f"trips_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    config = example_config(
        "rider_trips",
        {
            "inputs": {"rider_events": {"hive": {"table": table}}},
            "outputs": {
                "trip_counts": {"hive": {"table": f"{out}_counts"}},
                "arrivals": {"hive": {"table": f"{out}_arrivals"}},
            },
        },
        scratch,
    )
    with PlannerWatch() as watch:
        result = run_job(spark, rider_trips.JOB, config, RunOptions("backfill", START, END))
    assert result.status == "finished"
    assert result.rows_dropped_late == 0  # event-time slices in order: nothing is late
    # the JVM reader's slice planner ran in this (the driver's) process, one connection per
    # query (one query per output), and no planner process was started
    assert watch.served == 2 and watch.children == set(), (watch.served, watch.children)
    rows = table_rows(
        spark, f"{out}_counts_backfill", ["rider_id", "event_id", "event_time", "trip_number"]
    )
    assert len(rows) == len(set(rows))
    assert set(rows) == trip_numbers_by_hand(events)

    # processing-time windows: an update-mode changelog; the last count of each
    # (window, type) is its final one, and over all windows they add up to the input
    arrivals = table_rows(
        spark, f"{out}_arrivals_backfill", ["processed_start", "event_type", "events"]
    )
    final: dict[tuple[int, str], int] = {}
    for start, kind, count in arrivals:
        final[(start, kind)] = max(count, final.get((start, kind), 0))
    totals: Counter[str] = Counter()
    for (_, kind), count in final.items():
        totals[kind] += count
    assert totals == Counter(e["event_type"] for e in events)
    # processing time is the batch time: recent, nothing like the 2024 event times
    assert min(start for start, _ in final) > micros(events[-1]["event_time"])


# -- stream mode --------------------------------------------------------------------------

BATCH = 75  # Kafka records per micro-batch (about 75 minutes of events)
STREAM_SEED = 139  # among its trip requests, later ones reach the stream in earlier batches
JITTER = 110.0  # on-time events arrive up to 110 s after they happen: within the 2 minutes


def test_rider_trips_stream(  # type: ignore[no-untyped-def]
    spark, rocksdb, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """The same JOB from Kafka, events in arrival order: on-time events out of order by up
    to 110 s (under the 2-minute watermark delay) and some events hours late."""
    events = rider_events(
        riders=25, start=START, hours=6, seed=STREAM_SEED, late_fraction=0.4, max_jitter=JITTER
    )
    hours_late = [e for e in events if e["arrival_time"] - e["event_time"] > timedelta(hours=1)]
    # The generator's late events are driver ratings, which are not trips; every second
    # one becomes a trip request sent hours late (queued while the phone was offline), so
    # the rows the watermark drops change trip_counts and must be accounted for.
    for e in hours_late[::2]:
        e["event_type"] = "request_trip"
    flush_at = events[-1]["event_time"] + timedelta(days=1)
    # far-future events of another rider: the batch that reads the first of them moves the
    # watermark past every real event, and the next batch (there is one: BATCH + 1 of
    # them) fires the timers of every trip request still waiting
    flush = flush_events(flush_at, BATCH + 1)
    delivered = arrival_order(events) + flush  # Kafka offset i holds delivered[i]
    topic, out = new_topic(prefix="rider-events"), f"trips_{uid()}"
    produce(kafka_bootstrap, topic, delivered)
    config = example_config(
        "rider_trips",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": BATCH,
                    }
                }
            },
            "outputs": {
                "trip_counts": {"hive": {"table": f"{out}_counts"}},
                "arrivals": {"hive": {"table": f"{out}_arrivals"}},
            },
        },
        scratch,
    )
    # available-now: the stream drains the topic in BATCH-record micro-batches and stops
    # when it has read everything there (stream mode, Kafka in, production tables out)
    t0, started = time.monotonic(), datetime.now(UTC)
    result = run_job(
        spark, rider_trips.JOB, config, RunOptions("stream", trigger="available-now", timeout=500)
    )
    elapsed = time.monotonic() - t0
    assert result.status == "finished"
    assert result.job is rider_trips.JOB  # the very object the backfill test runs
    for name in ("trip_counts", "arrivals"):
        assert result.tracker.stats[name].input_rows == len(delivered), name

    # Which events the stream dropped is decided by its own batches: the offsets each read
    # and the watermark of the batch BEFORE it (Spark filters late input by the previous
    # batch's watermark and evicts state by the current one); late means event time <=
    # that watermark. transformWithState filters late rows only in timeMode "EventTime".
    history = result.tracker.stats["trip_counts"].history
    late, batch_of = dropped_by_watermark(history, dict(enumerate(delivered)))
    assert len(batch_of) == len(delivered)
    late_ids = {e["event_id"] for e in late}
    on_time = [e for e in events if e["event_id"] not in late_ids]
    # the data exercises what a per-batch numbering would get wrong: a rider's on-time
    # trip requests reaching the stream in different batches, the later one first
    swapped = [
        (a["event_id"], b["event_id"])
        for a in on_time
        for b in on_time
        if a["event_type"] == b["event_type"] == "request_trip"
        and a["rider_id"] == b["rider_id"]
        and a["event_time"] < b["event_time"]
        and batch_of[a["event_id"]] > batch_of[b["event_id"]]
    ]
    rows = table_rows(spark, f"{out}_counts", ["rider_id", "event_id", "event_time", "trip_number"])
    print(
        f"stream: {len(delivered)} records ({len(events)} events, {len(hours_late)} hours "
        f"late, {len(flush)} flush) in {len(history)} batches, {len(late)} dropped late "
        f"(reported {result.dropped_late('trip_counts')}), {len(swapped)} cross-batch "
        f"swapped trip pairs, {len(rows)} trip rows, {elapsed:.0f}s"
    )
    assert swapped

    # trip_counts == the by-hand numbering of the events the stream did not drop
    assert len(rows) == len({r[1] for r in rows}), "no duplicates"
    assert set(rows) == trip_numbers_by_hand(on_time)
    # the run reports each dropped row; all of them are hours late, while the hours-late
    # events that still came in ahead of the watermark are numbered in event-time order
    assert result.dropped_late("trip_counts") == len(late)
    assert late_ids < {e["event_id"] for e in hours_late}
    # against the backfill truth: per rider, exactly its late trip requests are missing,
    # and only those riders' rows differ (their later trips are numbered one lower)
    truth = trip_numbers_by_hand(events)
    late_trips = Counter(e["rider_id"] for e in late if e["event_type"] == "request_trip")
    assert late_trips, "some dropped rows are trip requests"
    assert Counter(r[0] for r in truth) - Counter(r[0] for r in rows) == late_trips
    assert {r[0] for r in truth ^ set(rows)} == set(late_trips)

    # Processing-time windows say when the stream saw the data, so they cannot be compared
    # window by window with a backfill (which reads hours of event time per minute); yet
    # principle 4 wants them to work in both modes. In a stream every delivered record,
    # late or not, is counted exactly once: the window is not on event time, so the
    # watermark drops nothing here (update mode: a window's last count is its final one).
    arrivals = table_rows(spark, f"{out}_arrivals", ["processed_start", "event_type", "events"])
    final: dict[tuple[int, str], int] = {}
    for start, kind, count in arrivals:
        final[(start, kind)] = max(count, final.get((start, kind), 0))
    totals: Counter[str] = Counter()
    for (_, kind), count in final.items():
        totals[kind] += count
    assert totals == Counter(e["event_type"] for e in delivered)
    assert result.dropped_late("arrivals") == 0
    # the windows are those of the run's wall clock (1-minute windows, aligned)
    assert min(start for start, _ in final) >= micros(started) - 60 * 1_000_000
