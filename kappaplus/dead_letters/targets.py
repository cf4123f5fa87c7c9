"""Write dead letters to their targets: a Kafka topic and/or a Hive table.

Dead letters have the schema :data:`kappaplus.codecs.DLQ_DDL` (original key and value bytes,
source topic, partition, offset, Kafka timestamp, reason, job, dead-letter time).

- Kafka: one message per dead letter; the message key is ``"topic/partition/offset"`` of
  the source record, so a consumer can drop re-deliveries (a replayed batch produces its
  dead letters again: at-least-once, deduplicable by key); the value is the JSON of the
  record with the bytes in base64. Produced with the Kafka sink's producer loop
  (:func:`kappaplus.connectors.kafka.sink.write_rows`: an idempotent producer, every record
  acknowledged or the write fails), so a producer retry adds no duplicate.
- Hive: a table created if missing, partitioned by ``dlq_date`` (date of the dead-letter
  time) and ``dlq_batch`` (``"<sink_id>-<batchId>"``). Before a batch is written, every
  partition of its ``dlq_batch`` is dropped, so a replayed batch replaces its rows instead
  of adding them again.

>>> target = DeadLetterTarget(kafka_topic="trips.dlq", kafka_bootstrap="broker:9092",
...                           hive_table="ops.trips_dlq")                # doctest: +SKIP
>>> (decode_kafka(stream, spec).writeStream
...     .foreachBatch(decoded_batch_writer(target, job_name="trips", sink_id="trips",
...                                        write_good=write_events))
...     .option("checkpointLocation", ckpt).start())                    # doctest: +SKIP
"""

from __future__ import annotations

import base64
import itertools
import json
import logging
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.codecs import DLQ_ARROW_SCHEMA, dead_letters, good_events
from kappaplus.core.errors import ConfigError, DataError, KafkaError, TableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from kappaplus.config import KafkaInput

log = logging.getLogger(__name__)

PARTITION_COLUMNS = ("dlq_date", "dlq_batch")
HIVE_COLUMNS = (
    "key BINARY, value BINARY, topic STRING, `partition` INT, `offset` BIGINT, "
    "kafka_timestamp TIMESTAMP, reason STRING, job STRING, dead_letter_time TIMESTAMP, "
    "dlq_date DATE, dlq_batch STRING"
)
"""Columns of the DLQ Hive table: the dead letter schema plus the two partition columns."""
_TOPIC = re.compile(r"^[A-Za-z0-9._-]{1,249}$")
_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*){0,2}$")
_SINK_ID = re.compile(r"^[A-Za-z0-9_.-]{1,100}$")
_DLQ_COLUMNS = [f.name for f in DLQ_ARROW_SCHEMA]
_ENSURED: set[tuple[str, str]] = set()
_LOOSE_SCHEMA = pa.schema([f.with_nullable(True) for f in DLQ_ARROW_SCHEMA])


