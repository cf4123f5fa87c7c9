"""The default slice size from the job's plan: larger slices only for jobs that keep state
per group (windowed or keyed aggregations), smaller ones and eviction batches for jobs
that hold rows (session windows, stream-stream joins, deduplication), and never over a slice
size the binding sets."""

from __future__ import annotations

import pytest
from pyspark.sql import functions as F

from kappaplus.config import resolve
from kappaplus.config.loading import config_from_dict
from kappaplus.runtime.binding.slice_size import (
    AGGREGATION_TARGET_ROWS,
    ROW_STATE_TARGET_ROWS,
    holds_groups_only,
    keeps_rows,
    with_state_slices,
)
from kappaplus.slicing.planner import DEFAULT_TARGET_ROWS


@pytest.fixture(scope="module")
def events(spark):  # type: ignore[no-untyped-def]
    return (
        spark.readStream.format("rate")
        .load()
        .select(
            F.col("value").alias("id"),
            (F.col("value") % 7).cast("int").alias("key"),
            F.col("timestamp").alias("ts"),
        )
        .withWatermark("ts", "2 minutes")
    )


def test_windowed_and_keyed_aggregations_hold_groups_only(spark, events) -> None:  # type: ignore[no-untyped-def]
    hourly = events.groupBy(F.window("ts", "1 hour"), "key").count()
    assert holds_groups_only(hourly.select(F.col("window.start").alias("w"), "key", "count"))
    lookup = spark.range(7).withColumnRenamed("id", "k")  # a static side holds nothing
    enriched = events.join(lookup, events.key == lookup.k).groupBy(F.window("ts", "1 day")).count()
    assert holds_groups_only(enriched)


def test_row_holding_or_stateless_plans_keep_the_default(events) -> None:  # type: ignore[no-untyped-def]
    sessions = events.groupBy(F.session_window("ts", "10 minutes"), "key").count()
    other = events.select(F.col("id").alias("id2"), F.col("ts").alias("ts2"))
    joined = (
        events.join(other, F.expr("id = id2 AND ts2 BETWEEN ts AND ts + interval 1 minute"))
        .groupBy(F.window("ts", "1 hour"))
        .count()
    )
    deduplicated = events.dropDuplicates(["id"]).groupBy(F.window("ts", "1 hour")).count()
    assert not holds_groups_only(sessions)
    assert not holds_groups_only(joined)
    assert not holds_groups_only(deduplicated)
    assert not holds_groups_only(events.where("key > 2"))  # stateless: no aggregation


def _resolved(hive: dict[str, object]):  # type: ignore[no-untyped-def]
    config = config_from_dict(
        {
            "job": "x:JOB",
            "inputs": {
                "events": {"hive": {"table": "lake.events", "event_time_column": "ts", **hive}}
            },
            "outputs": {"counts": {"hive": {"table": "out.counts"}}},
        }
    )
    return resolve(config, "backfill")


def test_larger_slices_only_where_the_binding_sets_no_size(events) -> None:  # type: ignore[no-untyped-def]
    hourly = {"counts": events.groupBy(F.window("ts", "1 hour"), "key").count()}
    larger = with_state_slices(_resolved({}), hourly)
    assert larger is not None
    assert larger.inputs["events"].hive.target_rows_per_trigger == AGGREGATION_TARGET_ROWS
    assert AGGREGATION_TARGET_ROWS > DEFAULT_TARGET_ROWS
    for chosen in (
        {"target_rows_per_trigger": 1000},
        {"maxEventTimePerTrigger": "1 hour"},
        {"target_bytes_per_trigger": 10_000_000},
        {"target_batch_duration": "5 seconds"},
    ):
        assert with_state_slices(_resolved(chosen), hourly) is None, chosen
    sessions = {"s": events.groupBy(F.session_window("ts", "10 minutes")).count()}
    # one output holding rows keeps the default size for the inputs every output shares,
    # and drops what a slice closed in the slice's own batch (the watermark ahead), with
    # eviction batches where the watermark cannot go ahead (a run without an end)
    for frames in (sessions, {**hourly, **sessions}):
        evicting = with_state_slices(_resolved({}), frames)
        assert evicting is not None
        hive = evicting.inputs["events"].hive
        assert hive.watermark_ahead is True and hive.evict_between_slices is True
        assert hive.target_rows_per_trigger == ROW_STATE_TARGET_ROWS < DEFAULT_TARGET_ROWS
    # a slice size of the binding's own is kept; the rest still comes
    sized = with_state_slices(_resolved({"maxEventTimePerTrigger": "1 hour"}), sessions)
    assert sized is not None
    assert sized.inputs["events"].hive.target_rows_per_trigger is None
    assert sized.inputs["events"].hive.watermark_ahead is True
    assert sized.inputs["events"].hive.evict_between_slices is True
    # a processing-time trigger paces one slice per trigger: the watermark goes ahead (no
    # batch of its own), no eviction batch taking a trigger of its own unless asked for
    paced = with_state_slices(_resolved({}), sessions, paced=True)
    assert paced is not None and paced.inputs["events"].hive.evict_between_slices is None
    assert paced.inputs["events"].hive.watermark_ahead is True
    asked = with_state_slices(_resolved({"evictBetweenSlices": True}), sessions, paced=True)
    assert asked is not None and asked.inputs["events"].hive.evict_between_slices is True
    # a binding that chooses either way keeps its choice, and gets no other
    assert asked.inputs["events"].hive.watermark_ahead is None
    kept = with_state_slices(_resolved({"evictBetweenSlices": False}), sessions)
    assert kept is not None and kept.inputs["events"].hive.evict_between_slices is False
    assert kept.inputs["events"].hive.watermark_ahead is None
    behind = with_state_slices(_resolved({"watermarkAhead": False}), sessions)
    assert behind is not None and behind.inputs["events"].hive.watermark_ahead is False
    assert behind.inputs["events"].hive.evict_between_slices is None
    both = {"evictBetweenSlices": False, "targetRowsPerTrigger": 10}
    assert with_state_slices(_resolved(both), sessions) is None
    assert with_state_slices(_resolved({}), {"rows": events.where("key > 2")}) is None


