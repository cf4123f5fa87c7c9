"""The state-heavy bench reads spill, memory and state figures from Spark's event log: the
rolling layout Spark 4 writes (``eventlog_v2_<app>/events_<n>_<app>``) and its own status
files next to it, every task counted once, the end-of-input marker batch included."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_state  # noqa: E402

PROGRESS = "org.apache.spark.sql.streaming.StreamingQueryListener$QueryProgressEvent"


def task(spilled: int, disk: int, peak: int, cpu_ns: int) -> dict:
    metrics = {
        "Memory Bytes Spilled": spilled,
        "Disk Bytes Spilled": disk,
        "Peak Execution Memory": peak,
        "Executor CPU Time": cpu_ns,
        "JVM GC Time": 5,
    }
    return {"Event": "SparkListenerTaskEnd", "Task Metrics": metrics}


def progress(rows: int, state: int, updates_ms: int, removals_ms: int) -> dict:
    operator = {
        "numRowsTotal": state,
        "memoryUsedBytes": 100 * state,
        "allUpdatesTimeMs": updates_ms,
        "allRemovalsTimeMs": removals_ms,
    }
    return {
        "Event": PROGRESS,
        "progress": {
            "durationMs": {"addBatch": 1000, "queryPlanning": 10},
            "sources": [{"numInputRows": rows}],
            "stateOperators": [operator],
        },
    }


def test_spill_memory_and_state_come_from_every_event_file(tmp_path: Path) -> None:
    app = tmp_path / "eventlog_v2_local-1"
    app.mkdir()
    first = [task(10, 1, 300, 2_000_000), progress(500, 40, 7, 1)]
    second = [
        task(20, 2, 700, 3_000_000),
        {"Event": "SparkListenerStageExecutorMetrics", "Executor Metrics": {"JVMHeapMemory": 9}},
        progress(1, 0, 0, 4),  # the end-of-input marker batch
    ]
    (app / "events_1_local-1").write_text("".join(json.dumps(e) + "\n" for e in first))
    (app / "events_2_local-1").write_text("".join(json.dumps(e) + "\n" for e in second))
    (app / "appstatus_local-1").write_text("")
    (app / ".events_1_local-1.crc").write_bytes(b"\x00\x01")

    got = bench_state.spark_side(tmp_path)

    assert (got.memory_spilled, got.disk_spilled) == (30, 3)
    assert (got.peak_task_execution, got.peak_heap) == (700, 9)
    assert got.task_cpu_ms == 5.0 and got.task_gc_ms == 10
    assert (got.batches, got.input_rows) == (2, 501)
    assert (got.state_rows, got.state_memory) == (40, 4000)
    assert (got.state_updates_ms, got.state_removals_ms) == (7, 5)
    assert got.phases_ms == {"addBatch": 2000, "queryPlanning": 20}


def test_no_event_log_is_all_zero(tmp_path: Path) -> None:
    assert bench_state.spark_side(tmp_path) == bench_state.SparkSide()


def way(name: str, round_: int, seconds: float, status: int = 0) -> bench_state.Way:
    return bench_state.Way(7, name, round_, seconds, 1.0, status, "t", bench_state.SparkSide())


def test_ratios_pair_each_round_and_skip_a_round_that_did_not_finish() -> None:
    tops = [way("D", 0, 30.0), way("D", 1, 45.0), way("D", 2, 99.0)]
    bottoms = [way("B", 0, 20.0), way("B", 1, 20.0), way("B", 2, 10.0, status=1)]
    assert bench_state.median_ratio(tops, bottoms, "seconds") == (1.5 + 2.25) / 2
    assert bench_state.median_ratio(tops[2:], bottoms[2:], "seconds") is None


def test_the_file_stream_way_reads_files_in_event_time_order(tmp_path: Path) -> None:
    # written in another order than their hours, as a generator's tasks finish
    hours = ["dt=2024-03-02/hr=00", "dt=2024-03-01/hr=23", "dt=2024-03-01/hr=09"]
    for i, hour in enumerate(hours):
        (tmp_path / hour).mkdir(parents=True)
        (tmp_path / hour / f"part-{i}.parquet").write_bytes(b"x")
    (tmp_path / "_SUCCESS").write_bytes(b"")
    assert bench_state.files_in_event_time_order(str(tmp_path)) == 3
    files = sorted(tmp_path.rglob("*.parquet"), key=lambda p: p.stat().st_mtime)
    assert [str(p.parent.relative_to(tmp_path)) for p in files] == sorted(hours)


def test_the_report_of_a_run_without_a_gives_d_against_b() -> None:
    import argparse

    ways = [way("B", 0, 20.0), way("D", 0, 25.0)]
    for w in ways:
        w.compared = {
            "sessions": 10,
            "events": 40,
            "missing": 0 if w.way == "B" else 2,
            "extra": 0,
            "reference": "B",
            "expected_sessions": 10,
            "expected_events": 40,
        }
    args = argparse.Namespace(driver_memory="1g", rows_per_day=100_000, timeout=60.0)
    text = bench_state.render(ways, args, "2 CPUs")
    summary = next(line for line in text.splitlines() if line.startswith("| 7 | -"))
    assert summary.endswith("| 1 of 1 | 1.25x | - |"), summary
    assert "DIFFERENT (2 missing, 0 extra)" in text