@dataclass(frozen=True)
class DeadLetterTarget:
    """Where dead letters go: a Kafka topic, a Hive table, or both.

    - ``kafka_topic`` + ``kafka_bootstrap`` (``host:port,...``): the DLQ topic.
    - ``kafka_settings``: extra librdkafka producer settings (security, acks, ...); their
      values are never logged or shown in ``repr``.
    - ``hive_table``: ``[db.]table``, created if missing.
    - ``flush_timeout``: seconds to wait for the broker to acknowledge a batch.

    >>> DeadLetterTarget(hive_table="ops.trips_dlq")  # doctest: +ELLIPSIS
    DeadLetterTarget(kafka_topic=None, ..., hive_table='ops.trips_dlq')
    """

    kafka_topic: str | None = None
    kafka_bootstrap: str | None = None
    kafka_settings: Mapping[str, str] = field(default_factory=dict)
    hive_table: str | None = None
    flush_timeout: float = 30.0

    def __post_init__(self) -> None:
        if not self.kafka_topic and not self.hive_table:
            raise ConfigError(
                "kafka_topic",
                self.kafka_topic,
                "a dead letter target needs a kafka_topic, a hive_table, or both",
            )
        settings = dict(self.kafka_settings or {})
        for key, value in settings.items():
            if not isinstance(key, str) or not isinstance(value, str | int | float | bool):
                raise ConfigError(
                    "kafka_settings", key, "keys must be strings and values plain scalars"
                )
        object.__setattr__(self, "kafka_settings", {k: str(v) for k, v in settings.items()})
        if self.kafka_topic is not None:
            if not _TOPIC.match(self.kafka_topic):
                raise ConfigError(
                    "kafka_topic", self.kafka_topic, "a topic name is 1-249 of [A-Za-z0-9._-]"
                )
            if not self.kafka_bootstrap and "bootstrap.servers" not in settings:
                raise ConfigError(
                    "kafka_bootstrap", self.kafka_bootstrap, "the DLQ topic needs the brokers"
                )
        elif self.kafka_bootstrap or settings:
            raise ConfigError(
                "kafka_topic", None, "kafka_bootstrap/kafka_settings given without a topic"
            )
        if self.hive_table is not None and not _TABLE.match(self.hive_table):
            raise ConfigError("hive_table", self.hive_table, "expected [db.]table")
        if not self.flush_timeout > 0:
            raise ConfigError("flush_timeout", self.flush_timeout, "must be positive seconds")

    def __repr__(self) -> str:
        return (
            f"DeadLetterTarget(kafka_topic={self.kafka_topic!r}, "
            f"kafka_bootstrap={self.kafka_bootstrap!r}, "
            f"kafka_settings={sorted(self.kafka_settings)}, hive_table={self.hive_table!r})"
        )

    @classmethod
    def of_kafka_input(cls, kafka: KafkaInput) -> DeadLetterTarget | None:
        """The target of a Kafka input binding's dead letters
        (:attr:`~kappaplus.config.KafkaInput.dead_letters`: its ``dlq``, by default the topic
        ``<topic>.dlq``; None with ``dlq = { discard = true }``): a topic on the input's
        brokers with the input's client settings, or a table."""
        queue = kafka.dead_letters
        if queue is None:
            return None
        if queue.topic is not None:
            settings = {k.removeprefix("kafka."): v for k, v in kafka.options.items()}
            settings.pop("bootstrap.servers", None)
            return cls(
                kafka_topic=queue.topic,
                kafka_bootstrap=kafka.bootstrap_servers,
                kafka_settings=settings,
            )
        return cls(hive_table=queue.table)

    def producer_config(self) -> dict[str, str]:
        """The librdkafka producer settings (contains secrets: do not log)."""
        config = {"acks": "all", "linger.ms": "20", "client.id": "kappaplus-dlq"}
        # the producer is always idempotent (the Kafka sink's producer loop)
        if self.kafka_bootstrap:
            config["bootstrap.servers"] = self.kafka_bootstrap
        config.update(self.kafka_settings)
        return config


@dataclass(frozen=True)
class DeadLetterCounts:
    """How many dead letters one write sent to each target."""

    kafka: int = 0
    hive: int = 0


# --------------------------------------------------------------------------------------
# Kafka
# --------------------------------------------------------------------------------------


def dlq_key(topic: str | None, partition: int | None, offset: int | None) -> bytes:
    """The DLQ message key of a source record: ``b"topic/partition/offset"``."""
    parts = ("" if part is None else str(part) for part in (topic, partition, offset))
    return "/".join(parts).encode()


def _iso(moment: datetime | None) -> str | None:
    if moment is None:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def _b64(data: bytes | None) -> str | None:
    return None if data is None else base64.b64encode(data).decode("ascii")


def dlq_message(row: Mapping[str, Any]) -> bytes:
    """The JSON value of one dead letter (bytes as base64, times as ISO-8601 UTC)."""
    return json.dumps(
        {
            "key": _b64(row.get("key")),
            "value": _b64(row.get("value")),
            "topic": row.get("topic"),
            "partition": row.get("partition"),
            "offset": row.get("offset"),
            "kafka_timestamp": _iso(row.get("kafka_timestamp")),
            "reason": row.get("reason"),
            "job": row.get("job"),
            "dead_letter_time": _iso(row.get("dead_letter_time")),
        },
        separators=(",", ":"),
    ).encode()


