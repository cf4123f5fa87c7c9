"""Honest progress: ETA after warm-up from event-time progress, rows counted once (markers
excluded) equal in the live line and the summary, slices and marker batches apart, and
``kappa status`` in 80 columns. Pure logic: synthetic Spark progress entries."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from kappaplus.cli import app
from kappaplus.cli.run import compact_status_lines, summary_lines
from kappaplus.runtime.observe.progress import WARMUP_BATCHES, ProgressTracker
from kappaplus.runtime.state.records import FINISHED, RunRecord


def entry(
    batch: int, done: float, rows: int, seconds: float, phase: str = "data"
) -> dict[str, Any]:
    start = json.dumps({"phase": "data", "done": max(done - 0.1, 0.0)})
    end = json.dumps({"phase": phase, "done": done})
    marker = phase == "end"
    return {
        "batchId": batch,
        "numInputRows": rows,
        "processedRowsPerSecond": rows / seconds,
        "durationMs": {"addBatch": 1, "triggerExecution": int(seconds * 1000)},
        "sources": [{"startOffset": start, "endOffset": end}],
        # the job sees every row of a slice and none of a marker batch
        "observedMetrics": {"kappa_audit.job.rides": {"rows": 0 if marker else rows}},
    }


def record(**fields: Any) -> RunRecord:
    """A run record of a test: these fields over a finished backfill's."""
    defaults: dict[str, Any] = {
        "run_id": "r",
        "job": "ride-counts",
        "job_path": None,
        "mode": "backfill",
        "status": FINISHED,
        "trigger": "available-now",
        "started_at": time.time(),
        "updated_at": time.time(),
        "pid": os.getpid(),
    }
    return RunRecord(**{**defaults, **fields})


def test_no_eta_before_warm_up_then_the_rate_after_it() -> None:
    tracker = ProgressTracker(["counts"])
    stats = tracker.stats["counts"]
    # batch 0 pays the warm-up: 300 s for 1% of the event time; then 1% per 2 s
    stats.add(entry(0, 0.01, 100, 300.0), now=300.0)
    assert tracker.eta_seconds(now=300.0) is None
    t, done = 300.0, 0.01
    for batch in range(1, 10):
        t, done = t + 2.0, done + 0.01
        stats.add(entry(batch, done, 100, 2.0), now=t)
        eta = tracker.eta_seconds(now=t)
        if batch < WARMUP_BATCHES:
            assert eta is None
        else:
            # 0.9 left at 1% per 2 s: about 180 s; extrapolating from the start of the
            # run (302 s for 2%) would have said hours
            assert eta is not None and abs(eta - (1.0 - done) / 0.01 * 2.0) < 1.0, eta
    later = tracker.eta_seconds(now=t + 10)
    assert later is not None and abs(later - ((1.0 - done) / 0.01 * 2.0 - 10)) < 1e-6


def test_rows_counted_once_equal_in_line_table_and_summary() -> None:
    tracker = ProgressTracker(["counts"])
    for batch in range(4):
        tracker.update("counts", [entry(batch, 0.25 * (batch + 1), 1000, 1.0)])
    tracker.update("counts", [entry(4, 1.0, 1, 0.5, "end"), entry(4, 1.0, 1, 0.5, "end")])
    tracker.update("counts", [entry(5, 1.0, 1, 0.5, "end"), entry(6, 1.0, 1, 0.5, "end")])
    stats = tracker.stats["counts"]
    assert stats.input_rows == 4003  # Spark's count includes the 3 marker rows
    assert stats.rows == 4000
    assert (stats.data_batches, stats.marker_batches) == (4, 3)
    assert stats.throughput == 1000.0  # over the slices only
    assert "rows=4000 " in tracker.line()
    table = tracker.table("t")
    assert table.columns[2]._cells == ["4000"]
    # rows/s as the summary's, over the slices: not the last (marker) batch's 2 rows/s
    assert table.columns[3]._cells == ["1000"]
    summary = summary_lines(
        record(started_at=0.0, ended_at=6.0, outputs={"counts": stats.as_json()})
    )
    row = next(line for line in summary if line.strip().startswith("counts"))
    assert row.split()[1:4] == ["4+3", "4,000", "1,000"], row
    assert all(len(line) <= 80 for line in summary), summary


def test_status_fits_80_columns(tmp_path: Path) -> None:
    name = "a-job-with-a-rather-long-name-for-a-status-table-" + str(os.getpid())
    failed = record(
        run_id=f"{name}-backfill-20240301T000000Z-{os.getpid()}",
        job=name,
        status="failed",
        start="2024-03-01T00:00:00Z",
        end="2024-05-01T00:00:00Z",
        error="KappaError: query counts failed: " + "a long stack trace line " * 20,
        outputs={"counts": {"rows": 12_345_678, "rows_dropped_late": 0}},
        inputs={"rides": {"dead_letters": 1234, "dead_letter_table": "lake.dlq"}},
    )
    failed.save()
    result = CliRunner().invoke(app, ["status", "--job", name], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines and all(len(line) <= 80 for line in lines), lines
    row = next(line for line in lines if line.startswith("a-job"))
    assert row.split()[-3:] == ["12.3M", "0", "1.2k"], row
    wide = CliRunner().invoke(app, ["status", "--job", name, "--wide"], env={"COLUMNS": "200"})
    assert wide.exit_code == 0 and "2024-05-01" in wide.output and "run" in wide.output
    data = json.loads(CliRunner().invoke(app, ["status", "--job", name, "--json"]).output)
    assert data[-1]["dead_letters"] == 1234 and data[-1]["rows"] == 12_345_678
    assert compact_status_lines([], 80)[0].startswith("JOB")


class _FinishedQuery:
    """A query that ended by itself (available-now) after one batch: what wait_for_queries
    reads of a StreamingQuery."""

    name = "counts"
    isActive = False
    recentProgress = [entry(0, 1.0, 21296, 2.0)]

    def exception(self) -> None:
        return None


class _LateListener:
    """Spark's listener bus before the batch's event arrived: nothing to take yet."""

    def arm(self) -> None:
        pass

    def take(self, name: str) -> list[Any]:
        return []

    def wait(self, seconds: float) -> None:
        pass


def test_the_last_frame_shows_a_finished_querys_batches_before_their_event_arrives(
    tmp_path: Path,
) -> None:
    from io import StringIO

    from rich.console import Console

    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.waiting import wait_for_queries

    tracker = ProgressTracker(["counts"])
    running = record(run_id="archive-run", job="archive", mode="stream", status="running")
    running.save = lambda: None  # type: ignore[method-assign]
    out = StringIO()
    console = Console(file=out, width=120, force_terminal=False)
    status = wait_for_queries(
        {"counts": _FinishedQuery()},  # type: ignore[dict-item]
        tracker,
        running,
        RunOptions(mode="stream", progress=True),
        console,
        events=_LateListener(),  # type: ignore[arg-type]
    )
    assert status == FINISHED
    assert tracker.stats["counts"].batches == 1
    last_frame = out.getvalue().split("archive-run")[-1]
    row = next(line for line in last_frame.splitlines() if "counts" in line)
    assert [cell.strip() for cell in row.split("│")[1:5]] == ["counts", "1", "21296", "10648"]
