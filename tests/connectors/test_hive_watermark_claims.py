"""What a slice size requires of the watermark delay: the claims of the docs
(``docs/concepts/watermark.md``, ``docs/concepts/slices.md``), one test each.

Slices arrive in event-time order: every row of slice ``k + 1`` is at or after the end of
slice ``k``, hence at or after the largest event time seen so far. The watermark of a
micro-batch (the largest event time of the batches before, less the delay) is never
above any row of the batch, so no row is late, whatever the delay and the slice size:
tumbling, sliding and session windows all equal a batch ground truth with a delay of
zero and slices of many hours. The delay only decides how long windows stay open in
state (and where the end-of-input flush puts its marker).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hive_tables import BASE, DAY, events, iso, write_event_time_table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from test_hive_source import (
    assert_same,
    data_offsets,
    in_event_range,
    run_available_now,
    sessions_and_truth,
)

from kappaplus.connectors.hive import read_hive_stream

HOUR = 3600


@pytest.fixture(scope="module")
def claims_table(spark: SparkSession) -> str:
    """Two days of events, out of order inside files, hourly partitions."""
    write_event_time_table(spark, "hive_claims_events", events(spark, 12_000, 2, seed=7), 2)
    return "hive_claims_events"


def adaptive_stream(
    spark: SparkSession, table: str, scratch: Path, start: int, end: int, delay: str
) -> DataFrame:
    """Adaptive slices of about 2,000 rows (~8 hours each here), no span cap."""
    return read_hive_stream(
        spark,
        table,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        watermark_delay=delay,
        targetRowsPerTrigger=2000,
        manifestDir=str(scratch / "manifests"),
    )


def dropped_late(progress: list[dict]) -> int:
    return sum(
        op.get("numRowsDroppedByWatermark", 0) for p in progress for op in p["stateOperators"]
    )


def max_state_rows(progress: list[dict]) -> int:
    return max(sum(op["numRowsTotal"] for op in p["stateOperators"]) for p in progress)


@pytest.mark.parametrize(("kind", "delay"), [("tumbling", "0 seconds"), ("sliding", "1 minute")])
def test_windows_are_exact_with_a_delay_far_below_the_slice(
    spark: SparkSession, claims_table: str, scratch: Path, kind: str, delay: str
):
    start, end = BASE + 1800, BASE + DAY + 20 * HOUR
    stream = adaptive_stream(spark, claims_table, scratch, start, end, delay)
    window = (
        F.window("ts", "1 hour") if kind == "tumbling" else F.window("ts", "1 hour", "20 minutes")
    )
    counts = stream.groupBy(window, "key").agg(F.count("*").alias("n"), F.sum("id").alias("ids"))
    name = f"claims_{kind}"
    progress = run_available_now(counts, scratch / "ck", name)
    spans = [o["hi"] - o["lo"] for o in data_offsets(progress)]
    assert len(spans) >= 4
    assert max(spans) >= 4 * HOUR * 1_000_000, "slices far longer than the delay"
    assert dropped_late(progress) == 0

    truth = (
        spark.table(claims_table)
        .where(in_event_range(start, end))
        .groupBy(window, "key")
        .agg(F.count("*").alias("n"), F.sum("id").alias("ids"))
        .where(F.col("window.end") <= F.lit(iso(end)).cast("timestamp"))
    )
    assert_same(spark.table(name), truth)


def test_session_windows_are_exact_with_a_zero_delay(
    spark: SparkSession, claims_table: str, scratch: Path
):
    start, end = BASE, BASE + DAY + 12 * HOUR
    stream = adaptive_stream(spark, claims_table, scratch, start, end, "0 seconds")
    sessions = stream.groupBy(F.session_window("ts", "4 minutes"), "key").agg(
        F.count("*").alias("n"), F.min("id").alias("first_id")
    )
    progress = run_available_now(sessions, scratch / "ck", "claims_sessions")
    assert len(data_offsets(progress)) >= 4
    assert dropped_late(progress) == 0
    got, truth = sessions_and_truth(spark, "claims_sessions", claims_table, start, end)
    assert len(truth) > 1000
    assert got == truth


def test_a_longer_delay_only_holds_more_state(
    spark: SparkSession, claims_table: str, scratch: Path
):
    start, end = BASE, BASE + DAY
    state = {}
    for delay in ("0 seconds", "6 hours"):
        stream = adaptive_stream(spark, claims_table, scratch / delay[0], start, end, delay)
        counts = stream.groupBy(F.window("ts", "10 minutes"), "key").count()
        name = f"claims_state_{delay[0]}"
        progress = run_available_now(counts, scratch / delay[0] / "ck", name)
        assert dropped_late(progress) == 0
        state[delay] = (max_state_rows(progress), sorted(map(tuple, spark.table(name).collect())))
    assert state["0 seconds"][1] == state["6 hours"][1], "same results"
    # State holds the windows of about one slice plus the delay: ~8-hour slices here, so a
    # 6-hour delay keeps ~(8 + 6) / 8 times the windows open.
    assert state["6 hours"][0] > 1.5 * state["0 seconds"][0], "more open windows in state"
