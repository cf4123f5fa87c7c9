"""Shared helpers of the runtime tests: job configs from the example TOML files, hand-made
ground truths, and reading job outputs back as plain Python values."""

from __future__ import annotations

import tomllib
import uuid
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

import kappaplus.examples as examples
from kappaplus.config import JobConfig, config_from_dict
from kappaplus.examples import sessionization

EXAMPLES = Path(examples.__file__).parent
US = 1_000_000
#: The columns of the sessionization example's output, as the tests compare them.
SESSION_COLUMNS = list(sessionization.SESSION_COLUMNS)


def uid() -> str:
    return uuid.uuid4().hex[:8]


def micros(moment: datetime) -> int:
    return int(round(moment.timestamp() * US))


def example_config(name: str, patch: Mapping[str, Any], scratch: Path) -> JobConfig:
    """The example's TOML, with ``patch`` deep-merged in and checkpoints under ``scratch``."""
    raw = tomllib.loads((EXAMPLES / f"{name}.toml").read_text())
    merged = _merge(raw, patch)
    merged["checkpoint_dir"] = str(scratch / "checkpoints")
    return config_from_dict(merged)


def _merge(base: Any, patch: Any) -> Any:
    if isinstance(base, dict) and isinstance(patch, Mapping):
        out = dict(base)
        for key, value in patch.items():
            out[key] = _merge(base.get(key), value) if key in base else value
        return out
    return patch


def table_rows(spark: SparkSession, table: str, columns: Iterable[str]) -> list[tuple[Any, ...]]:
    """Rows of ``table`` as tuples; timestamp columns as epoch microseconds, arrays as tuples."""
    df = spark.table(table)
    selected = []
    for name in columns:
        kind = df.schema[name].dataType.simpleString()
        column = F.col(name)
        selected.append(F.unix_micros(column).alias(name) if kind == "timestamp" else column)
    return [
        tuple(tuple(v) if isinstance(v, list) else v for v in row)
        for row in df.select(*selected).collect()
    ]


def sessions_by_hand(
    events: Iterable[Mapping[str, Any]], gap_seconds: float
) -> set[tuple[Any, ...]]:
    """Sessions per rider: sorted by event time, a new session starts when an event is
    MORE than ``gap`` after the previous one; end = last event + gap. Rows:
    (rider_id, start_us, end_us, event_count, event_types, trip_requested)."""
    gap = int(gap_seconds * US)
    per_rider: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for event in events:
        per_rider[event["rider_id"]].append((micros(event["event_time"]), event["event_type"]))
    out: set[tuple[Any, ...]] = set()
    for rider, items in per_rider.items():
        items.sort()
        groups: list[list[tuple[int, str]]] = []
        for item in items:
            if groups and item[0] - groups[-1][-1][0] <= gap:
                groups[-1].append(item)
            else:
                groups.append([item])
        for group in groups:
            kinds = tuple(sorted({kind for _, kind in group}))
            start, last = group[0][0], group[-1][0]
            out.add((rider, start, last + gap, len(group), kinds, "request_trip" in kinds))
    return out


FLUSH_RIDER = "zz-flush"


def flush_events(at: datetime, count: int) -> list[dict[str, Any]]:
    """``count`` events of one extra rider at ``at`` (far after the real events): produced
    last, they move a stream's watermark past every real session so all of them close."""
    return [
        {
            "event_id": f"f{i}",
            "rider_id": FLUSH_RIDER,
            "event_type": "app_open",
            "area": "downtown",
            "event_time": at,
            "arrival_time": at,
        }
        for i in range(count)
    ]


def partition_offset(offset: Any) -> int:
    """The next offset of the one-partition topic in a Kafka source offset (0 if none)."""
    if not isinstance(offset, dict):
        return 0
    (partitions,) = offset.values()
    return int(partitions["0"])


def iso_micros(iso: str | None) -> int:
    """Epoch microseconds of an ISO timestamp as Spark's progress reports it (0 if none)."""
    return 0 if not iso else micros(datetime.fromisoformat(iso.replace("Z", "+00:00")))


def dropped_by_watermark(
    history: Sequence[Any], at_offset: Mapping[int, Mapping[str, Any]], window_us: int = 0
) -> tuple[list[Mapping[str, Any]], dict[str, int]]:
    """The events a stream dropped as late, decided from Spark's own batches.

    ``history`` is a query's batches (Kafka offsets each read, watermark each ran under);
    ``at_offset`` maps a Kafka offset of the one-partition topic to the event there (offsets
    missing from it, e.g. undecodable records, are passed over). Spark filters a batch's
    late input by the watermark of the PREVIOUS batch (it evicts state by the current one):
    an event is late when ``event_time + window_us`` is at or before that watermark (for a
    session window, ``window_us`` is the gap: its own window ``[t, t + gap)`` has closed).
    Returns the late events and the batch id that read each event.
    """
    late: list[Mapping[str, Any]] = []
    batch_of: dict[str, int] = {}
    for previous, batch in zip([None, *history], history, strict=False):
        watermark = 0 if previous is None else iso_micros(previous.watermark)
        first = partition_offset(batch.start_offsets[0])
        for offset in range(first, partition_offset(batch.end_offsets[0])):
            event = at_offset.get(offset)
            if event is None:
                continue
            batch_of[event["event_id"]] = batch.batch_id
            if micros(event["event_time"]) + window_us <= watermark:
                late.append(event)
    return late, batch_of


def consume_topic(bootstrap: str, topic: str, idle: float = 3.0) -> list[Any]:
    """Every record of ``topic`` (each of its partitions) from its beginning: read until no
    record came for ``idle`` seconds (at most 60 s)."""
    import time

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": uuid.uuid4().hex,
            "log_level": 0,
            "enable.auto.commit": False,
        }
    )
    metadata = consumer.list_topics(topic, timeout=10).topics[topic]
    partitions = sorted(metadata.partitions) or [0]
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
    out, last = [], time.monotonic()
    deadline = last + 60
    try:
        while time.monotonic() - last < idle and time.monotonic() < deadline:
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                out.append(msg)
                last = time.monotonic()
    finally:
        consumer.close()
    return out
