"""The stream bench's latency by minute: each minute of event time after the first gets the
p99 of its own rows, so a latency that grows as the run goes on (the embedded broker's
topic growing) shows as a rise, not as one figure for the whole run."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_stream  # noqa: E402


def test_each_minute_after_the_first_has_the_p99_of_its_own_rows() -> None:
    began = 1_000.0
    # one row every 10 ms for 4 minutes; latency 2 s + 1 s per minute of the run, and the
    # first minute's rows (a fresh driver's first micro-batch) 20 s late
    rows = []
    for i in range(24_000):
        at = began + i / 100
        minute = int((at - began) // 60)
        rows.append((at, 20.0 if minute == 0 else 2.0 + minute))
    by_minute = bench_stream.p99_by_minute(rows, began)
    assert by_minute == [(60, 120, 3.0), (120, 180, 4.0), (180, 240, 5.0)]
    # the rows before the producer's start (clock skew) and of the first minute are left out
    early = [(began - 5.0, 99.0), *rows]
    assert bench_stream.p99_by_minute(early, began) == by_minute