def parse_dlq_message(value: bytes) -> dict[str, Any]:
    """Inverse of :func:`dlq_message`: key/value back to bytes, times to UTC datetimes."""
    row: dict[str, Any] = json.loads(value)
    for name in ("key", "value"):
        if row.get(name) is not None:
            row[name] = base64.b64decode(row[name])
    for name in ("kafka_timestamp", "dead_letter_time"):
        if row.get(name) is not None:
            row[name] = datetime.fromisoformat(row[name])
    return row


def _produce(
    config: Mapping[str, str], topic: str, rows: Iterator[Mapping[str, Any]], timeout: float
) -> int:
    """Produce ``rows`` to ``topic`` with the Kafka sink's producer loop (one idempotent
    producer, every record acknowledged or KafkaError); return the count."""
    from kappaplus.connectors.kafka.sink import KafkaSinkOptions, write_rows

    records = (
        _Record(
            {
                "key": dlq_key(row.get("topic"), row.get("partition"), row.get("offset")),
                "value": dlq_message(row),
            }
        )
        for row in rows
    )
    first = next(records, None)
    if first is None:  # no connection for an empty partition
        return 0
    client = {k: v for k, v in config.items() if k != "enable.idempotence"}
    options = KafkaSinkOptions(client, topic, None, max(1, int(timeout * 1000)))
    try:
        return write_rows(options, itertools.chain([first], records)).records
    except KafkaError as exc:
        raise KafkaError(f"DLQ topic {topic!r}: {exc}") from exc


class _Record:
    """A row as the Kafka sink's producer loop reads it (``asDict``)."""

    __slots__ = ("_values",)

    def __init__(self, values: dict[str, Any]) -> None:
        self._values = values

    def asDict(self) -> dict[str, Any]:  # noqa: N802 - pyspark Row's name
        return self._values


def _rows(batches: Iterator[pa.RecordBatch]) -> Iterator[dict[str, Any]]:
    for batch in batches:
        yield from batch.to_pylist()


def produce_dead_letters(records: pa.Table | pa.RecordBatch, target: DeadLetterTarget) -> int:
    """Produce the dead letters in ``records`` to ``target``'s Kafka topic; return the count."""
    if not target.kafka_topic:
        return 0
    table = _as_dlq_table(records)
    return _produce(
        target.producer_config(),
        target.kafka_topic,
        _rows(iter(table.to_batches())),
        target.flush_timeout,
    )


