"""Realistic rider and driver events for the reference jobs, their tests and demos.

Riders open the app in *sessions*: bursts of events (open, search, price view, trip
request, cancel, ...) seconds to minutes apart, sessions hours apart. Every event has an
``event_time`` and an ``arrival_time`` (when it reached Kafka): arrival is the event
time plus a small random delay (``max_jitter``: out-of-order but on time), and a fraction
of riders send one event much later (``late_delay``: a driver rating sent when the app
is next opened, the blog's example). Driver events report drivers becoming available in
an area. Everything is deterministic for a seed.

>>> events = rider_events(riders=3, start="2024-03-01", hours=2, seed=1)
>>> sorted(events[0])
['area', 'arrival_time', 'event_id', 'event_time', 'event_type', 'rider_id']
>>> all(a["event_time"] <= b["event_time"] for a, b in zip(events, events[1:]))
True
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

AREAS = ("downtown", "airport", "mission", "soma", "marina", "sunset")
CITY_OF_AREA = {
    "downtown": "san_francisco",
    "mission": "san_francisco",
    "soma": "san_francisco",
    "marina": "san_francisco",
    "sunset": "san_francisco",
    "airport": "san_mateo",
}
EVENT_TYPES = ("app_open", "search", "view_price", "request_trip", "cancel_trip", "rate_driver")
RIDER_EVENT_DDL = (
    "event_id STRING, rider_id STRING, event_type STRING, area STRING, event_time TIMESTAMP"
)
"""The rider event schema the reference jobs declare (``arrival_time`` is not part of it)."""
DRIVER_EVENT_DDL = "driver_id STRING, area STRING, status STRING, event_time TIMESTAMP"
"""The driver status event schema."""


def _start(value: str | datetime) -> datetime:
    """``value`` (a datetime or ISO 8601 text) as an aware datetime, UTC when naive."""
    moment = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def rider_events(
    *,
    riders: int,
    start: str | datetime,
    hours: float,
    seed: int = 0,
    max_jitter: float = 60.0,
    late_fraction: float = 0.1,
    late_delay: tuple[float, float] = (2 * 3600.0, 4 * 3600.0),
    tail: float = 3600.0,
    bots: int = 0,
) -> list[dict[str, Any]]:
    """Rider app events in ``[start, start + hours - tail/3600)``, sorted by event time.

    ``max_jitter`` bounds how late (seconds) an on-time event arrives; a ``late_fraction``
    of riders sends one ``rate_driver`` event ``late_delay`` seconds after its event
    time. No session starts in the last ``tail`` seconds, so sessions end inside the
    range. ``bots`` riders named ``bot-N`` fire bursts (the enrichment job drops them).
    """
    rng = random.Random(seed)
    origin = _start(start)
    horizon = hours * 3600.0 - tail
    out: list[dict[str, Any]] = []
    serial = 0
    for rider in range(riders + bots):
        rider_id = f"bot-{rider - riders}" if rider >= riders else f"rider-{rider:04d}"
        late_sent = rng.random() >= late_fraction  # True: this rider sends no late event
        t = rng.uniform(0, min(horizon, 3600.0))
        while t < horizon:
            area = rng.choice(AREAS)
            steps = rng.randint(2, 8)
            types = ["app_open"] + [rng.choice(EVENT_TYPES[1:5]) for _ in range(steps - 1)]
            for kind in types:
                serial += 1
                moment = origin + timedelta(seconds=t)
                jitter = rng.uniform(0, max_jitter)
                out.append(
                    {
                        "event_id": f"e{serial:07d}",
                        "rider_id": rider_id,
                        "event_type": kind,
                        "area": area,
                        "event_time": moment,
                        "arrival_time": moment + timedelta(seconds=jitter),
                    }
                )
                t += rng.uniform(5, 240)
            if not late_sent and t > 600:
                # one late event per such rider: it happened during this session (between
                # its first and last event) but reaches Kafka hours later
                late_sent = True
                serial += 1
                session = out[-len(types) :]
                first, last = session[0]["event_time"], session[-1]["event_time"]
                moment = first + (last - first) * rng.uniform(0.05, 0.95)
                out.append(
                    {
                        "event_id": f"e{serial:07d}",
                        "rider_id": rider_id,
                        "event_type": "rate_driver",
                        "area": area,
                        "event_time": moment,
                        "arrival_time": moment + timedelta(seconds=rng.uniform(*late_delay)),
                    }
                )
            t += rng.uniform(45 * 60, 4 * 3600)
    out.sort(key=lambda e: (e["event_time"], e["event_id"]))
    return out


def driver_events(
    *,
    drivers: int,
    start: str | datetime,
    hours: float,
    seed: int = 0,
    max_jitter: float = 30.0,
    tail: float = 3600.0,
    mean_interval: float = 300.0,
) -> list[dict[str, Any]]:
    """Drivers reporting ``available`` in an area every ``mean_interval`` s on average."""
    rng = random.Random(seed + 7919)
    origin = _start(start)
    horizon = hours * 3600.0 - tail
    out: list[dict[str, Any]] = []
    for driver in range(drivers):
        area = rng.choice(AREAS)
        t = rng.uniform(0, mean_interval)
        while t < horizon:
            if rng.random() < 0.2:
                area = rng.choice(AREAS)
            moment = origin + timedelta(seconds=t)
            out.append(
                {
                    "driver_id": f"driver-{driver:04d}",
                    "area": area,
                    "status": "available",
                    "event_time": moment,
                    "arrival_time": moment + timedelta(seconds=rng.uniform(0, max_jitter)),
                }
            )
            t += rng.expovariate(1.0 / mean_interval)
    out.sort(key=lambda e: (e["event_time"], e["driver_id"]))
    return out


def arrival_order(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events in the order they reach Kafka."""
    return sorted(events, key=lambda e: (e["arrival_time"], e["event_time"]))


