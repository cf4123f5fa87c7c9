"""Jobs bound to an Iceberg table (``[inputs.<name>.iceberg]``): a backfill, and a bootstrap
from the table's pinned snapshot up to the cutoff, then Kafka (embedded broker). The
sessionization job's output equals the hand-made ground truth over the events written
(sessions_by_hand), not a re-read of the table."""

from __future__ import annotations

import sys
from datetime import datetime, timedelta
from pathlib import Path

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

sys.path.insert(0, str(Path(__file__).parents[1]))
from iceberg_tables import catalog_props, write_events  # noqa: E402

START = "2024-03-01T00:00:00"
T0 = datetime.fromisoformat(START + "+00:00")
CUTOFF = T0 + timedelta(hours=5)
RETAINED_FROM = T0 + timedelta(hours=4)
LAKE_UNTIL = T0 + timedelta(hours=6)
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
COLUMNS += ["trip_requested"]
GAP = 30 * 60


def test_backfill_from_iceberg_equals_truth(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=20, start=START, hours=6, seed=11, late_fraction=0.0)
    props = catalog_props(scratch / "catalog")
    name, out = f"db.rides_{uid()}", f"sessions_{uid()}"
    write_events(props, name, events)
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "hive": None,
                    "iceberg": {"table": name, "event_time_column": "event_time", "catalog": props},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
            # the example slices its Hive history by 2 hours: not this binding's
            "mode": {"backfill": {"inputs": {"rider_events": {"hive": None}}}},
        },
        scratch,
    )
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


def test_bootstrap_iceberg_then_kafka_equals_truth(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(riders=20, start=START, hours=8, seed=5, late_fraction=0.0)
    lake = [e for e in events if e["event_time"] < LAKE_UNTIL]
    kafka = [e for e in arrival_order(events) if e["arrival_time"] >= RETAINED_FROM]
    assert {e["event_id"] for e in lake} | {e["event_id"] for e in kafka} == {
        e["event_id"] for e in events
    }, "lake and Kafka together hold every event"
    assert all(e["arrival_time"] >= RETAINED_FROM for e in events if e["event_time"] >= CUTOFF)
    props = catalog_props(scratch / "catalog")
    name, out, topic = f"db.lake_{uid()}", f"sessions_{uid()}", new_topic(prefix="iboot")
    write_events(props, name, lake)
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 3)
    produce(kafka_bootstrap, topic, kafka + flush)
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {"topic": topic, "bootstrap_servers": kafka_bootstrap},
                    "hive": None,
                    "iceberg": {"table": name, "event_time_column": "event_time", "catalog": props},
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
            "mode": {"backfill": {"inputs": {"rider_events": {"hive": None}}}},
        },
        scratch,
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
