"""Decode Kafka record values into a job's typed events; the records that fail carry a reason.

Modules: :mod:`.schema` (columns, Kafka and dead-letter schemas), :mod:`.spec`
(:class:`DecoderSpec`), :mod:`.avro` (``.avsc`` -> Spark schema), :mod:`.convert` (per-field
JSON converters and Avro normalizers), :mod:`.decoder` (one value -> event or reason, the
Confluent wire format, the ``mapInArrow`` batch function), :mod:`.registry` (Avro writer
schemas from a Schema Registry) and :mod:`.frames` (the DataFrame API: :func:`decode_kafka`,
:func:`good_events`, :func:`dead_letters`, :func:`dead_letter_arrow`); :mod:`.fastjson`
decodes JSON in Spark for the records it can vouch for (``DecoderSpec(json_decoder="jvm")``).
Protobuf: :mod:`.protobuf_schema` (``.proto``/descriptor set -> message -> Spark schema),
:mod:`.protobuf_decode` (values -> columns, with reasons), :mod:`.protobuf_registry` (the
Confluent framing, writer schemas by id) and :mod:`.protobuf_encode` (rows -> messages).
"""

from kappaplus.codecs.decoder import decode_batches
from kappaplus.codecs.frames import (
    check_kafka_schema,
    dead_letter_arrow,
    dead_letters,
    decode_kafka,
    decode_values,
    event_field_names,
    good_events,
)
from kappaplus.codecs.schema import (
    DLQ_ARROW_SCHEMA,
    DLQ_DDL,
    ERROR_COL,
    RECORD_ARROW_TYPE,
    RECORD_COL,
    dlq_schema,
)
from kappaplus.codecs.spec import DecoderSpec

__all__ = [
    "DLQ_ARROW_SCHEMA",
    "DLQ_DDL",
    "ERROR_COL",
    "RECORD_ARROW_TYPE",
    "RECORD_COL",
    "DecoderSpec",
    "check_kafka_schema",
    "dead_letter_arrow",
    "dead_letters",
    "decode_batches",
    "decode_kafka",
    "decode_values",
    "dlq_schema",
    "event_field_names",
    "good_events",
]
