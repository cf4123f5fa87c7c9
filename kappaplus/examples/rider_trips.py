"""Running trip count per rider and arrivals per processing-time minute (reference job).

Two outputs, two patterns that a Hive backfill must support as well as Kafka does
(principle 4):

- ``trip_counts`` -- **arbitrary state** (``transformWithStateInPandas``, event-time
  mode): per rider a list state holds the trip requests the watermark has not passed yet
  and a value state the number of trips numbered so far; once the watermark passes a
  request's event time (an event-time timer), the due requests come out in (event time,
  event id) order with their running ``trip_number``. So the numbering depends on event
  time only, never on how arrival order falls into micro-batches: a stream numbers
  trips exactly as a backfill does, except that Spark drops the rows that arrive behind
  the watermark (counted as ``numRowsDroppedByWatermark``) -- with ``timeMode="None"``
  it would not filter them at all and would number trips in micro-batch order. Needs
  the RocksDB state store (``kappa run`` sets it).
- ``arrivals`` -- a **processing-time window**: events per event type per
  ``processing_window`` of the time the micro-batch ran (``current_timestamp()``), in
  update mode. Its windows describe *when the job saw the data*, not when it happened:
  the totals over all windows are the same in both modes, the windows are not (a backfill
  reads hours of event time per minute).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import LongType, StringType, StructField, StructType

from kappaplus import InputSpec, Job, OutputSpec, Params
from kappaplus.examples.generate import RIDER_EVENT_DDL

TRIP_COUNT_DDL = "rider_id STRING, event_id STRING, event_time TIMESTAMP, trip_number BIGINT"
"""The schema of the ``trip_counts`` output."""
_PROCESSOR_OUTPUT = "rider_id STRING, event_id STRING, event_us BIGINT, trip_number BIGINT"


class TripCounter(StatefulProcessor):
    """Per rider: trip requests wait (a list state) until the watermark passes their event
    time, then are numbered after the trips so far (a value state) in (time, id) order.

    Event times travel as epoch microseconds (``event_us``): exact, and free of the
    session/worker time zones that pandas timestamps would bring into the state.
    """

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.trips = handle.getValueState("trips", StructType([StructField("trips", LongType())]))
        self.pending = handle.getListState(
            "pending",
            StructType(
                [StructField("event_id", StringType()), StructField("event_us", LongType())]
            ),
        )

    def handleInputRows(  # noqa: N802 - Spark's interface
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        # Spark has already dropped the rows at or behind the watermark of the previous batch
        trips = [
            (str(event_id), int(us))
            for frame in rows
            for event_id, us, kind in frame[["event_id", "event_us", "event_type"]].itertuples(
                index=False
            )
            if kind == "request_trip"
        ]
        if trips:
            self.pending.appendList(trips)
            # due once the watermark (milliseconds) reaches the request's time, rounded up
            for expiry in {-(-us // 1000) for _, us in trips}:
                self.handle.registerTimer(expiry)
        return iter(())

    def handleExpiredTimer(  # noqa: N802 - Spark's interface
        self,
        key: Any,
        timerValues: Any,  # noqa: N803
        expiredTimerInfo: Any,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        # every request at or behind the watermark is final: rows arriving later at or
        # behind it are dropped as late, so none can come before these in event time
        watermark = timerValues.getCurrentWatermarkInMs() * 1000
        pending = [(str(i), int(us)) for i, us in self.pending.get()]
        due = sorted((us, i) for i, us in pending if us <= watermark)
        if not due:
            return
        rest = [(i, us) for i, us in pending if us > watermark]
        if rest:
            self.pending.put(rest)
        else:
            self.pending.clear()
        stored = self.trips.get() if self.trips.exists() else None
        before = int(stored[0]) if stored else 0
        self.trips.update((before + len(due),))
        yield pd.DataFrame(
            {
                "rider_id": [key[0]] * len(due),
                "event_id": [i for _, i in due],
                "event_us": [us for us, _ in due],
                "trip_number": list(range(before + 1, before + len(due) + 1)),
            }
        )

    def close(self) -> None:
        pass


def rider_trips(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Running trip numbers (arbitrary state) and arrivals per processing-time window."""
    events = inputs["rider_events"]
    counted = (
        events.select(
            "rider_id",
            "event_id",
            "event_type",
            "event_time",  # carries the watermark: late rows are dropped on it
            F.unix_micros("event_time").alias("event_us"),
        )
        .groupBy("rider_id")
        .transformWithStateInPandas(
            statefulProcessor=TripCounter(),
            outputStructType=_PROCESSOR_OUTPUT,
            outputMode="Append",
            timeMode="EventTime",
        )
        .select(
            "rider_id",
            "event_id",
            F.timestamp_micros("event_us").alias("event_time"),
            "trip_number",
        )
    )
    arrivals = events.groupBy(
        F.window(F.current_timestamp(), params.processing_window).alias("processed"),
        "event_type",
    ).agg(F.count(F.lit(1)).alias("events"))
    return {
        "trip_counts": counted,
        "arrivals": arrivals.select(
            F.col("processed.start").alias("processed_start"),
            F.col("processed.end").alias("processed_end"),
            "event_type",
            "events",
        ),
    }


JOB = Job(
    name="rider-trips",
    description="Running trip count per rider (transformWithState) and processing-time arrivals.",
    inputs=[InputSpec("rider_events", RIDER_EVENT_DDL, "event_time")],
    outputs=[
        OutputSpec("trip_counts", output_mode="append", event_time_column="event_time"),
        OutputSpec("arrivals", output_mode="update", event_time_column="processed_start"),
    ],
    transform=rider_trips,
    watermark_delay="2 minutes",
    params={"processing_window": "1 minute"},
)
