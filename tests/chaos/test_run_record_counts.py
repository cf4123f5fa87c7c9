"""Run records add up after kill -9 (issue 47, item 8).

A backfill (``kappa run``, its own process) is killed with SIGKILL after it committed two
micro-batches, and the same command resumes it. The output equals the sessions computed by
hand, and the two run records' rows sum to the rows of the input: every committed batch is
counted once, by the run that committed it (a batch the killed run committed after its
record's last save, or the batch it left planned and the resumed run replayed, counted by
neither before: 2,819 of 3,000). The interrupted run's fraction done is where its committed
batches reached, and the resumed run starts from there.
"""

from __future__ import annotations

import json
import signal
import sys
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).parents[1] / "runtime"))

import chaos  # noqa: E402
from runtime_helpers import sessions_by_hand  # noqa: E402

from kappaplus.runtime.state.records import (  # noqa: E402
    FINISHED,
    RunRecord,
    list_runs,
    read_checkpoint,
)

RIDERS, SEED, HOURS = 12, 7, 6
GAP = 30 * 60


def output_rows(home: Path, table: str) -> list[list[Any]]:
    """The sessions of ``table`` as the ground truth's tuples (times in epoch micros)."""
    out = chaos._python(
        home,
        f"""
        import json
        from kappaplus.core.jvm import shutdown_jvm
        from kappaplus.local.metastore import LOCAL_DISCOVERY
        from kappaplus.session import create_session, stop_session
        spark = create_session("counts-read", metastore_discovery=LOCAL_DISCOVERY)
        rows = spark.sql(
            "SELECT rider_id, unix_micros(session_start), unix_micros(session_end), "
            "event_count, event_types, trip_requested FROM {table}"
        ).collect()
        print(json.dumps([list(r) for r in rows]))
        stop_session(spark)
        shutdown_jvm()
        """,
    )
    return list(json.loads(out.strip().splitlines()[-1]))


def the_input() -> list[dict[str, Any]]:
    from kappaplus.examples.generate import rider_events

    events = rider_events(
        riders=RIDERS, start=chaos.START, hours=HOURS, seed=SEED, late_fraction=0.2
    )
    end = datetime.fromisoformat(chaos.end_of(HOURS) + "+00:00")
    return [e for e in events if e["event_time"] < end]


@pytest.mark.slow  # three processes with Spark (the input, the killed run, the resumed one)
@pytest.mark.timeout(1500)
def test_run_records_of_a_killed_backfill_and_its_resume_add_up(tmp_path: Path) -> None:
    home, table, out = tmp_path, "counted_events", "counted_sessions"
    chaos.prepare(home, table, RIDERS, SEED, HOURS)
    config = chaos.write_config(home, table, out)
    end = chaos.end_of(HOURS)

    killed, log1 = chaos.kappa_run(home, config, interrupt=(signal.SIGKILL, 2), end=end)
    assert killed == -signal.SIGKILL, log1[-2000:]
    interrupted = list_runs(home)
    assert len(interrupted) == 1 and interrupted[0].effective_status() == "interrupted"
    checkpoint = read_checkpoint(next(iter(interrupted[0].checkpoints.values())))
    assert checkpoint.last_commit_batch is not None and checkpoint.last_commit_batch >= 1

    resumed, log2 = chaos.kappa_run(home, config, end=end)
    assert resumed == 0, log2[-3000:]
    first, second = sorted(list_runs(home), key=lambda r: r.started_at)
    assert second.status == FINISHED and first.run_id == interrupted[0].run_id

    # the output: every session once, equal to the sessions computed by hand
    events = the_input()
    got = [
        (r[0], r[1], r[2], r[3], tuple(r[4]), r[5]) for r in output_rows(home, f"{out}_backfill")
    ]
    assert len(got) == len(set(got)), "no session twice"
    assert set(got) == sessions_by_hand(events, GAP)

    # the figures: the two runs' rows are the input's rows, each counted once
    rows = [rows_of(first), rows_of(second)]
    assert sum(rows) == len(events), f"interrupted {rows[0]} + resumed {rows[1]} rows"
    assert rows[0] > 0 and rows[1] > 0
    # the interrupted run's fraction done is that of what it committed; the resumed run
    # starts from there (its first data batch is after it) and ends at 100%
    assert first.done is not None and 0 < first.done < 1
    assert second.done == 1.0
    start = second.outputs["sessions"].get("done_at_start")
    assert start is not None and abs(start - first.done) < 1e-9


def rows_of(record: RunRecord) -> int:
    return int(record.outputs["sessions"]["rows"])
