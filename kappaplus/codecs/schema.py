"""The columns and schemas decoding works with: the decoded row's error and raw-record
columns, Spark's Kafka schema, and the dead-letter schema (Spark DDL and Arrow)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

import pyarrow as pa

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


ERROR_COL = "_decode_error"
"""Column of the decoded DataFrame holding the error reason (null for a good record)."""
RECORD_COL = "_kafka"
"""Struct column of the decoded DataFrame holding the raw Kafka record."""
DEFAULT_METRICS = "kappa_decode"
"""Default name of the observed metrics (``records``, ``good``, ``dead``)."""
EVENT_SCHEMA_KEY = "kappaplus.event_schema"
"""Metadata key on :data:`ERROR_COL` holding the event schema as JSON."""

KAFKA_COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp")
_KAFKA_TYPES = {
    "key": "binary",
    "value": "binary",
    "topic": "string",
    "partition": "int",
    "offset": "bigint",
    "timestamp": "timestamp",
}
RECORD_ARROW_TYPE = pa.struct(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("us", tz="UTC")),
    ]
)
DLQ_DDL = (
    "key BINARY, value BINARY, topic STRING, partition INT, offset BIGINT, "
    "kafka_timestamp TIMESTAMP, reason STRING, job STRING NOT NULL, "
    "dead_letter_time TIMESTAMP NOT NULL"
)
"""The dead letter schema (Spark DDL): original record, reason, job, dead-letter time."""
DLQ_ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("kafka_timestamp", pa.timestamp("us", tz="UTC")),
        pa.field("reason", pa.string()),
        pa.field("job", pa.string(), nullable=False),
        pa.field("dead_letter_time", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)
"""The dead letter schema as Arrow (timestamps ``timestamp[us, tz=UTC]``)."""

Format = Literal["json", "avro", "protobuf"]
WireFormat = Literal["auto", "confluent", "plain"]
JsonDecoder = Literal["python", "jvm"]
_MAX_SHOWN = 60


def dlq_schema() -> StructType:
    """The dead letter schema as a Spark ``StructType`` (no SparkSession needed)."""
    from pyspark.sql.types import (
        BinaryType,
        IntegerType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    return StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("topic", StringType()),
            StructField("partition", IntegerType()),
            StructField("offset", LongType()),
            StructField("kafka_timestamp", TimestampType()),
            StructField("reason", StringType()),
            StructField("job", StringType(), False),
            StructField("dead_letter_time", TimestampType(), False),
        ]
    )
