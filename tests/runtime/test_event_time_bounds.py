"""Event-time sanity bounds: an event dated 9999-12-31 or 1970-01-01 goes to the dead
letters with its reason and is counted; the stream's watermark never sees it, so no later
event is dropped as late and no absurd partition appears."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from runtime_helpers import (
    FLUSH_RIDER,
    example_config,
    flush_events,
    sessions_by_hand,
    table_rows,
    uid,
)

from kappaplus.config import EventTimeBounds
from kappaplus.core.errors import ConfigError
from kappaplus.examples import sessionization
from kappaplus.examples.generate import arrival_order, produce, rider_events
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.runtime.state.records import read_checkpoint

START = "2024-03-01T00:00:00"
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
GAP = 30 * 60


def test_bounds_are_validated_with_sensible_defaults() -> None:
    bounds = EventTimeBounds()
    assert bounds.min == "1970-01-02T00:00:00" and bounds.max is None
    assert bounds.max_future == "1 day"
    assert EventTimeBounds(max_future="none").max_future is None
    with pytest.raises(ValueError, match="before max"):
        EventTimeBounds(min="2024-01-02", max="2024-01-01")
    from kappaplus.config import config_from_dict

    raw = {
        "inputs": {
            "a": {
                "hive": {"table": "t", "event_time_column": "ts"},
                "event_time_bounds": {"max_future": "soon"},
            }
        },
        "outputs": {"o": {"hive": {"table": "o"}}},
    }
    with pytest.raises(ConfigError, match="event_time_bounds.max_future"):
        config_from_dict(raw)


def _poison(rider: str, when: datetime, n: int) -> dict[str, object]:
    return {
        "event_id": f"poison{n}",
        "rider_id": rider,
        "event_type": "app_open",
        "area": "downtown",
        "event_time": when,
        "arrival_time": when,
    }


@pytest.mark.slow
def test_absurd_event_times_are_dead_letters_and_never_move_the_watermark(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    events = rider_events(riders=8, start=START, hours=4, seed=5, late_fraction=0.0)
    topic = new_topic(prefix="bounds")
    out, dlq_table = f"ses_{uid()}", f"dlq_{uid()}"
    config = example_config(
        "sessionization",
        {
            "inputs": {
                "rider_events": {
                    "kafka": {
                        "topic": topic,
                        "bootstrap_servers": kafka_bootstrap,
                        "maxOffsetsPerTrigger": 40,
                        "dlq": {"topic": None, "table": dlq_table},
                    },
                }
            },
            "outputs": {"sessions": {"hive": {"table": out}}},
        },
        scratch,
    )
    ordered = arrival_order(events)
    half = len(ordered) // 2
    poison = [
        _poison("poisoned", datetime(9999, 12, 31, 23, 59, tzinfo=UTC), 1),
        _poison("poisoned", datetime(1970, 1, 1, tzinfo=UTC), 2),
    ]
    flush = flush_events(events[-1]["event_time"] + timedelta(days=1), 80)
    produce(kafka_bootstrap, topic, ordered[:half] + poison)
    produce(kafka_bootstrap, topic, ordered[half:] + flush)

    stream = run_job(
        spark, sessionization.JOB, config, RunOptions("stream", trigger="available-now")
    )
    assert stream.status == "finished"
    counts = stream.record.inputs["rider_events"]
    assert counts["out_of_bounds"] == 2, counts
    assert stream.rows_dropped_late == 0, "the watermark never moved to 9999"
    watermark = read_checkpoint(stream.record.checkpoints["sessions"]).watermark_ms
    assert watermark is not None and watermark < 4102444800000, "watermark before 2100"

    rows = [r for r in table_rows(spark, out, COLUMNS) if r[0] != FLUSH_RIDER]
    assert len(rows) == len(set(rows))
    assert set(rows) == {r[:5] for r in sessions_by_hand(events, GAP)}
    partitions = {str(r[0]) for r in spark.sql(f"SHOW PARTITIONS {out}").collect()}
    assert not any("9999" in p or "1970" in p for p in partitions), partitions

    dead = spark.table(dlq_table).select("reason").collect()
    reasons = sorted(str(r[0]) for r in dead)
    assert len(reasons) == 2, reasons
    assert any("9999-12-31" in r and "max_future" in r for r in reasons), reasons
    assert any("1970-01-01" in r and "min" in r for r in reasons), reasons