def without_arrival(events: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The events as a job sees them (no ``arrival_time``)."""
    return [{k: v for k, v in e.items() if k != "arrival_time"} for e in events]


def to_json(event: dict[str, Any]) -> bytes:
    """One Kafka record value: the event as JSON, times as ISO-8601 UTC."""
    body = {
        key: value.astimezone(UTC).isoformat() if isinstance(value, datetime) else value
        for key, value in event.items()
        if key != "arrival_time"
    }
    return json.dumps(body).encode()


def produce(
    bootstrap: str,
    topic: str,
    events: Sequence[dict[str, Any]],
    *,
    key: str | None = None,
    extra: Sequence[bytes] = (),
    encode: Callable[[dict[str, Any]], bytes] | None = None,
) -> int:
    """Produce ``events`` in the given order (then the raw ``extra`` values); return count.
    ``encode``: an event -> its value (default :func:`to_json`)."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 0})
    failures: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(str(err))

    for event in events:
        record_key = str(event[key]).encode() if key else None
        value = (encode or to_json)(event)
        producer.produce(topic, value=value, key=record_key, on_delivery=report)
        producer.poll(0)
    for value in extra:
        producer.produce(topic, value=value, on_delivery=report)
    if producer.flush(60) != 0 or failures:
        raise RuntimeError(f"producing to {topic}: {failures[:3] or 'flush timed out'}")
    return len(events) + len(extra)


def events_frame(spark: SparkSession, events: Sequence[dict[str, Any]], ddl: str) -> DataFrame:
    """A batch DataFrame of ``events`` with the schema ``ddl`` (extra keys are ignored)."""
    from pyspark.sql.types import DataType, StructType

    schema = DataType.fromDDL(ddl)
    assert isinstance(schema, StructType)
    rows = [tuple(e.get(name) for name in schema.fieldNames()) for e in events]
    return spark.createDataFrame(rows, schema)


def write_table(
    spark: SparkSession, table: str, events: Sequence[dict[str, Any]], ddl: str
) -> None:
    """(Re)create ``table`` partitioned by the event date (``dt``) and hour (``hr``)."""
    from pyspark.sql import functions as F

    spark.sql(f"DROP TABLE IF EXISTS {table}")
    (
        events_frame(spark, events, ddl)
        .withColumn("dt", F.date_format("event_time", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("event_time", "HH"))
        .repartition(2, "dt", "hr")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )
