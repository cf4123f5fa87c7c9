"""Arbitrary state (transformWithStateInPandas: running trip count per rider) and a
processing-time window, run by the runtime from Hive, checked against hand-made truths."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest
from runtime_helpers import example_config, micros, table_rows, uid

from kappaplus.examples import rider_trips
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.runtime.cli import ROCKSDB
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

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
    result = run_job(spark, rider_trips.JOB, config, RunOptions("backfill", START, END))
    assert result.status == "finished"
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
