"""Executor side of the Kafka source: read exactly ``[from, until)`` of one partition as Arrow.

A confluent-kafka Consumer is *assigned* the partition (no group membership, no offset
commits); records are read until offset ``until - 1`` (or the end-of-partition marker at or
past ``until``, when the tail is compaction gaps or transaction markers). Waiting is bounded by
``kafkaConsumer.pollTimeoutMs``; offsets that no longer exist follow ``failOnDataLoss``.
The same range always yields the same rows, so a replayed micro-batch is identical.
"""

from __future__ import annotations

import bisect
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import pyarrow as pa

from kappaplus.connectors.kafka.offsets import (
    AUTO_OFFSET_RESET,
    OFFSET_OUT_OF_RANGE,
    PARTITION_EOF,
)
from kappaplus.connectors.kafka.options import KafkaSourceOptions
from kappaplus.core.errors import KafkaError

log = logging.getLogger(__name__)

HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
TIMESTAMP_TYPE = pa.timestamp("us", tz="UTC")

SCHEMA_DDL = (
    "key binary, value binary, topic string, partition int, offset long, "
    "timestamp timestamp, timestampType int"
)
SCHEMA_DDL_HEADERS = SCHEMA_DDL + ", headers array<struct<key:string,value:binary>>"


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The Arrow schema matching :data:`SCHEMA_DDL` (Spark's Kafka source schema)."""
    fields = [
        ("key", pa.binary()),
        ("value", pa.binary()),
        ("topic", pa.string()),
        ("partition", pa.int32()),
        ("offset", pa.int64()),
        ("timestamp", TIMESTAMP_TYPE),
        ("timestampType", pa.int32()),
    ]
    if include_headers:
        fields.append(("headers", HEADER_TYPE))
    return pa.schema(fields)


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic-partition: one Spark task."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)


class DataLoss(KafkaError):
    """Offsets a batch needs are gone (retention, a recreated topic, truncation)."""


def report_data_loss(options: KafkaSourceOptions, message: str) -> None:
    """Raise (failOnDataLoss=true) or log a warning with the same detail (false)."""
    if options.fail_on_data_loss:
        raise DataLoss(
            f"{message}. Some data may have been lost (deleted by retention, or the topic was "
            "recreated). Set failOnDataLoss=false (the source option, or the key of a job "
            "config's Kafka binding) to continue with what exists."
        )
    log.warning("%s; continuing because failOnDataLoss=false", message)


def _consumer(options: KafkaSourceOptions) -> Any:
    from confluent_kafka import Consumer

    conf: dict[str, Any] = dict(options.client)
    conf.setdefault("group.id", "kappa-kafka-source")
    conf.setdefault("log_level", 3)
    conf.setdefault("fetch.max.bytes", 64 * 1024 * 1024)
    conf.setdefault("max.partition.fetch.bytes", 16 * 1024 * 1024)
    conf.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    return Consumer(conf)


class _Columns:
    """Column buffers for one Arrow batch."""

    def __init__(self, include_headers: bool) -> None:
        self.include_headers = include_headers
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.stamps: list[np.ndarray] = []
        self.headers: list[list[dict[str, Any]]] = []

    def __len__(self) -> int:
        return len(self.offsets)

    def add(self, messages: list[Any], offsets: list[int]) -> None:
        self.keys.extend([m.key() for m in messages])
        self.values.extend([m.value() for m in messages])
        self.offsets.extend(offsets)
        stamps = [m.timestamp() for m in messages]
        self.stamps.append(np.fromiter(chain.from_iterable(stamps), np.int64, 2 * len(stamps)))
        if self.include_headers:
            self.headers.extend(
                [[{"key": k, "value": v} for k, v in (m.headers() or ())] for m in messages]
            )

    def batch(self, topic: str, partition: int, schema: pa.Schema) -> pa.RecordBatch:
        n = len(self.offsets)
        stamps = np.concatenate(self.stamps).reshape(n, 2)
        # confluent: 0 none, 1 create time, 2 log append time; Spark/Java: -1, 0, 1.
        kinds = (stamps[:, 0] - 1).astype(np.int32)
        micros = stamps[:, 1] * 1000
        arrays = [
            pa.array(self.keys, pa.binary()),
            pa.array(self.values, pa.binary()),
            pa.array([topic] * n, pa.string()),
            pa.array(np.full(n, partition, dtype=np.int32)),
            pa.array(self.offsets, pa.int64()),
            pa.array(micros).view(TIMESTAMP_TYPE),
            pa.array(kinds),
        ]
        if self.include_headers:
            arrays.append(pa.array(self.headers, HEADER_TYPE))
        return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_range(
    options: KafkaSourceOptions, rng: OffsetRange, *, batch_rows: int = 20_000
) -> Iterator[pa.RecordBatch]:
    """Yield the records of ``rng`` in offset order as Arrow batches of the source schema."""
    if rng.size == 0:
        return
    from confluent_kafka import TopicPartition

    schema = arrow_schema(options.include_headers)
    label = f"{rng.topic}-{rng.partition}"
    consumer = _consumer(options)
    try:
        consumer.assign([TopicPartition(rng.topic, rng.partition, rng.from_offset)])
        expected = rng.from_offset  # next offset we have not seen yet
        columns = _Columns(options.include_headers)
        timeout_s = options.poll_timeout_ms / 1000
        last_progress = time.monotonic()
        while expected < rng.until_offset:
            messages = consumer.consume(min(10_000, max(1, rng.until_offset - expected)), 0.5)
            accepted: list[Any] = []
            accepted_offsets: list[int] = []
            stop = False
            if messages and not [m for m in messages if m.error() is not None]:
                # Fast path: records only, in offset order (one partition per consumer).
                accepted, accepted_offsets, stop = _in_range(
                    consumer, options, rng, expected, messages
                )
                expected = accepted_offsets[-1] + 1 if accepted_offsets else expected
                messages = []
            for message in messages:
                error = message.error()
                if error is not None:
                    code = error.code()
                    if code == PARTITION_EOF:
                        stop = _at_partition_end(options, rng, expected, message.offset()) or stop
                        continue
                    if code in (AUTO_OFFSET_RESET, OFFSET_OUT_OF_RANGE):
                        moved = _out_of_range(consumer, options, rng, expected, label)
                        stop = stop or moved is None
                        expected = expected if moved is None else moved
                        break
                    if error.fatal():
                        raise KafkaError(f"{label}: fatal Kafka client error: {error.str()}")
                    log.warning("%s: Kafka client error (retrying): %s", label, error.str())
                    continue
                offset = message.offset()
                if offset < expected:
                    continue
                if offset >= rng.until_offset:
                    stop = True
                    break
                if offset > expected == rng.from_offset:
                    _check_gap(consumer, options, rng, expected, offset)
                accepted.append(message)
                accepted_offsets.append(offset)
                expected = offset + 1
            if accepted:
                columns.add(accepted, accepted_offsets)
                last_progress = time.monotonic()
                if len(columns) >= batch_rows:
                    yield columns.batch(rng.topic, rng.partition, schema)
                    columns = _Columns(options.include_headers)
            if stop:
                break
            if not accepted and time.monotonic() - last_progress > timeout_s:
                _on_stall(consumer, options, rng, expected)
                break
        if len(columns):
            yield columns.batch(rng.topic, rng.partition, schema)
    finally:
        consumer.close()


def _in_range(
    consumer: Any, options: KafkaSourceOptions, rng: OffsetRange, expected: int, messages: list[Any]
) -> tuple[list[Any], list[int], bool]:
    """``(records, their offsets, whether the range ends in them)`` of error-free
    ``messages`` in offset order: those at or after ``expected`` and before the range's end
    (a gap at the range's start is checked)."""
    offsets = [m.offset() for m in messages]
    first = bisect.bisect_left(offsets, expected)
    last = bisect.bisect_left(offsets, rng.until_offset)
    if first >= last:
        return [], [], last < len(offsets)
    if offsets[first] > expected == rng.from_offset:
        _check_gap(consumer, options, rng, expected, offsets[first])
    return messages[first:last], offsets[first:last], last < len(offsets)


def _at_partition_end(
    options: KafkaSourceOptions, rng: OffsetRange, expected: int, end: int
) -> bool:
    """Whether reaching the partition's end at ``end`` ends the range: its tail is gaps
    (compaction, transaction markers), or its offsets from ``expected`` on no longer exist
    (reported as data loss)."""
    if end >= rng.until_offset:
        return True
    if end <= expected:
        report_data_loss(
            options,
            f"{rng.topic}-{rng.partition}: offsets [{max(end, expected)}, {rng.until_offset}) "
            f"of this batch no longer exist (partition ends at {end}; batch "
            f"planned [{rng.from_offset}, {rng.until_offset}))",
        )
        return True
    return False


def _out_of_range(
    consumer: Any, options: KafkaSourceOptions, rng: OffsetRange, expected: int, label: str
) -> int | None:
    """``expected`` is no longer in the partition: reported as data loss; the offset to go
    on from (the consumer moved there) when the partition still holds part of the range,
    else None (the range is done)."""
    from confluent_kafka import TopicPartition

    low, high = consumer.get_watermark_offsets(TopicPartition(rng.topic, rng.partition), timeout=30)
    report_data_loss(
        options,
        f"{label}: offset {expected} is out of range (partition now holds "
        f"[{low}, {high})); batch planned [{rng.from_offset}, {rng.until_offset})",
    )
    if low > expected and low < rng.until_offset:
        consumer.assign([TopicPartition(rng.topic, rng.partition, low)])
        return low
    return None


def _check_gap(
    consumer: Any, options: KafkaSourceOptions, rng: OffsetRange, expected: int, got: int
) -> None:
    """The first record came after ``expected``: compaction (fine) or retention (data loss)."""
    from confluent_kafka import TopicPartition

    low, _ = consumer.get_watermark_offsets(TopicPartition(rng.topic, rng.partition), timeout=30)
    if low > expected:
        report_data_loss(
            options,
            f"{rng.topic}-{rng.partition}: offsets [{expected}, {low}) were deleted before they "
            f"were read (earliest is now {low}); batch planned "
            f"[{rng.from_offset}, {rng.until_offset})",
        )


def _on_stall(consumer: Any, options: KafkaSourceOptions, rng: OffsetRange, expected: int) -> None:
    """No record for ``pollTimeoutMs``: the offsets are gone (data loss) or the broker is stuck."""
    from confluent_kafka import TopicPartition

    label = f"{rng.topic}-{rng.partition}"
    try:
        low, high = consumer.get_watermark_offsets(
            TopicPartition(rng.topic, rng.partition), timeout=30
        )
    except Exception as exc:
        raise KafkaError(
            f"{label}: no record at offset {expected} within {options.poll_timeout_ms} ms and the "
            f"broker does not answer: {exc}"
        ) from exc
    if high > expected:
        raise KafkaError(
            f"{label}: no record at offset {expected} within kafkaConsumer.pollTimeoutMs="
            f"{options.poll_timeout_ms} ms although the broker reports offsets up to {high}"
        )
    report_data_loss(
        options,
        f"{label}: no record at offset {expected} within kafkaConsumer.pollTimeoutMs="
        f"{options.poll_timeout_ms} ms (broker reports [{low}, {high})); batch planned "
        f"[{rng.from_offset}, {rng.until_offset})",
    )
