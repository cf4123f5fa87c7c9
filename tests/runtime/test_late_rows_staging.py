"""The late-row tap's pure parts: the watermark it judges by, idempotent staging, and
pass-through outside a streaming task (kappaplus.runtime.side_outputs.late_rows)."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from kappaplus.core.late_rules import LateRule
from kappaplus.runtime.side_outputs.late_rows import (
    INPUT_COLUMN,
    WATERMARK_COLUMN,
    LateRowsPlan,
    LateRowTap,
    late_watermark,
    stage,
)


def _plan(tmp_path: Path) -> LateRowsPlan:
    return LateRowsPlan(
        "counts",
        LateRule("event_time"),
        str(tmp_path / "cp" / "counts"),
        str(tmp_path / "cp" / "_late" / "counts"),
        "counts_late",
        "ts",
    )


def _batch(ids: list[int]) -> pa.RecordBatch:
    ts = pa.array([i * 1_000_000 for i in ids], pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    return pa.RecordBatch.from_arrays([pa.array(ids, pa.int64()), ts], ["id", "ts"])


def test_late_rows_are_judged_by_the_previous_batchs_watermark(tmp_path: Path) -> None:
    offsets = tmp_path / "cp" / "offsets"
    offsets.mkdir(parents=True)
    meta = {"batchWatermarkMs": 1_700_000_000_123, "batchTimestampMs": 1}
    (offsets / "4").write_text("v1\n" + json.dumps(meta) + '\n{"x": 1}\n')
    assert late_watermark(tmp_path / "cp", 5) == 1_700_000_000_123_000
    assert late_watermark(tmp_path / "cp", 0) == 0, "batch 0: no watermark, nothing late"
    assert late_watermark(tmp_path / "cp", 9) == 0, "no offset log entry: nothing reported"


def test_a_retried_task_replaces_its_staged_rows(tmp_path: Path) -> None:
    plan = _plan(tmp_path)
    stage(plan, 3, "rides", 0, [_batch([1, 2, 3])], 5_000_000)
    stage(plan, 3, "rides", 0, [_batch([1, 2])], 5_000_000)  # the retry: its own rows only
    stage(plan, 3, "rides", 1, [_batch([7])], 5_000_000)
    files = sorted(plan.batch_dir(3).glob("*.parquet"))
    assert [f.name for f in files] == ["rides-0.parquet", "rides-1.parquet"]
    assert not list(plan.batch_dir(3).glob(".*")), "no temporary file left behind"
    rows = pa.concat_tables([pq.read_table(f) for f in files])
    assert sorted(rows.column("id").to_pylist()) == [1, 2, 7]
    assert set(rows.column(INPUT_COLUMN).to_pylist()) == {"rides"}
    assert rows.column(WATERMARK_COLUMN).cast(pa.int64()).to_pylist() == [5_000_000] * 3


def test_outside_a_streaming_task_the_tap_only_passes_rows_through(tmp_path: Path) -> None:
    tap = LateRowTap("rides", "ts", [_plan(tmp_path)])
    batches = [_batch([1, 2]), _batch([3])]
    assert list(tap(iter(batches))) == batches
    assert not (tmp_path / "cp" / "_late").exists()
