"""Decode Kafka records into a job's typed events; route the ones that fail to a dead letter queue.

A Kappa+ job reads Kafka records (Spark's Kafka schema: ``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``, ...) and needs typed events with an event-time
column. :func:`decode_kafka` decodes every record in Python (``mapInArrow``; ``json`` or
Avro via ``fastavro``), or, with ``DecoderSpec(json_decoder="jvm")``, JSON in Spark for the
records it can vouch for and in Python for the others (:mod:`.fastjson`). It never drops
one: each output row carries either the event columns or a precise error reason, plus the
raw record. :func:`good_events` and :func:`dead_letters` split the result; the counts
(``records = good + dead``) are attached with ``DataFrame.observe`` and so appear per
micro-batch in ``query.lastProgress["observedMetrics"]``.

>>> spec = DecoderSpec(format="json", schema="rider_id STRING NOT NULL, fare DOUBLE, "
...                    "ts TIMESTAMP", event_time="ts")              # doctest: +SKIP
>>> decoded = decode_kafka(kafka_df, spec)                          # doctest: +SKIP
>>> events = good_events(decoded)          # exactly the event schema  # doctest: +SKIP
>>> dead = dead_letters(decoded, "fares")  # DLQ_SCHEMA                 # doctest: +SKIP
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from kappaplus.codecs.convert import _FieldError
from kappaplus.codecs.decoder import _Decoder, decode_batches
from kappaplus.codecs.fastjson import decode_json_frame, supported
from kappaplus.codecs.schema import (
    _KAFKA_TYPES,
    DEFAULT_METRICS,
    DLQ_ARROW_SCHEMA,
    ERROR_COL,
    EVENT_SCHEMA_KEY,
    KAFKA_COLUMNS,
    RECORD_ARROW_TYPE,
    RECORD_COL,
)
from kappaplus.codecs.spec import DecoderSpec
from kappaplus.core.errors import ConfigError, DataError

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def check_kafka_schema(df: DataFrame) -> None:
    """Raise :class:`DataError` unless ``df`` has Spark's Kafka record columns and types."""
    present = {f.name: f.dataType.simpleString() for f in df.schema.fields}
    problems = []
    for name, expected in _KAFKA_TYPES.items():
        if name not in present:
            problems.append(f"missing column {name!r} ({expected})")
        elif present[name] != expected and not (
            name in ("key", "value") and present[name] == "string"
        ):
            problems.append(f"column {name!r} is {present[name]}, expected {expected}")
    if problems:
        raise DataError("input does not have the Kafka record schema: " + "; ".join(problems))


def decoded_arrow_schema(spec: DecoderSpec) -> pa.Schema:
    """The Arrow schema of a decoding pass's output (``spec.decoded_schema()``, the raw
    record as :data:`RECORD_ARROW_TYPE`)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return pa.schema(
        [
            f.with_type(RECORD_ARROW_TYPE) if f.name == RECORD_COL else f
            for f in to_arrow_schema(spec.decoded_schema(), timezone="UTC")
        ]
    )


def kafka_record_columns() -> list[Column]:
    """Spark's Kafka record columns as a decoding pass reads them (key and value binary)."""
    from pyspark.sql import functions as F

    return [
        F.col(n).cast("binary").alias(n) if n in ("key", "value") else F.col(n)
        for n in KAFKA_COLUMNS
    ]


def decode_kafka(
    df: DataFrame, spec: DecoderSpec, *, metrics: str | None = DEFAULT_METRICS
) -> DataFrame:
    """Decode the Kafka records of ``df`` (streaming or batch) with ``spec``.

    Returns one row per input record: the event columns (null when the record failed),
    :data:`ERROR_COL` (the reason, null when it decoded) and :data:`RECORD_COL` (the raw
    key, value, topic, partition, offset, timestamp). With ``metrics`` (a name unique
    within the query) the counts ``records``, ``good``, ``dead`` are observed; for a
    streaming query they appear in ``query.lastProgress["observedMetrics"][metrics]``.

    Inside ``foreachBatch``, ``persist()`` the batch before taking both
    :func:`good_events` and :func:`dead_letters` from it, or every record is decoded once
    per action (:func:`kappaplus.dead_letters.targets.decoded_batch_writer` does this). The
    observed counts are reported once per micro-batch either way.

    >>> decoded = decode_kafka(spark.readStream.format("kappa_kafka")
    ...                        .option("subscribe", "trips").load(), spec)  # doctest: +SKIP
    """
    from pyspark.sql import functions as F

    check_kafka_schema(df)
    out_schema = spec.decoded_schema()
    arrow_schema = decoded_arrow_schema(spec)
    columns = kafka_record_columns()
    frozen_spec = spec

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return decode_batches(frozen_spec, arrow_schema, batches)

    if spec.json_decoder == "jvm" and supported(spec.event_schema):
        decoded = decode_json_frame(df.select(*columns), spec)
    else:
        decoded = df.select(*columns).mapInArrow(decode, out_schema)
    if metrics:
        failed = F.col(ERROR_COL).isNotNull()
        decoded = decoded.observe(
            metrics,
            F.count(F.lit(1)).alias("records"),
            F.count(F.when(~failed, 1)).alias("good"),
            F.count(F.when(failed, 1)).alias("dead"),
        )
    return decoded


