"""Ctrl-C stops a backfill cleanly, and running it again resumes from the checkpoint: the
output equals the hand-made ground truth, with no duplicate and no lost session."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

from runtime_helpers import example_config, sessions_by_hand, table_rows, uid

from kappaplus.examples import sessionization
from kappaplus.examples.generate import RIDER_EVENT_DDL, rider_events, write_table
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job
from kappaplus.runtime.state.records import STOPPED, exit_code, list_runs, read_checkpoint

START, END = "2024-03-01T00:00:00", "2024-03-01T12:00:00"
COLUMNS = ["rider_id", "session_start", "session_end", "event_count", "event_types"]
STOP_AFTER = 5  # committed micro-batches (one hour of event time each) before Ctrl-C


def _interrupt_after(commits: int, root: Path, done: threading.Event) -> threading.Thread:
    """A thread that sends this process SIGINT (as Ctrl-C does) once a query under ``root``
    has committed ``commits`` micro-batches."""

    def watch() -> None:
        deadline = time.monotonic() + 300
        while not done.is_set() and time.monotonic() < deadline:
            if any(root.glob(f"**/commits/{commits - 1}")):
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_ctrl_c_stops_cleanly_and_the_rerun_resumes(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    events = rider_events(riders=30, start=START, hours=12, seed=3, late_fraction=0.2)
    table, out = f"rider_events_{uid()}", f"rider_sessions_{uid()}"
    write_table(spark, table, events, RIDER_EVENT_DDL)
    config = example_config(
        "sessionization",
        {
            "inputs": {"rider_events": {"hive": {"table": table}}},
            "outputs": {"sessions": {"hive": {"table": out}}},
            "mode": {
                "backfill": {
                    "watermark_delay": "1 hour",
                    "inputs": {"rider_events": {"hive": {"maxEventTimePerTrigger": "1 hour"}}},
                }
            },
        },
        scratch,
    )
    options = RunOptions("backfill", START, END, poll_seconds=0.2)

    done = threading.Event()
    watcher = _interrupt_after(STOP_AFTER, scratch / "checkpoints", done)
    try:
        first = run_job(spark, sessionization.JOB, config, options)
    finally:
        done.set()
        watcher.join()
    assert first.status == STOPPED
    active = [(q.name, q.isActive, str(q.status)) for q in spark.streams.active]
    assert not active, f"Ctrl-C stops every query of the run: {active}"
    recorded = {r.run_id: r for r in list_runs()}[first.record.run_id]
    assert recorded.status == STOPPED and recorded.ended_at is not None
    assert recorded.stopped_by == "ctrl-c" and exit_code(recorded) == 130
    state = read_checkpoint(first.record.checkpoints["sessions"])
    stopped_at = state.done()
    assert stopped_at is not None and 0 < stopped_at < 1, "stopped part way"
    partial = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert partial and len(partial) == len(set(partial)), "sessions written, none twice"

    # the same command again: resumes from the checkpoint, finishes the range
    second = run_job(spark, sessionization.JOB, config, options)
    assert second.status == "finished"
    history = second.tracker.stats["sessions"].history
    assert history and min(b.batch_id for b in history) >= STOP_AFTER, "resumed, not started over"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    assert len(rows) == len(set(rows)), "no duplicates"
    truth = {r[:5] for r in sessions_by_hand(events, 30 * 60)}
    assert set(rows) == truth
    assert read_checkpoint(second.record.checkpoints["sessions"]).done() == 1.0
    print(
        f"stopped at {stopped_at:.0%} of the range with {len(partial)} sessions written; "
        f"the rerun wrote {len(rows) - len(partial)} more in {len(history)} batches"
    )
