"""Supply and demand per area (reference job; the blog's figure 1): two streams, ride
requests and driver availability, in 10-second event-time windows per area, and their
demand/supply ratio.

``supply_demand`` -- union-then-aggregate: both streams are projected to
``(area, event_time, is_request, is_driver)``, unioned, and aggregated in one tumbling
``window`` (10 s) per area. The other way to draw figure 1 -- a full outer join of two
windowed aggregates -- chains three stateful operators (two aggregations feeding the
join): three states to size, and a window missing on one side is emitted only when the
join evicts it from its own state. One aggregation over the union
has a single state, emits every window -- demand only (ratio null: no supply), supply
only (ratio 0) or both -- as soon as the watermark passes it, in both modes, and its late
rows are counted by one operator.

``matches`` -- a stream-stream **join** of the raw streams: every ride request with each
driver who reported available in the same area within ``match_window`` (60 s) before
it (an inner join with an event-time range condition; both sides' state is bounded by
the watermark).

Only the window sizes and the watermark may be tuned per mode (``window`` and
``match_window`` are window params).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappaplus import InputSpec, Job, OutputSpec, Params
from kappaplus.examples.generate import DRIVER_EVENT_DDL, RIDER_EVENT_DDL


def supply_demand(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Requests vs available drivers per area and window; requests matched to drivers."""
    requests = inputs["ride_requests"].where(F.col("event_type") == "request_trip")
    drivers = inputs["driver_status"].where(F.col("status") == "available")
    one, zero = F.lit(1), F.lit(0)
    both = requests.select(
        "area", "event_time", one.alias("is_request"), zero.alias("is_driver")
    ).unionByName(
        drivers.select("area", "event_time", zero.alias("is_request"), one.alias("is_driver"))
    )
    per_window = both.groupBy(F.window("event_time", params.window).alias("window"), "area").agg(
        F.sum("is_request").cast("long").alias("requests"),
        F.sum("is_driver").cast("long").alias("available_drivers"),
    )
    ratio = F.when(F.col("available_drivers") > 0, F.col("requests") / F.col("available_drivers"))
    asked = requests.select(
        F.col("event_id").alias("request_id"),
        "rider_id",
        F.col("area").alias("request_area"),
        F.col("event_time").alias("requested_at"),
    )
    available = drivers.select(
        "driver_id", F.col("area").alias("driver_area"), F.col("event_time").alias("available_at")
    )
    within = F.expr(
        "request_area = driver_area AND available_at <= requested_at AND "
        f"available_at > requested_at - INTERVAL {params.match_window}"
    )
    matches = asked.join(available, within, "inner")
    return {
        "supply_demand": per_window.select(
            "area",
            F.col("window.start").alias("window_start"),
            F.col("window.end").alias("window_end"),
            "requests",
            "available_drivers",
            ratio.alias("ratio"),
        ),
        "matches": matches.select(
            "request_id",
            "rider_id",
            F.col("request_area").alias("area"),
            "requested_at",
            "driver_id",
            "available_at",
        ),
    }


JOB = Job(
    name="supply-demand",
    description="Figure 1: ride requests vs available drivers per area, 10 s windows.",
    inputs=[
        InputSpec("ride_requests", RIDER_EVENT_DDL, "event_time"),
        InputSpec("driver_status", DRIVER_EVENT_DDL, "event_time"),
    ],
    outputs=[
        OutputSpec("supply_demand", event_time_column="window_start"),
        OutputSpec("matches", event_time_column="requested_at"),
    ],
    transform=supply_demand,
    watermark_delay="30 seconds",
    params={"window": "10 seconds", "match_window": "60 seconds"},
    window_params=["window", "match_window"],
)