def _event_fields(decoded: DataFrame) -> Sequence[str]:
    names = decoded.columns
    if ERROR_COL not in names or RECORD_COL not in names:
        raise DataError(
            f"expected the output of decode_kafka (columns {ERROR_COL!r}, {RECORD_COL!r}), "
            f"got columns {names}"
        )
    return [n for n in names if n not in (ERROR_COL, RECORD_COL)]


def event_field_names(decoded: DataFrame) -> list[str]:
    """The event columns of a :func:`decode_kafka` result (without error and raw record)."""
    return list(_event_fields(decoded))


def good_events(decoded: DataFrame) -> DataFrame:
    """The records that decoded, with exactly the event schema (names, types, nullability).

    ``NOT NULL`` top-level fields of the event schema are nullable in the decoded frame
    (dead rows have no event); when there are any, the good rows pass through an identity
    ``mapInArrow`` declared with the event schema so the result's schema is exact.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    fields = _event_fields(decoded)
    good = decoded.where(F.col(ERROR_COL).isNull()).select(*fields)
    meta = decoded.schema[ERROR_COL].metadata.get(EVENT_SCHEMA_KEY)
    if meta is None:
        return good
    event_schema = StructType.fromJson(json.loads(meta))
    if good.schema == event_schema:
        return good
    from pyspark.sql.pandas.types import to_arrow_schema

    target = to_arrow_schema(event_schema, timezone="UTC")

    def exact(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            yield pa.RecordBatch.from_arrays(batch.columns, schema=target)

    return good.mapInArrow(exact, event_schema)


def dead_letters(decoded: DataFrame, job_name: str) -> DataFrame:
    """The records that failed, in the dead letter schema :data:`DLQ_DDL`.

    ``dead_letter_time`` is the (micro-)batch's current timestamp.
    """
    from pyspark.sql import functions as F

    if not job_name or not str(job_name).strip():
        raise ConfigError("job_name", job_name, "dead letters need the job's name")
    _event_fields(decoded)
    record = F.col(RECORD_COL)
    return decoded.where(F.col(ERROR_COL).isNotNull()).select(
        record["key"].alias("key"),
        record["value"].alias("value"),
        record["topic"].alias("topic"),
        record["partition"].alias("partition"),
        record["offset"].alias("offset"),
        record["timestamp"].alias("kafka_timestamp"),
        F.col(ERROR_COL).cast("string").alias("reason"),  # the cast drops the metadata
        F.lit(str(job_name)).alias("job"),
        F.current_timestamp().alias("dead_letter_time"),
    )


def dead_letter_arrow(
    records: pa.Table | pa.RecordBatch,
    reasons: pa.Array | pa.ChunkedArray,
    job_name: str,
    now: datetime | None = None,
) -> pa.Table:
    """The Arrow twin of :func:`dead_letters`: failed rows of a decoded Arrow batch (their
    :data:`RECORD_COL` holds the raw record) with their ``reasons``, in
    :data:`DLQ_ARROW_SCHEMA`; ``now`` (default: the current time) is the dead-letter time.
    Used wherever decoding runs in Arrow (the stream's dead-letter tap, the hybrid source)."""
    import pyarrow.compute as pc

    column = records.column(RECORD_COL)
    raw = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = records.num_rows
    when = now or datetime.now(UTC)
    columns = {
        "key": raw.field("key"),
        "value": raw.field("value"),
        "topic": raw.field("topic"),
        "partition": raw.field("partition"),
        "offset": raw.field("offset"),
        "kafka_timestamp": raw.field("timestamp"),
        "reason": pc.cast(reasons, pa.string()),
        "job": pa.array([job_name] * n, type=pa.string()),
        "dead_letter_time": pa.array([when] * n, type=pa.timestamp("us", tz="UTC")),
    }
    return pa.Table.from_arrays(
        [columns[f.name] for f in DLQ_ARROW_SCHEMA], schema=DLQ_ARROW_SCHEMA
    )


def decode_values(
    spec: DecoderSpec, values: Sequence[bytes | None]
) -> list[Mapping[str, Any] | str]:
    """Decode raw values in-process (no Spark): for each, the event dict or the error reason.

    Timestamps come back as microseconds since the epoch. Handy to check a spec against
    sample messages.
    """
    decoder = _Decoder(spec)
    out: list[Mapping[str, Any] | str] = []
    for value in values:
        try:
            out.append(decoder.decode(value))
        except _FieldError as exc:
            out.append(str(exc))
    return out