def test_the_watermark_goes_ahead_only_where_late_rows_are_judged_by_the_batch_before(
    spark, events
) -> None:  # type: ignore[no-untyped-def]
    """With Spark's single watermark for late rows and eviction (its compatibility mode), a
    watermark moved to the end of the slice being read would make that slice's own rows
    late: eviction batches instead."""
    sessions = {"s": events.groupBy(F.session_window("ts", "10 minutes")).count()}
    key = "spark.sql.streaming.statefulOperator.allowMultiple"
    before = spark.conf.get(key, None)
    spark.conf.set(key, "false")
    try:
        single = with_state_slices(_resolved({}), sessions)
    finally:
        if before is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, before)
    assert single is not None
    assert single.inputs["events"].hive.watermark_ahead is None
    assert single.inputs["events"].hive.evict_between_slices is True
    ahead = with_state_slices(_resolved({}), sessions)
    assert ahead is not None and ahead.inputs["events"].hive.watermark_ahead is True


def test_what_keeps_rows_in_state(events) -> None:  # type: ignore[no-untyped-def]
    other = events.select(F.col("id").alias("id2"), F.col("ts").alias("ts2"))
    assert keeps_rows(events.groupBy(F.session_window("ts", "10 minutes"), "key").count())
    assert keeps_rows(
        events.join(other, F.expr("id = id2 AND ts2 BETWEEN ts AND ts + interval 1 minute"))
    )
    assert keeps_rows(events.dropDuplicatesWithinWatermark(["id"]))
    assert not keeps_rows(events.groupBy(F.window("ts", "1 hour"), "key").count())
    assert not keeps_rows(events.where("key > 2"))


def test_a_binding_or_its_mode_sets_the_first_slice_of_its_source() -> None:
    from kappaplus.connectors.lake.options import LakeSourceOptions
    from kappaplus.runtime.binding.inputs import hive_options
    from kappaplus.runtime.options import RunOptions
    from kappaplus.slicing.planner import DEFAULT_FIRST_SLICE_ROWS

    run = RunOptions("backfill")
    default = hive_options(_resolved({}).inputs["events"].hive, run, "2 minutes")
    assert default["firstSliceRows"] is None  # the source's own default
    set_here = hive_options(
        _resolved({"firstSliceRows": 1234}).inputs["events"].hive, run, "2 minutes"
    )
    assert set_here["firstSliceRows"] == 1234
    config = config_from_dict(
        {
            "job": "x:JOB",
            "inputs": {"events": {"hive": {"table": "lake.events", "event_time_column": "ts"}}},
            "outputs": {"counts": {"hive": {"table": "out.counts"}}},
            "mode": {"backfill": {"inputs": {"events": {"hive": {"firstSliceRows": 77}}}}},
        }
    )
    overridden = resolve(config, "backfill").inputs["events"].hive
    assert hive_options(overridden, run, "2 minutes")["firstSliceRows"] == 77
    schema = '{"type": "struct", "fields": [{"name": "ts", "type": "timestamp", "nullable": true, "metadata": {}}]}'  # noqa: E501
    source = LakeSourceOptions.parse(
        {
            "table": "t",
            "location": "/l",
            "format": "parquet",
            "eventTimeColumn": "ts",
            "schema": schema,
            "manifestDir": "/m",
        }
    )
    assert source.first_slice_rows == DEFAULT_FIRST_SLICE_ROWS == 500_000
