"""Figure 1 (two streams, 10-second windows per area, demand/supply ratio; requests
matched to drivers by a stream-stream join): backfill == plain Spark batch queries;
stream == backfill."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from runtime_helpers import example_config, table_rows, uid

from kappaplus.examples import supply_demand
from kappaplus.examples.generate import (
    DRIVER_EVENT_DDL,
    RIDER_EVENT_DDL,
    arrival_order,
    driver_events,
    events_frame,
    produce,
    rider_events,
    write_table,
)
from kappaplus.runtime.options import RunOptions
from kappaplus.runtime.runner import run_job

START, END = "2024-03-01T00:00:00", "2024-03-01T04:00:00"
COLUMNS = ["area", "window_start", "window_end", "requests", "available_drivers", "ratio"]
MATCH_COLUMNS = ["request_id", "driver_id", "area", "requested_at", "available_at"]


def batch_matches(riders: DataFrame, drivers: DataFrame) -> set[tuple[object, ...]]:
    """Requests with each driver available in the same area in the 60 s before."""
    r = riders.where("event_type = 'request_trip'").alias("r")
    d = drivers.where("status = 'available'").alias("d")
    joined = r.join(
        d,
        F.expr(
            "r.area = d.area AND d.event_time <= r.event_time AND "
            "d.event_time > r.event_time - INTERVAL 60 seconds"
        ),
    )
    rows = joined.select(
        "r.event_id",
        "d.driver_id",
        "r.area",
        F.unix_micros("r.event_time"),
        F.unix_micros("d.event_time"),
    ).collect()
    return {tuple(row) for row in rows}


def batch_truth(riders: DataFrame, drivers: DataFrame, window: str) -> DataFrame:
    """The same numbers with plain batch queries (no streaming, no watermark)."""
    demand = (
        riders.where("event_type = 'request_trip'")
        .groupBy(F.window("event_time", window).alias("w"), "area")
        .agg(F.count("*").alias("requests"))
    )
    supply = (
        drivers.where("status = 'available'")
        .groupBy(F.window("event_time", window).alias("w"), "area")
        .agg(F.count("*").alias("available_drivers"))
    )
    joined = demand.join(supply, ["w", "area"], "full_outer").fillna(0)
    return joined.select(
        "area",
        F.unix_micros(F.col("w.start")).alias("window_start"),
        F.unix_micros(F.col("w.end")).alias("window_end"),
        "requests",
        "available_drivers",
        F.when(
            F.col("available_drivers") > 0, F.col("requests") / F.col("available_drivers")
        ).alias("ratio"),
    )


@pytest.fixture(scope="module")
def figure1(spark: SparkSession):  # type: ignore[no-untyped-def]
    riders = rider_events(riders=60, start=START, hours=4, seed=5, late_fraction=0.0)
    drivers = driver_events(drivers=25, start=START, hours=4, seed=5, mean_interval=600)
    rides_table, drivers_table = f"rider_events_{uid()}", f"driver_status_{uid()}"
    write_table(spark, rides_table, riders, RIDER_EVENT_DDL)
    write_table(spark, drivers_table, drivers, DRIVER_EVENT_DDL)
    rides_df = events_frame(spark, riders, RIDER_EVENT_DDL)
    drivers_df = events_frame(spark, drivers, DRIVER_EVENT_DDL)
    truth = batch_truth(rides_df, drivers_df, "10 seconds")
    matches = batch_matches(rides_df, drivers_df)
    windows = {tuple(r) for r in truth.collect()}
    return riders, drivers, rides_table, drivers_table, windows, matches


def test_backfill_equals_batch_ground_truth(spark, figure1, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    riders, drivers, rides_table, drivers_table, truth, matches = figure1
    out = f"supply_demand_{uid()}"
    config = example_config(
        "supply_demand",
        {
            "inputs": {
                "ride_requests": {"hive": {"table": rides_table}},
                "driver_status": {"hive": {"table": drivers_table}},
            },
            "outputs": {
                "supply_demand": {"hive": {"table": out}},
                "matches": {"hive": {"table": f"{out}_matches"}},
            },
        },
        scratch,
    )
    t0 = time.monotonic()
    result = run_job(spark, supply_demand.JOB, config, RunOptions("backfill", START, END))
    assert result.status == "finished"
    rows = table_rows(spark, f"{out}_backfill", COLUMNS)
    print(f"backfill: {len(rows)} windows in {time.monotonic() - t0:.0f}s")
    assert len(rows) == len(set(rows)), "no duplicates"
    assert set(rows) == truth
    assert any(r[4] == 0 for r in truth) and any(r[3] == 0 for r in truth)  # one side only
    assert result.rows_dropped_late == 0
    got = table_rows(spark, f"{out}_matches_backfill", MATCH_COLUMNS)
    assert len(got) == len(set(got)) and set(got) == matches and len(matches) > 20


def test_stream_equals_backfill(  # type: ignore[no-untyped-def]
    spark, figure1, kafka_bootstrap: str, new_topic, scratch: Path
) -> None:
    """No request or driver event is later than the stream watermark, so the stream's
    windows equal the ground truth and nothing is reported dropped."""
    riders, drivers, _, _, truth, matches = figure1
    rides_topic, drivers_topic = new_topic(prefix="rides"), new_topic(prefix="drivers")
    out = f"supply_demand_{uid()}"
    config = example_config(
        "supply_demand",
        {
            "watermark_delay": "2 minutes",
            "inputs": {
                "ride_requests": {
                    "kafka": {"topic": rides_topic, "bootstrap_servers": kafka_bootstrap}
                },
                "driver_status": {
                    "kafka": {"topic": drivers_topic, "bootstrap_servers": kafka_bootstrap}
                },
            },
            "outputs": {
                "supply_demand": {"hive": {"table": out}},
                "matches": {"hive": {"table": f"{out}_matches"}},
            },
        },
        scratch,
    )
    # far-future events at the end of both topics move the watermark past every window
    flush_at = riders[-1]["event_time"] + timedelta(days=1)
    ride_flush = {
        "event_id": "f",
        "rider_id": "f",
        "event_type": "request_trip",
        "area": "zz",
        "event_time": flush_at,
        "arrival_time": flush_at,
    }
    driver_flush = {
        "driver_id": "f",
        "area": "zz",
        "status": "available",
        "event_time": flush_at,
        "arrival_time": flush_at,
    }
    produce(kafka_bootstrap, rides_topic, [*arrival_order(riders), ride_flush])
    produce(kafka_bootstrap, drivers_topic, [*arrival_order(drivers), driver_flush])
    result = run_job(
        spark, supply_demand.JOB, config, RunOptions("stream", trigger="1 second", until_idle=15)
    )
    assert result.status == "finished"
    rows = table_rows(spark, out, COLUMNS)
    assert len(rows) == len(set(rows))
    assert set(rows) == truth
    got = table_rows(spark, f"{out}_matches", MATCH_COLUMNS)
    assert {r for r in got if r[2] != "zz"} == matches  # the two flush events match too
    assert result.rows_dropped_late == 0
