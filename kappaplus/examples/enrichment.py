"""Rider event enrichment (reference job, stateless): drop bot traffic, add the city of
the area, the event hour and a trip-request flag.

Stateless jobs need no watermark to be correct, but the runtime applies one anyway (the
same code path in every mode); with no stateful operator nothing is ever dropped as
late, so stream and backfill outputs are the same set of rows. The area -> city table is
a literal map in the plan (``create_map``): a static lookup needs no join and no state.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import chain

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from kappaplus import InputSpec, Job, OutputSpec, Params
from kappaplus.examples.generate import CITY_OF_AREA, RIDER_EVENT_DDL


def enrich(inputs: Mapping[str, DataFrame], params: Params) -> dict[str, DataFrame]:
    """Rider events without bots, with ``city``, ``event_hour`` and ``is_trip_request``."""
    events = inputs["rider_events"]
    cities = F.create_map(*[F.lit(x) for x in chain.from_iterable(CITY_OF_AREA.items())])
    kept = events.where(~F.col("rider_id").startswith(params.bot_prefix))
    return {
        "enriched": kept.select(
            "event_id",
            "rider_id",
            "event_type",
            "area",
            F.coalesce(cities[F.col("area")], F.lit("unknown")).alias("city"),
            "event_time",
            F.date_trunc("hour", "event_time").alias("event_hour"),
            (F.col("event_type") == "request_trip").alias("is_trip_request"),
        )
    }


JOB = Job(
    name="rider-enrichment",
    description="Stateless filter + enrichment of rider events.",
    inputs=[InputSpec("rider_events", RIDER_EVENT_DDL, "event_time")],
    outputs=[OutputSpec("enriched", event_time_column="event_time")],
    transform=enrich,
    watermark_delay="1 minute",
    params={"bot_prefix": "bot-"},
)
