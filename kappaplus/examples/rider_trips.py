"""Running trip count per rider and arrivals per processing-time minute (reference job).

Two outputs, two patterns that a Hive backfill must support as well as Kafka does
(principle 4):

- ``trip_counts`` -- **arbitrary state** (``transformWithStateInPandas``): per rider a
  value state holds the number of trips requested so far; every ``request_trip`` event
  comes out with its running ``trip_number``. Within a micro-batch the processor orders a
  rider's events by (event time, event id), so a backfill (event-time slices in order)
  numbers trips exactly by event time, and a stream numbers them in arrival order of
  its micro-batches. Needs the RocksDB state store (``kappa run`` sets it).
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
from pyspark.sql.types import LongType, StructField, StructType

from kappaplus.examples.generate import RIDER_EVENT_DDL
from kappaplus.jobs import InputSpec, Job, OutputSpec, Params

TRIP_COUNT_DDL = "rider_id STRING, event_id STRING, event_time TIMESTAMP, trip_number BIGINT"


class TripCounter(StatefulProcessor):
    """Per rider: the number of ``request_trip`` events so far (a value state)."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        schema = StructType([StructField("trips", LongType(), True)])
        self.trips = handle.getValueState("trips", schema)

    def handleInputRows(  # noqa: N802 - Spark's interface
        self,
        key: Any,
        rows: Iterator[pd.DataFrame],
        timerValues: Any,  # noqa: N803
    ) -> Iterator[pd.DataFrame]:
        frames = [frame for frame in rows if len(frame)]
        if not frames:
            return
        batch = pd.concat(frames).sort_values(["event_time", "event_id"])
        stored = self.trips.get() if self.trips.exists() else None
        before = int(stored[0]) if stored else 0
        trips = batch[batch["event_type"] == "request_trip"]
        if trips.empty:
            return
        numbers = range(before + 1, before + len(trips) + 1)
        self.trips.update((before + len(trips),))
        yield pd.DataFrame(
            {
                "rider_id": trips["rider_id"].to_numpy(),
                "event_id": trips["event_id"].to_numpy(),
                "event_time": trips["event_time"].to_numpy(),
                "trip_number": list(numbers),
            }
        )

    def close(self) -> None:
        pass


def rider_trips(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Running trip numbers (arbitrary state) and arrivals per processing-time window."""
    events = inputs["rider_events"]
    counted = (
        events.select("rider_id", "event_id", "event_type", "event_time")
        .groupBy("rider_id")
        .transformWithStateInPandas(
            statefulProcessor=TripCounter(),
            outputStructType=TRIP_COUNT_DDL,
            outputMode="Append",
            timeMode="None",
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