def _produce_frame(dead: DataFrame, target: DeadLetterTarget) -> int:
    """Produce a DataFrame of dead letters from the executors; return the count."""
    from pyspark.sql import functions as F

    assert target.kafka_topic
    config, topic, timeout = target.producer_config(), target.kafka_topic, target.flush_timeout

    def produce(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        sent = _produce(config, topic, _rows(batches), timeout)
        yield pa.RecordBatch.from_pydict({"produced": pa.array([sent], pa.int64())})

    total = dead.mapInArrow(produce, "produced BIGINT").agg(F.sum("produced")).first()
    return int(total[0] or 0) if total else 0


# --------------------------------------------------------------------------------------
# Hive
# --------------------------------------------------------------------------------------


def ensure_dlq_table(spark: SparkSession, table: str) -> None:
    """Create the DLQ table ``table`` if missing; raise TableError if it exists but differs."""
    if not _TABLE.match(table):
        raise ConfigError("hive_table", table, "expected [db.]table")
    if "." in table:
        database = table.rsplit(".", 1)[0]
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
    if not spark.catalog.tableExists(table):
        spark.sql(
            f"CREATE TABLE IF NOT EXISTS {table} ({HIVE_COLUMNS}) USING parquet "
            f"PARTITIONED BY ({', '.join(PARTITION_COLUMNS)})"
        )
        log.info("created dead letter table %s", table)
        return
    expected = [(c.split()[0].strip("`"), c.split()[1].lower()) for c in HIVE_COLUMNS.split(", ")]
    actual = [(f.name, f.dataType.simpleString()) for f in spark.table(table).schema.fields]
    if actual != expected:
        raise TableError(
            f"table {table!r} exists but is not a dead letter table: columns {actual}, "
            f"expected {expected}"
        )


def _batch_partitions(spark: SparkSession, table: str, batch_key: str) -> list[str]:
    rows = spark.sql(f"SHOW PARTITIONS {table} PARTITION (dlq_batch = '{batch_key}')").collect()
    return [str(r[0]) for r in rows]


def _write_hive(spark: SparkSession, dead: DataFrame, table: str, batch_key: str) -> int:
    """Replace the rows of ``batch_key`` in ``table`` with ``dead``; return the row count."""
    from pyspark.sql import functions as F

    ensured = (spark.sparkContext.applicationId, table)
    if ensured not in _ENSURED:  # once per session: a micro-batch should not re-check
        ensure_dlq_table(spark, table)
        _ENSURED.add(ensured)
    for spec in _batch_partitions(spark, table, batch_key):
        parts = dict(p.split("=", 1) for p in spec.split("/"))
        spark.sql(
            f"ALTER TABLE {table} DROP IF EXISTS PARTITION "
            f"(dlq_date = DATE'{parts['dlq_date']}', dlq_batch = '{parts['dlq_batch']}')"
        )
        log.info("dead letter table %s: replaced partition %s of a replayed batch", table, spec)
    rows = dead.select(
        *_DLQ_COLUMNS,
        F.to_date("dead_letter_time").alias("dlq_date"),
        F.lit(batch_key).alias("dlq_batch"),
    )
    count = rows.count()
    if count:
        rows.write.insertInto(table)
    return count


def write_hive_dead_letters(
    spark: SparkSession, dead: DataFrame, target: DeadLetterTarget, batch_key: str
) -> int:
    """Write a DataFrame of dead letters into ``target.hive_table`` for ``batch_key``.

    Idempotent per ``batch_key``: rows written earlier under the same key are replaced.
    """
    if not target.hive_table:
        return 0
    if not _SINK_ID.match(batch_key):
        raise ConfigError("batch_key", batch_key, "expected 1-100 of [A-Za-z0-9_.-]")
    return _write_hive(spark, dead, target.hive_table, batch_key)


# --------------------------------------------------------------------------------------
# Public entry points
# --------------------------------------------------------------------------------------


def _as_dlq_table(records: pa.Table | pa.RecordBatch) -> pa.Table:
    table = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
    missing = [n for n in _DLQ_COLUMNS if n not in table.column_names]
    if missing:
        raise DataError(f"dead letters lack columns {missing}; expected {_DLQ_COLUMNS}")
    table = table.select(_DLQ_COLUMNS)
    try:
        return table.cast(_LOOSE_SCHEMA)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        raise DataError(f"dead letters do not fit the DLQ schema {_LOOSE_SCHEMA}: {exc}") from exc


def dead_letter_batch(
    *,
    values: list[bytes | None],
    reasons: list[str],
    job: str,
    topic: str | None = None,
    keys: list[bytes | None] | None = None,
    partitions: list[int | None] | None = None,
    offsets: list[int | None] | None = None,
    kafka_timestamps: list[datetime | None] | None = None,
    dead_letter_time: datetime | None = None,
) -> pa.Table:
    """Build a table of dead letters (for sources other than Kafka, e.g. Hive rows)."""
    n = len(values)
    if len(reasons) != n:
        raise DataError(f"{n} values but {len(reasons)} reasons")
    now = dead_letter_time or datetime.now(UTC)
    none: list[Any] = [None] * n
    return pa.table(
        {
            "key": pa.array(keys or none, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "topic": pa.array([topic] * n, pa.string()),
            "partition": pa.array(partitions or none, pa.int32()),
            "offset": pa.array(offsets or none, pa.int64()),
            "kafka_timestamp": pa.array(kafka_timestamps or none, pa.timestamp("us", tz="UTC")),
            "reason": pa.array(reasons, pa.string()),
            "job": pa.array([job] * n, pa.string()),
            "dead_letter_time": pa.array([now] * n, pa.timestamp("us", tz="UTC")),
        }
    )


def write_dead_letters(
    records: pa.Table | pa.RecordBatch,
    target: DeadLetterTarget,
    *,
    spark: SparkSession | None = None,
    batch_key: str | None = None,
) -> DeadLetterCounts:
    """Write an Arrow table/batch of dead letters (DLQ schema) to every target of ``target``.

    The Hive table needs ``spark`` and a ``batch_key`` (stable for a replayed batch: rows
    of an earlier write with the same key are replaced). Kafka needs neither.
    """
    table = _as_dlq_table(records)
    kafka = produce_dead_letters(table, target) if target.kafka_topic else 0
    hive = 0
    if target.hive_table:
        if spark is None:
            raise ConfigError("spark", None, f"writing to Hive table {target.hive_table!r}")
        if batch_key is None:
            raise ConfigError("batch_key", None, "a Hive DLQ write needs a stable batch key")
        frame = spark.createDataFrame(table) if table.num_rows else None
        if frame is not None:
            hive = write_hive_dead_letters(spark, frame, target, batch_key)
        else:
            hive = write_hive_dead_letters(
                spark, spark.createDataFrame([], _dlq_ddl_loose()), target, batch_key
            )
    return DeadLetterCounts(kafka=kafka, hive=hive)


def _dlq_ddl_loose() -> str:
    from kappaplus.codecs import DLQ_DDL

    return DLQ_DDL.replace(" NOT NULL", "")


def dead_letter_writer(
    target: DeadLetterTarget, *, sink_id: str
) -> Callable[[DataFrame, int], DeadLetterCounts]:
    """A ``foreachBatch`` function writing a DataFrame of dead letters to ``target``.

    ``sink_id`` names this writer in the Hive table's ``dlq_batch`` partition
    (``"<sink_id>-<batchId>"``); keep it stable across restarts of the same checkpoint and
    unique among the queries writing to the same table.
    """
    if not _SINK_ID.match(sink_id):
        raise ConfigError("sink_id", sink_id, "expected 1-100 of [A-Za-z0-9_.-]")

    def write(dead: DataFrame, batch_id: int) -> DeadLetterCounts:
        # Counting, producing and inserting are separate Spark jobs: compute the input once.
        dead.persist()
        try:
            count = dead.count()
            kafka = _produce_frame(dead, target) if target.kafka_topic and count else 0
            hive = 0
            if target.hive_table:  # also when empty: clears rows of an earlier attempt
                key = f"{sink_id}-{batch_id}"
                hive = write_hive_dead_letters(dead.sparkSession, dead, target, key)
        finally:
            dead.unpersist()
        if kafka or hive:
            log.warning(
                "batch %d: %d dead letters (kafka %s: %d, hive %s: %d)",
                batch_id,
                max(kafka, hive),
                target.kafka_topic,
                kafka,
                target.hive_table,
                hive,
            )
        return DeadLetterCounts(kafka=kafka, hive=hive)

    return write


def decoded_batch_writer(
    target: DeadLetterTarget,
    *,
    job_name: str,
    sink_id: str,
    write_good: Callable[[DataFrame, int], Any],
) -> Callable[[DataFrame, int], None]:
    """A ``foreachBatch`` function for the output of :func:`kappaplus.codecs.decode_kafka`.

    Per micro-batch: the batch is persisted (so decoding and the observed counts run once),
    ``write_good(good_events, batch_id)`` writes the events, and the dead letters go to
    ``target`` via :func:`dead_letter_writer`.
    """
    dead_writer = dead_letter_writer(target, sink_id=sink_id)

    def handle(decoded: DataFrame, batch_id: int) -> None:
        decoded.persist()
        try:
            write_good(good_events(decoded), batch_id)
            dead_writer(dead_letters(decoded, job_name), batch_id)
        finally:
            decoded.unpersist()

    return handle
