"""Kafka sink for Spark (``df.writeStream.format("kappa_kafka")``), over confluent-kafka.

Input columns, as in Spark's Kafka sink: ``value`` (binary or string, required), and optional
``key`` (binary or string), ``headers`` (``array<struct<key:string,value:binary>>``),
``topic`` (string; else the ``topic`` option) and ``partition`` (int). Options: ``kafka.*``
(producer settings, e.g. ``kafka.bootstrap.servers``; secrets are never logged), ``topic``,
``maxRecordsPerSecond`` (per task, token bucket), ``flushTimeoutMs`` (default 120000).

Delivery guarantee: **at least once.** Every task uses an idempotent producer
(``enable.idempotence=true``: no duplicates from the producer's own retries) and flushes before
it reports success; any delivery failure fails the task, so Spark retries it, and a micro-batch
only commits after all its tasks succeeded. A retried task or a replayed micro-batch (e.g. after
a crash between the write and the checkpoint commit) writes its records *again*. Consumers
deduplicate by giving every record a deterministic key derived from the input (for example the
source topic-partition-offset, or a business id plus event time): a replayed record carries the
same key, so a compacted topic, an upsert into a table, or a "seen keys" set drops the second
copy. See ``docs/kafka.md``.

>>> (df.selectExpr("CAST(id AS STRING) AS key", "to_json(struct(*)) AS value")
...    .writeStream.format("kappa_kafka")
...    .option("kafka.bootstrap.servers", "127.0.0.1:9092").option("topic", "out")
...    .option("checkpointLocation", "/tmp/ckpt").start())      # doctest: +SKIP
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSourceStreamWriter, DataSourceWriter, WriterCommitMessage
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    StringType,
    StructType,
)

from kappaplus.core.errors import ConfigError, DataError, KafkaError
from kappaplus.core.kafka_conf import client_conf
from kappaplus.core.options import (
    POSITIVE_INT,
    POSITIVE_NUMBER,
    from_options,
    option,
    options_class,
    to_options,
)

log = logging.getLogger(__name__)

_FORBIDDEN_PRODUCER_KEYS = {
    "key.serializer": "keys are written as bytes (binary or UTF-8 string column)",
    "value.serializer": "values are written as bytes (binary or UTF-8 string column)",
    "enable.idempotence": "the sink always uses an idempotent producer",
}


class TokenBucket:
    """At most ``rate`` acquisitions per second, with bursts of at most ``capacity``.

    >>> bucket = TokenBucket(rate=1000.0)
    >>> bucket.acquire()  # returns at once while tokens are left
    """

    def __init__(self, rate: float, capacity: float | None = None) -> None:
        self.rate = rate
        self.capacity = capacity if capacity is not None else max(1.0, rate * 0.1)
        self.tokens = self.capacity
        self.stamp = time.monotonic()

    def acquire(self, n: float = 1.0) -> None:
        while True:
            now = time.monotonic()
            self.tokens = min(self.capacity, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now
            if self.tokens >= n:
                self.tokens -= n
                return
            time.sleep((n - self.tokens) / self.rate)


DEFAULT_FLUSH_TIMEOUT_MS = 120_000
"""How long a task waits for the broker to acknowledge its records before it fails."""


@options_class
class KafkaSinkOptions:
    """Validated sink options; ``client`` holds secrets, never log it."""

    client: dict[str, str]
    topic: str | None = option("topic", default=None)
    """Where rows without a ``topic`` column go."""
    max_records_per_second: float | None = option(
        "maxRecordsPerSecond", POSITIVE_NUMBER, default=None
    )
    flush_timeout_ms: int = option("flushTimeoutMs", POSITIVE_INT, default=DEFAULT_FLUSH_TIMEOUT_MS)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KafkaSinkOptions:
        opts = {str(k).lower(): v for k, v in options.items()}
        return from_options(cls, opts, client=client_conf(opts, forbidden=_FORBIDDEN_PRODUCER_KEYS))

    def to_options(self) -> dict[str, str]:
        """The string options :meth:`parse` reads as this object (secrets included)."""
        return {**{f"kafka.{key}": value for key, value in self.client.items()}, **to_options(self)}


_HEADERS_TYPE = ArrayType(StructType().add("key", StringType()).add("value", BinaryType()))


def _check_schema(schema: StructType, options: KafkaSinkOptions) -> None:
    """The input columns must be the ones Spark's Kafka sink accepts, with usable types."""
    fields = {f.name.lower(): f.dataType for f in schema.fields}

    def check(column: str, allowed: tuple[type[DataType], ...], what: str) -> None:
        if column in fields and not isinstance(fields[column], allowed):
            raise DataError(
                f"Kafka sink column {column!r} has type {fields[column].simpleString()}; "
                f"expected {what}"
            )

    if "value" not in fields:
        raise DataError(
            f"Kafka sink needs a 'value' column (binary or string); got columns {schema.names}"
        )
    check("value", (BinaryType, StringType), "binary or string")
    check("key", (BinaryType, StringType), "binary or string")
    check("topic", (StringType,), "string")
    check("partition", (IntegerType,), "int")
    if "headers" in fields:
        headers = fields["headers"]
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, BinaryType | StringType)
        )
        if not ok:
            raise DataError(
                f"Kafka sink column 'headers' has type {headers.simpleString()}; expected "
                f"{_HEADERS_TYPE.simpleString()}"
            )
    if "topic" not in fields and options.topic is None:
        raise ConfigError("topic", None, "set the 'topic' option or provide a 'topic' column")


