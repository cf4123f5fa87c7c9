"""The stream's one Python pass (decode, bounds, judge, tap) fails the records the separate
passes failed, with their words: the bounds' reasons word for word as the JVM expression
of :func:`kappaplus.runtime.binding.bounds.out_of_bounds_reason`, and the same records
failed by each check, on Spark (a batch of Kafka-shaped rows, no broker needed)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from pyspark.sql import functions as F

from kappaplus.codecs import ERROR_COL, DecoderSpec, decode_kafka
from kappaplus.config import EventTimeBounds
from kappaplus.core.ahead import AheadRule
from kappaplus.runtime.binding.bounds import mark_out_of_bounds
from kappaplus.runtime.binding.checked_decode import decode_and_check

NOW = datetime.now(UTC).replace(microsecond=0)
BOUNDS = EventTimeBounds(min="2020-01-01T00:00:00Z", max="2090-01-01", max_future="1 day")


def kafka_rows(spark, times: list[str | None], garbage: int = 1):  # type: ignore[no-untyped-def]
    values = [json.dumps({"rider_id": f"r{i}", "ts": t}) for i, t in enumerate(times)]
    values += ["{not json"] * garbage
    rows = [(f"k{i}".encode(), v.encode(), "t", i % 2, i, NOW) for i, v in enumerate(values)]
    return spark.createDataFrame(
        rows,
        "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, timestamp TIMESTAMP",
    )


def test_one_pass_fails_each_record_as_the_separate_passes_did(spark) -> None:  # type: ignore[no-untyped-def]
    near = [(NOW - timedelta(minutes=i)).isoformat() for i in range(8)]
    times = near + [
        "2019-12-31T23:59:59.5Z",  # before min
        "2090-01-01T00:00:00Z",  # at max: not before it
        (NOW + timedelta(days=3)).isoformat(),  # beyond max_future and ahead of its peers
        "0999-03-04T05:06:07Z",  # before min, a three-digit year
        None,  # a null event time: a decode failure, never out of bounds
        (NOW + timedelta(hours=5)).isoformat(),  # within max_future, far ahead of its peers
    ]
    spec = DecoderSpec(format="json", schema="rider_id STRING, ts TIMESTAMP", event_time="ts")
    rule = AheadRule.parse("2 hours")
    df = kafka_rows(spark, times)

    one = decode_and_check(df, spec, BOUNDS, rule, None, decode_metrics="d1", bounds_metrics="b1")
    two = mark_out_of_bounds(decode_kafka(df, spec, metrics="d2"), "ts", BOUNDS, "b2", rule)

    def outcome(frame):  # type: ignore[no-untyped-def]
        rows = frame.select(F.col("_kafka.offset").alias("o"), ERROR_COL).collect()
        return sorted((r["o"], r[ERROR_COL]) for r in rows)

    got, expected = outcome(one), outcome(two)
    assert got == expected
    failed = {o: why for o, why in got if why is not None}
    assert sorted(failed) == [8, 9, 10, 11, 12, 13, 14], failed
    assert "2019-12-31T23:59:59Z is before the bound min = 2020-01-01T00:00:00Z" in failed[8]
    assert "0999-03-04T05:06:07Z is before the bound min" in failed[11]
    assert "is not before the bound max" in failed[9]
    assert "ahead of now" in failed[10]
    assert "ahead of its peers" in failed[13]
    # the raw bytes do not come back from the pass; the other record fields do
    raw = one.select("_kafka.key", "_kafka.value", "_kafka.partition").collect()
    assert all(r["key"] is None and r["value"] is None for r in raw)
    assert sorted(r["partition"] for r in raw) == sorted(i % 2 for i in range(15))
