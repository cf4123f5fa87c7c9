"""The stream's one Python pass after decoding (judge + dead-letter tap), in Arrow alone.

Outside a Spark task there is no publishing query, so nothing is staged: what is checked here
is what crosses back to the JVM: every record, the far-ahead one failed with its reason,
none with its raw key or value, every other column as it came. (Staging and publishing are
tested through real runs in tests/runtime/test_stream_dead_letters.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from kappaplus.codecs.schema import ERROR_COL, RECORD_ARROW_TYPE, RECORD_COL
from kappaplus.core.ahead import AheadRule
from kappaplus.core.event_time import PEERS
from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterTap, without_raw_bytes

BASE = datetime(2026, 11, 1, tzinfo=UTC)


def records(times: list[datetime], errors: list[str | None]) -> pa.RecordBatch:
    n = len(times)
    raw = pa.array(
        [
            {
                "key": f"k{i}".encode(),
                "value": f'{{"i": {i}}}'.encode(),
                "topic": "t",
                "partition": 0,
                "offset": i,
                "timestamp": BASE,
            }
            for i in range(n)
        ],
        type=RECORD_ARROW_TYPE,
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"r{i}" for i in range(n)]),
            pa.array(times, pa.timestamp("us", tz="UTC")),
            pa.array(errors, pa.string()),
            raw,
        ],
        names=["rider_id", "ts", ERROR_COL, RECORD_COL],
    )


def test_judge_and_tap_fail_the_far_record_and_send_back_no_raw_bytes() -> None:
    times = [BASE + timedelta(minutes=i) for i in range(9)] + [BASE + timedelta(days=3)]
    errors: list[str | None] = [None] * 10
    errors[2] = "field 'ts': not a timestamp"
    batch = records(times, errors)
    tap = DeadLetterTap(None, ("ts", AheadRule.parse("1 day")))

    out = pa.Table.from_batches(list(tap(iter([batch.slice(0, 4), batch.slice(4)]))))

    assert out.num_rows == 10
    assert out.column("rider_id").to_pylist() == [f"r{i}" for i in range(10)]
    assert out.column("ts").to_pylist() == times
    reasons = out.column(ERROR_COL).to_pylist()
    assert reasons[2] == "field 'ts': not a timestamp"  # an earlier failure is kept
    assert PEERS in reasons[9]
    assert [i for i, r in enumerate(reasons) if r is not None] == [2, 9]
    raw = out.column(RECORD_COL).combine_chunks()
    assert raw.field("key").null_count == 10 and raw.field("value").null_count == 10
    assert raw.field("offset").to_pylist() == list(range(10))
    assert out.schema == pa.Table.from_batches([batch]).schema


def test_tap_alone_streams_batch_by_batch() -> None:
    batch = records([BASE] * 3, [None, "bad", None])
    out = list(DeadLetterTap(None)(iter([batch.slice(0, 1), batch.slice(1)])))
    assert [b.num_rows for b in out] == [1, 2]
    assert pa.Table.from_batches(out).column(ERROR_COL).to_pylist() == [None, "bad", None]


def test_without_raw_bytes_keeps_null_records_null() -> None:
    raw = pa.array(
        [None, {"key": b"k", "value": b"v", "topic": "t", "partition": 1, "offset": 5}],
        type=RECORD_ARROW_TYPE,
    )
    table = pa.table({RECORD_COL: raw})
    slim = without_raw_bytes(table, RECORD_COL).column(RECORD_COL).combine_chunks()
    assert slim.is_null().to_pylist() == [True, False]
    assert slim.field("partition").to_pylist()[1] == 1
    assert slim.field("value").to_pylist() == [None, None]