def _as_bytes(value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    return bytes(value)


@dataclass
class KafkaCommitMessage(WriterCommitMessage):
    """What one task wrote."""

    records: int
    seconds: float


def write_rows(options: KafkaSinkOptions, rows: Iterator[Any]) -> KafkaCommitMessage:
    """Produce every row, flush, and raise if any record was not acknowledged."""
    from confluent_kafka import Producer

    conf: dict[str, Any] = dict(options.client)
    conf.setdefault("linger.ms", 20)
    conf.setdefault("log_level", 3)
    conf["enable.idempotence"] = True
    producer = Producer(conf)
    failures: list[str] = []
    lock = threading.Lock()

    def on_delivery(error: Any, message: Any) -> None:
        if error is not None:
            with lock:
                if len(failures) < 5:
                    failures.append(f"{message.topic()}[{message.partition()}]: {error.str()}")
                else:
                    failures.append("")

    bucket = TokenBucket(options.max_records_per_second) if options.max_records_per_second else None
    started = time.monotonic()
    count = 0
    for row in rows:
        data = row.asDict()
        topic = data.get("topic") or options.topic
        if not topic:
            raise DataError(
                "Kafka sink row has no topic: the 'topic' column is null and no "
                "'topic' option is set"
            )
        kwargs: dict[str, Any] = {
            "value": _as_bytes(data.get("value")),
            "key": _as_bytes(data.get("key")),
            "on_delivery": on_delivery,
        }
        headers = data.get("headers")
        if headers:
            kwargs["headers"] = [(h["key"], _as_bytes(h["value"])) for h in headers]
        if data.get("partition") is not None:
            kwargs["partition"] = int(data["partition"])
        if bucket is not None:
            bucket.acquire()
        while True:
            try:
                producer.produce(topic, **kwargs)
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: let deliveries drain
        producer.poll(0)
        count += 1
        if failures:
            break
    remaining = producer.flush(options.flush_timeout_ms / 1000)
    if failures:
        shown = [f for f in failures if f]
        raise KafkaError(
            f"Kafka sink: {len(failures)} record(s) were not delivered, e.g. {shown}; "
            "the task fails so Spark retries it"
        )
    if remaining:
        raise KafkaError(
            f"Kafka sink: {remaining} record(s) still unacknowledged after flushTimeoutMs="
            f"{options.flush_timeout_ms}; the task fails so Spark retries it"
        )
    return KafkaCommitMessage(records=count, seconds=time.monotonic() - started)


class _KafkaWriterBase:
    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self.options = KafkaSinkOptions.parse(options)
        _check_schema(schema, self.options)

    def write(self, iterator: Iterator[Any]) -> KafkaCommitMessage:
        return write_rows(self.options, iterator)


class KafkaStreamWriter(_KafkaWriterBase, DataSourceStreamWriter):
    """Streaming writer: one idempotent producer per task, flushed before the task succeeds."""

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("Kafka sink: batch %s wrote %s records", batchId, total)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        log.warning("Kafka sink: batch %s aborted; Spark will retry it (at-least-once)", batchId)


class KafkaBatchWriter(_KafkaWriterBase, DataSourceWriter):
    """Batch writer (``df.write.format("kappa_kafka")``)."""

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        total = sum(m.records for m in messages if isinstance(m, KafkaCommitMessage))
        log.info("Kafka sink: wrote %s records", total)
