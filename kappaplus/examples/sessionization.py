"""Rider sessionization (reference job): session windows per rider over rider app events.

A session is a run of one rider's events in which each event follows the previous one
by at most ``session_gap`` (30 minutes); it ends ``session_gap`` after its last event.
Per session the job emits its start and end, the number of events, the event types seen
(sorted, distinct) and whether the rider requested a trip. Sessions are final when the
watermark passes their end (append mode), so the output never changes once written.

Runs unchanged from Kafka (``--mode stream``) and from Hive (``--mode backfill``):
see ``sessionization.toml``. The gap is *not* a window param that a mode may tune: a
different gap defines different sessions, so it stays the same in both modes.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappaplus import InputSpec, Job, OutputSpec, Params
from kappaplus.examples.generate import RIDER_EVENT_DDL

SESSION_COLUMNS = (
    "rider_id",
    "session_start",
    "session_end",
    "event_count",
    "event_types",
    "trip_requested",
)
"""The columns of the ``sessions`` output, in order (what tests and benchmarks compare)."""


def sessionize(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """One row per rider session (see the module docstring)."""
    events = inputs["rider_events"]
    sessions = events.groupBy(
        F.session_window("event_time", params.session_gap).alias("session"), "rider_id"
    ).agg(
        F.count(F.lit(1)).alias("event_count"),
        F.array_sort(F.collect_set("event_type")).alias("event_types"),
        F.max((F.col("event_type") == "request_trip").cast("int")).alias("trips"),
    )
    return {
        "sessions": sessions.select(
            "rider_id",
            F.col("session.start").alias("session_start"),
            F.col("session.end").alias("session_end"),
            "event_count",
            "event_types",
            (F.col("trips") > 0).alias("trip_requested"),
        )
    }


JOB = Job(
    name="rider-sessions",
    description="Session windows per rider: start, end, events, types seen, trip requested.",
    inputs=[InputSpec("rider_events", RIDER_EVENT_DDL, "event_time")],
    outputs=[
        OutputSpec(
            "sessions",
            output_mode="append",
            event_time_column="session_start",
            late_by="session:session_gap",  # what lets a stream keep its late rows
        )
    ],
    transform=sessionize,
    watermark_delay="2 minutes",
    params={"session_gap": "30 minutes"},
)
