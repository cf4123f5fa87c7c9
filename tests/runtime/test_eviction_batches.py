"""Dropping what a slice closed before the next slice is merged in, for jobs that keep rows in
state: by default in the slice's own micro-batch (``watermarkAhead``: each slice fixes the
next and moves the watermark to its end), else in an eviction batch after each slice
(``evictBetweenSlices``). A session-window backfill over several slices gives the same
sessions as the hand-made truth all three ways (no row judged late by the watermark that went
ahead); the default runs no eviction batch, eviction batches follow each data slice when
asked for; both write each session into the state store about once instead of about twice
(the closed sessions of a slice leave the store before the next slice's rows are merged with
the stored ones)."""

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


def test_closed_sessions_leave_the_store_before_the_next_slice(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=RIDERS, start=START, hours=12, seed=5, late_fraction=0.0)
    truth = sessions_by_hand(events, 30 * 60)
    table = f"rider_events_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    results = {}
    ways: dict[str, dict[str, Any]] = {
        "default": {},  # on for a session window: the watermark goes ahead
        "eviction batches": {"evictBetweenSlices": True},
        "neither": {"evictBetweenSlices": False},
    }
    for way, settings in ways.items():
        out = f"rider_sessions_{uid()}"
        hive: dict[str, Any] = {"table": table, **settings}
        config = example_config(
            "sessionization",
            {
                "inputs": {"rider_events": {"hive": hive}},
                "outputs": {"sessions": {"hive": {"table": out}}},
                "mode": {"backfill": {"inputs": {"rider_events": {"hive": SLICES}}}},
            },
            scratch / way.replace(" ", "_"),
        )
        result = run_job(spark, sessionization.JOB, config, RunOptions("backfill", START, END))
        assert result.status == "finished"
        rows = table_rows(spark, f"{out}_backfill", COLUMNS)
        assert len(rows) == len(set(rows)), "no duplicates"
        assert set(rows) == truth, way
        history = result.tracker.stats["sessions"].history
        evictions = [b for b in history if any(_offset(o).get("evict") for o in b.end_offsets)]
        data_slices = [b for b in history if b.input_rows and not _marker(b)]
        puts = sum(b.state_rows_updated for b in history)
        results[way] = (history, evictions, data_slices, puts)

    ahead, evicting, neither = results["default"], results["eviction batches"], results["neither"]
    # 12 hours in 4-hour slices: 3 data slices
    assert len(evicting[2]) >= 3 and len(ahead[2]) == len(evicting[2])
    # the default: no eviction batch; every data slice but the last fixed the next one
    assert ahead[1] == []
    fixed = [b for b in ahead[2] if any(_offset(o).get("ahead") for o in b.end_offsets)]
    assert len(fixed) == len(ahead[2]) - 1, (len(fixed), len(ahead[2]))
    # eviction batches when asked for: one after each data slice but the last (the end
    # marker's), reading nothing
    assert len(evicting[1]) == len(evicting[2]) - 1, (len(evicting[1]), len(evicting[2]))
    assert all(b.input_rows == 0 for b in evicting[1])
    assert neither[1] == []
    # with eviction batches every session is put once when it closes, plus at most one
    # rewrite per rider at each slice boundary (its session still open there)
    bound = len(truth) + len(evicting[1]) * RIDERS
    assert len(truth) <= evicting[3] <= bound, (evicting[3], len(truth))
    # the watermark ahead: the same, but the first slice's closed sessions (its batch had no
    # watermark yet), which the second slice's batch rewrites once before dropping them
    assert len(truth) <= ahead[3] <= bound + len(truth) // len(ahead[2]), (ahead[3], len(truth))
    # neither: the next slice also rewrites every closed session of each rider it touches
    assert neither[3] >= ahead[3] + len(truth) // 4, (neither[3], ahead[3], evicting[3])
    print("puts", {way: r[3] for way, r in results.items()}, "sessions", len(truth))


def _offset(offset: Any) -> dict[str, Any]:
    import json

    parsed = json.loads(offset) if isinstance(offset, str) else offset
    return parsed if isinstance(parsed, dict) else {}


def _marker(batch: Any) -> bool:
    return any(_offset(o).get("phase") == "end" for o in batch.end_offsets)
