"""Eviction batches (``evictBetweenSlices``, on by default for jobs that keep rows in state):
a session-window backfill over several slices gives the same sessions as the hand-made
truth with and without them, runs one empty micro-batch after each data slice, and writes
each session into the state store about once instead of about twice (the closed sessions of
a slice leave the store before the next slice's rows are merged with the stored ones)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from runtime_helpers import SESSION_COLUMNS, example_config, sessions_by_hand, table_rows, uid

from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START, END = "2024-03-01T00:00:00", "2024-03-01T12:00:00"
SLICES = {"maxEventTimePerTrigger": "4 hours"}
RIDERS = 60
COLUMNS = SESSION_COLUMNS


def test_eviction_batches_write_each_session_once(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=RIDERS, start=START, hours=12, seed=5, late_fraction=0.0)
    truth = sessions_by_hand(events, 30 * 60)
    table = f"rider_events_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    results = {}
    for evict in (None, False):  # None: the default, on for a session window
        out = f"rider_sessions_{uid()}"
        hive: dict[str, Any] = {"table": table}
        if evict is not None:
            hive["evictBetweenSlices"] = evict
        config = example_config(
            "sessionization",
            {
                "inputs": {"rider_events": {"hive": hive}},
                "outputs": {"sessions": {"hive": {"table": out}}},
                "mode": {"backfill": {"inputs": {"rider_events": {"hive": SLICES}}}},
            },
            scratch / str(evict),
        )
        result = run_job(spark, sessionization.JOB, config, RunOptions("backfill", START, END))
        assert result.status == "finished"
        rows = table_rows(spark, f"{out}_backfill", COLUMNS)
        assert len(rows) == len(set(rows)), "no duplicates"
        assert set(rows) == truth, evict
        history = result.tracker.stats["sessions"].history
        evictions = [b for b in history if any(_evicts(o) for o in b.end_offsets)]
        results[evict] = (result, evictions)

    (on, on_evictions), (off, off_evictions) = results[None], results[False]
    data_slices = [
        b for b in on.tracker.stats["sessions"].history if b.input_rows and not _marker(b)
    ]
    # 12 hours in 4-hour slices: an eviction batch after each but the last (the end marker's)
    assert len(data_slices) >= 3
    assert len(on_evictions) == len(data_slices) - 1, (len(on_evictions), len(data_slices))
    assert all(b.input_rows == 0 for b in on_evictions)
    assert off_evictions == []
    # every session is put once when it closes (or once more when a slice boundary cut it);
    # without eviction batches the next slice rewrites the closed ones before evicting them
    puts_on = sum(b.state_rows_updated for b in on.tracker.stats["sessions"].history)
    puts_off = sum(b.state_rows_updated for b in off.tracker.stats["sessions"].history)
    # with them: each session once, plus at most one rewrite per rider at each slice boundary
    # (its session still open there, merged with the next slice's events)
    assert len(truth) <= puts_on <= len(truth) + len(on_evictions) * RIDERS, (puts_on, len(truth))
    # without: the next slice also rewrites every closed session of each rider it touches
    assert puts_off >= puts_on + len(truth) // 3, (puts_off, puts_on)


def _evicts(offset: Any) -> bool:
    import json

    parsed = json.loads(offset) if isinstance(offset, str) else offset
    return bool(isinstance(parsed, dict) and parsed.get("evict"))


def _marker(batch: Any) -> bool:
    import json

    for offset in batch.end_offsets:
        parsed = json.loads(offset) if isinstance(offset, str) else offset
        if isinstance(parsed, dict) and parsed.get("phase") == "end":
            return True
    return False
