"""Decode Kafka records into a job's typed events; route the ones that fail to a dead letter queue.

A Kappa+ job reads Kafka records (Spark's Kafka schema: ``key``, ``value``, ``topic``,
``partition``, ``offset``, ``timestamp``, ...) and needs typed events with an event-time
column. :func:`decode_kafka` decodes every record in Python (``mapInArrow``; ``json`` or
Avro via ``fastavro``) and never drops one: each output row carries either the event
columns or a precise error reason, plus the raw record. :func:`good_events` and
:func:`dead_letters` split the result; the counts (``records = good + dead``) are attached
with ``DataFrame.observe`` and so appear per micro-batch in
``query.lastProgress["observedMetrics"]``.

>>> spec = DecoderSpec(format="json", schema="rider_id STRING NOT NULL, fare DOUBLE, "
...                    "ts TIMESTAMP", event_time="ts")              # doctest: +SKIP
>>> decoded = decode_kafka(kafka_df, spec)                          # doctest: +SKIP
>>> events = good_events(decoded)          # exactly the event schema  # doctest: +SKIP
>>> dead = dead_letters(decoded, "fares")  # DLQ_SCHEMA                 # doctest: +SKIP
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import math
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa

from kappaplus.codecs.registry import UnknownSchemaId, WriterSchemas
from kappaplus.errors import ConfigError, DataError
from kappaplus.secrets import mask_url

if TYPE_CHECKING:
    from pyspark.sql import DataFrame
    from pyspark.sql.types import DataType, StructType

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

Format = Literal["json", "avro"]
WireFormat = Literal["auto", "confluent", "plain"]
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


# --------------------------------------------------------------------------------------
# The spec
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DecoderSpec:
    """How to turn a Kafka record's value into one typed event; validated at construction.

    - ``format``: ``"json"`` (one JSON object per value) or ``"avro"``.
    - ``schema``: JSON only: the event schema, a Spark DDL string (needs an active
      SparkSession to parse) or a ``StructType``.
    - ``avro_schema``: Avro only: path of the ``.avsc`` file; the event schema is derived
      from it (``timestamp-millis``/``timestamp-micros`` become ``TIMESTAMP``).
    - ``event_time``: the event-time column; must exist and be ``TIMESTAMP``.
    - ``required``: fields that must be present and non-null (besides ``NOT NULL`` fields
      of the schema and the event time).
    - ``wire_format``: Avro only: ``"confluent"`` (magic byte 0 + 4-byte schema id +
      payload), ``"plain"`` (bare Avro binary) or ``"auto"`` (either; default).
    - ``schema_ids``: Avro only: accepted Confluent schema ids (default: any).
    - ``schema_registry_url``: Avro only: a Schema Registry; a Confluent-framed value is then
      read with the writer schema of its id and resolved to ``avro_schema`` (the reader
      schema), so compatible producer schema changes keep decoding
      (:mod:`kappaplus.codecs.registry`). Without it every value is read with
      ``avro_schema``.

    >>> DecoderSpec(format="avro", avro_schema="trip.avsc", event_time="ts")  # doctest: +SKIP
    """

    format: Format
    event_time: str
    schema: str | StructType | None = None
    avro_schema: str | Path | None = None
    required: tuple[str, ...] = ()
    wire_format: WireFormat = "auto"
    schema_ids: frozenset[int] | None = None
    schema_registry_url: str | None = field(default=None, repr=False)
    event_schema: StructType = field(init=False, repr=False, compare=False)
    avro_parsed: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.format not in ("json", "avro"):
            raise ConfigError("format", self.format, "expected 'json' or 'avro'")
        if self.format == "json" and self.schema_registry_url is not None:
            raise ConfigError("schema_registry_url", "***", "only for format 'avro'")
        object.__setattr__(self, "required", tuple(self.required))
        if self.schema_ids is not None:
            object.__setattr__(self, "schema_ids", frozenset(int(i) for i in self.schema_ids))
        if self.format == "json":
            if self.schema is None:
                raise ConfigError("schema", None, "format 'json' needs the event schema")
            if self.avro_schema is not None:
                raise ConfigError("avro_schema", self.avro_schema, "only for format 'avro'")
            event_schema = _struct_from(self.schema)
        else:
            if self.avro_schema is None:
                raise ConfigError("avro_schema", None, "format 'avro' needs an .avsc file path")
            if self.schema is not None:
                raise ConfigError(
                    "schema", self.schema, "format 'avro' derives the schema from avro_schema"
                )
            if self.wire_format not in ("auto", "confluent", "plain"):
                raise ConfigError(
                    "wire_format", self.wire_format, "expected 'auto', 'confluent' or 'plain'"
                )
            if self.schema_registry_url is not None and self.wire_format == "plain":
                raise ConfigError(
                    "schema_registry_url",
                    mask_url(self.schema_registry_url),
                    "a registry needs the Confluent wire format: wire_format 'confluent' or 'auto'",
                )
            parsed, event_schema = _load_avsc(self.avro_schema)
            object.__setattr__(self, "avro_parsed", parsed)
        object.__setattr__(self, "event_schema", event_schema)
        self._validate()

    def _validate(self) -> None:
        from pyspark.sql.types import TimestampType

        names = self.event_schema.fieldNames()
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ConfigError("schema", self._shown_schema(), f"duplicate fields {dupes}")
        for reserved in (ERROR_COL, RECORD_COL):
            if reserved in names:
                raise ConfigError(
                    "schema", self._shown_schema(), f"field name {reserved!r} is reserved"
                )
        if self.event_time not in names:
            raise ConfigError(
                "event_time", self.event_time, f"no such field in the event schema {names}"
            )
        kind = self.event_schema[self.event_time].dataType
        if not isinstance(kind, TimestampType):
            raise ConfigError(
                "event_time",
                self.event_time,
                f"must be a TIMESTAMP column, but the event schema has {kind.simpleString()}",
            )
        for name in self.required:
            if name not in names:
                raise ConfigError("required", name, f"no such field in the event schema {names}")

    def _shown_schema(self) -> str:
        return self.event_schema.simpleString()

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Fields that must be non-null, in schema order (event time excluded)."""
        wanted = set(self.required) | {f.name for f in self.event_schema.fields if not f.nullable}
        wanted.discard(self.event_time)
        return tuple(n for n in self.event_schema.fieldNames() if n in wanted)

    def decoded_schema(self) -> StructType:
        """Schema of :func:`decode_kafka`'s output: nullable event columns, error, record."""
        from pyspark.sql.types import (
            BinaryType,
            IntegerType,
            LongType,
            StringType,
            StructField,
            StructType,
            TimestampType,
        )

        record = StructType(
            [
                StructField("key", BinaryType()),
                StructField("value", BinaryType()),
                StructField("topic", StringType()),
                StructField("partition", IntegerType()),
                StructField("offset", LongType()),
                StructField("timestamp", TimestampType()),
            ]
        )
        # Event columns are null on dead rows, so nullable at the top level; nested types
        # keep their nullability (they only matter where the parent is present). The
        # exact event schema rides along in the error column's metadata for good_events.
        fields = [StructField(f.name, f.dataType, True) for f in self.event_schema]
        meta = {EVENT_SCHEMA_KEY: self.event_schema.json()}
        fields.append(StructField(ERROR_COL, StringType(), True, meta))
        fields.append(StructField(RECORD_COL, record, False))
        return StructType(fields)


def _struct_from(schema: str | StructType) -> StructType:
    from pyspark.sql.types import StructType

    if isinstance(schema, StructType):
        return schema
    if not isinstance(schema, str) or not schema.strip():
        raise ConfigError("schema", schema, "expected a Spark DDL string or a StructType")
    try:
        parsed = StructType.fromDDL(schema)
    except Exception as exc:  # PySparkRuntimeError without a session, ParseException
        if "SESSION_OR_CONTEXT_NOT_EXISTS" in str(exc):
            raise ConfigError(
                "schema",
                schema,
                "parsing a DDL string needs an active SparkSession; create it first "
                "or pass a StructType",
            ) from exc
        raise ConfigError("schema", schema, f"not a valid Spark DDL schema: {exc}") from exc
    if not isinstance(parsed, StructType):
        raise ConfigError("schema", schema, "expected a struct of named fields")
    return parsed


# --------------------------------------------------------------------------------------
# Avro schema -> Spark schema
# --------------------------------------------------------------------------------------


def _load_avsc(path: str | Path) -> tuple[Any, StructType]:
    import fastavro
    from pyspark.sql.types import StructType

    source = Path(path)
    try:
        raw = json.loads(source.read_text())
    except OSError as exc:
        raise ConfigError("avro_schema", str(path), f"cannot read the file: {exc}") from exc
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "avro_schema", str(path), f"not JSON at char {exc.pos}: {exc.msg}"
        ) from exc
    try:
        parsed = fastavro.parse_schema(raw)
    except Exception as exc:
        raise ConfigError("avro_schema", str(path), f"not a valid Avro schema: {exc}") from exc
    if not isinstance(raw, dict) or raw.get("type") != "record":
        raise ConfigError("avro_schema", str(path), "the top-level Avro type must be a record")
    kind, _ = _avro_to_spark(raw, {}, str(path), "")
    assert isinstance(kind, StructType)
    return parsed, kind


def _avro_to_spark(
    avro: Any, named: dict[str, Any], path: str, where: str
) -> tuple[DataType, bool]:
    """The Spark type for an Avro type, and whether it is nullable."""
    from pyspark.sql import types as T

    primitive: dict[str, DataType] = {
        "boolean": T.BooleanType(),
        "int": T.IntegerType(),
        "long": T.LongType(),
        "float": T.FloatType(),
        "double": T.DoubleType(),
        "bytes": T.BinaryType(),
        "string": T.StringType(),
    }
    if isinstance(avro, list):
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise ConfigError(
                "avro_schema",
                path,
                f"field {where!r}: only unions of null and one type are supported, got {avro}",
            )
        kind, _ = _avro_to_spark(branches[0], named, path, where)
        return kind, len(branches) < len(avro)
    if isinstance(avro, str):
        if avro in primitive:
            return primitive[avro], False
        short = avro.rsplit(".", 1)[-1]
        if avro in named or short in named:
            return _avro_to_spark(named.get(avro, named.get(short)), named, path, where)
        raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")
    if not isinstance(avro, dict):
        raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")
    kind_name = avro.get("type")
    logical = avro.get("logicalType")
    if logical in ("timestamp-millis", "timestamp-micros"):
        return T.TimestampType(), False
    if logical in ("local-timestamp-millis", "local-timestamp-micros"):
        return T.TimestampNTZType(), False
    if logical == "date":
        return T.DateType(), False
    if logical == "decimal":
        return T.DecimalType(int(avro["precision"]), int(avro.get("scale", 0))), False
    if logical == "uuid":
        return T.StringType(), False
    if logical in ("time-millis", "time-micros"):
        raise ConfigError(
            "avro_schema", path, f"field {where!r}: logical type {logical!r} is not supported"
        )
    if kind_name == "record":
        if "name" in avro:
            named[avro["name"]] = avro
            named[str(avro["name"]).rsplit(".", 1)[-1]] = avro
        fields = []
        for f in avro.get("fields", []):
            sub = f"{where}.{f['name']}" if where else f["name"]
            ftype, nullable = _avro_to_spark(f["type"], named, path, sub)
            fields.append(T.StructField(f["name"], ftype, nullable))
        return T.StructType(fields), False
    if kind_name == "enum":
        named[avro["name"]] = avro
        return T.StringType(), False
    if kind_name == "fixed":
        named[avro["name"]] = avro
        return T.BinaryType(), False
    if kind_name == "array":
        item, nullable = _avro_to_spark(avro["items"], named, path, f"{where}[]")
        return T.ArrayType(item, nullable), False
    if kind_name == "map":
        value, nullable = _avro_to_spark(avro["values"], named, path, f"{where}{{}}")
        return T.MapType(T.StringType(), value, nullable), False
    if isinstance(kind_name, str | list | dict):
        return _avro_to_spark(kind_name, named, path, where)
    raise ConfigError("avro_schema", path, f"field {where!r}: unsupported type {avro!r}")


# --------------------------------------------------------------------------------------
# Value converters (run in Python workers)
# --------------------------------------------------------------------------------------


class _FieldError(Exception):
    """A value does not fit its declared type; the message is the DLQ reason."""


def _shown(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "an array"
    text = repr(value)
    return text if len(text) <= _MAX_SHOWN else text[: _MAX_SHOWN - 3] + "..."


def _mismatch(path: str, expected: str, value: Any, detail: str = "") -> _FieldError:
    extra = f" ({detail})" if detail else ""
    return _FieldError(f"field {path!r}: expected {expected}, got {_shown(value)}{extra}")


Converter = Callable[[Any, str], Any]
_INT_RANGES = {
    "tinyint": (-(2**7), 2**7 - 1),
    "smallint": (-(2**15), 2**15 - 1),
    "int": (-(2**31), 2**31 - 1),
    "bigint": (-(2**63), 2**63 - 1),
}


def _json_timestamp_micros(value: Any, path: str) -> int:
    if isinstance(value, bool) or value is None:
        raise _mismatch(path, "timestamp", value)
    if isinstance(value, int):
        return value * 1000  # epoch millis
    if isinstance(value, float | Decimal):
        if not math.isfinite(float(value)):
            raise _mismatch(path, "timestamp", value)
        return int(round(Decimal(value) * 1000))
    if isinstance(value, str):
        text = value.strip()
        try:
            moment = datetime.fromisoformat(text)
        except ValueError:
            raise _mismatch(path, "timestamp", value) from None
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
        return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
    raise _mismatch(path, "timestamp", value)


def _json_converter(kind: DataType) -> Converter:
    """A function validating one JSON value against ``kind`` and returning an Arrow-ready value.

    ``None`` passes through (nullability is checked by the caller).
    """
    from pyspark.sql import types as T

    if isinstance(kind, T.StringType):

        def conv_string(v: Any, p: str) -> Any:
            if v is None or isinstance(v, str):
                return v
            raise _mismatch(p, "string", v)

        return conv_string
    if isinstance(kind, T.BooleanType):

        def conv_bool(v: Any, p: str) -> Any:
            if v is None or isinstance(v, bool):
                return v
            raise _mismatch(p, "boolean", v)

        return conv_bool
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        name = kind.simpleString()
        low, high = _INT_RANGES[name]
        label = {"tinyint": "tinyint", "smallint": "smallint", "int": "int", "bigint": "long"}[name]

        def conv_int(v: Any, p: str) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int):
                raise _mismatch(p, label, v)
            if not low <= v <= high:
                raise _mismatch(p, label, v, "out of range")
            return v

        return conv_int
    if isinstance(kind, T.FloatType | T.DoubleType):
        label = "float" if isinstance(kind, T.FloatType) else "double"

        def conv_float(v: Any, p: str) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float | Decimal):
                raise _mismatch(p, label, v)
            return float(v)

        return conv_float
    if isinstance(kind, T.DecimalType):
        precision, scale = kind.precision, kind.scale
        quantum = Decimal(1).scaleb(-scale)

        def conv_decimal(v: Any, p: str) -> Any:
            if v is None:
                return None
            if isinstance(v, bool) or not isinstance(v, int | float | Decimal | str):
                raise _mismatch(p, kind.simpleString(), v)
            try:
                number = Decimal(str(v)) if not isinstance(v, Decimal) else v
                fitted = number.quantize(quantum)
            except (InvalidOperation, ValueError):
                raise _mismatch(p, kind.simpleString(), v) from None
            if fitted != number:
                raise _mismatch(p, kind.simpleString(), v, f"more than {scale} decimals")
            if len(fitted.as_tuple().digits) > precision and fitted != 0:
                raise _mismatch(p, kind.simpleString(), v, "too many digits")
            return fitted

        return conv_decimal
    if isinstance(kind, T.TimestampType | T.TimestampNTZType):

        def conv_ts(v: Any, p: str) -> Any:
            return None if v is None else _json_timestamp_micros(v, p)

        return conv_ts
    if isinstance(kind, T.DateType):

        def conv_date(v: Any, p: str) -> Any:
            if v is None:
                return None
            if not isinstance(v, str):
                raise _mismatch(p, "date", v)
            try:
                return date.fromisoformat(v.strip())
            except ValueError:
                raise _mismatch(p, "date", v) from None

        return conv_date
    if isinstance(kind, T.BinaryType):

        def conv_binary(v: Any, p: str) -> Any:
            if v is None:
                return None
            if not isinstance(v, str):
                raise _mismatch(p, "binary (base64 string)", v)
            try:
                return base64.b64decode(v, validate=True)
            except (binascii.Error, ValueError):
                raise _mismatch(p, "binary (base64 string)", v) from None

        return conv_binary
    if isinstance(kind, T.ArrayType):
        item = _json_converter(kind.elementType)
        contains_null = kind.containsNull

        def conv_array(v: Any, p: str) -> Any:
            if v is None:
                return None
            if not isinstance(v, list):
                raise _mismatch(p, "array", v)
            out = []
            for i, element in enumerate(v):
                if element is None and not contains_null:
                    raise _FieldError(f"field '{p}[{i}]' is null")
                out.append(item(element, f"{p}[{i}]"))
            return out

        return conv_array
    if isinstance(kind, T.MapType):
        if not isinstance(kind.keyType, T.StringType):
            key_conv = _json_converter(kind.keyType)
        else:
            key_conv = None
        value_conv = _json_converter(kind.valueType)
        contains_null = kind.valueContainsNull

        def conv_map(v: Any, p: str) -> Any:
            if v is None:
                return None
            if not isinstance(v, dict):
                raise _mismatch(p, "object (map)", v)
            out = []
            for key, element in v.items():
                sub = f"{p}[{key!r}]"
                if element is None and not contains_null:
                    raise _FieldError(f"field {sub!r} is null")
                if key_conv is not None:
                    key = key_conv(_number_or_text(key), sub)
                out.append((key, value_conv(element, sub)))
            return out

        return conv_map
    if isinstance(kind, T.StructType):
        return _struct_converter(kind, prefix=True)
    raise ConfigError("schema", kind.simpleString(), "unsupported type for JSON decoding")


def _number_or_text(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _struct_converter(kind: StructType, *, prefix: bool) -> Converter:
    parts = [(f.name, f.nullable, _json_converter(f.dataType)) for f in kind.fields]

    def conv_struct(v: Any, p: str) -> Any:
        if v is None:
            return None
        if not isinstance(v, dict):
            raise _mismatch(p, "object", v)
        out = {}
        for name, nullable, conv in parts:
            sub = f"{p}.{name}" if prefix and p else name
            element = v.get(name)
            if element is None and not nullable:
                if name not in v:
                    raise _FieldError(f"missing required field {sub!r}")
                raise _FieldError(f"required field {sub!r} is null")
            out[name] = conv(element, sub)
        return out

    return conv_struct


def _avro_normalizer(kind: DataType) -> Converter | None:
    """Turn fastavro's Python values into Arrow-ready ones; ``None`` if already fine."""
    from pyspark.sql import types as T

    if isinstance(kind, T.TimestampType | T.TimestampNTZType):

        def norm_ts(v: Any, p: str) -> Any:
            if isinstance(v, datetime):
                if v.tzinfo is None:
                    v = v.replace(tzinfo=UTC)
                delta = v - datetime(1970, 1, 1, tzinfo=UTC)
                return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds
            return v

        return norm_ts
    if isinstance(kind, T.StringType):

        def norm_str(v: Any, p: str) -> Any:
            return str(v) if isinstance(v, uuid.UUID) else v

        return norm_str
    if isinstance(kind, T.ArrayType):
        item = _avro_normalizer(kind.elementType)
        if item is None:
            return None
        item_conv = item

        def norm_array(v: Any, p: str) -> Any:
            return None if v is None else [item_conv(x, p) for x in v]

        return norm_array
    if isinstance(kind, T.MapType):
        value = _avro_normalizer(kind.valueType)

        def norm_map(v: Any, p: str) -> Any:
            if v is None:
                return None
            if value is None:
                return list(v.items())
            return [(k, value(x, p)) for k, x in v.items()]

        return norm_map
    if isinstance(kind, T.StructType):
        parts = [(f.name, _avro_normalizer(f.dataType)) for f in kind.fields]
        if all(conv is None for _, conv in parts):
            return None

        def norm_struct(v: Any, p: str) -> Any:
            if v is None:
                return None
            return {name: (conv(v.get(name), p) if conv else v.get(name)) for name, conv in parts}

        return norm_struct
    return None


# --------------------------------------------------------------------------------------
# Record decoders
# --------------------------------------------------------------------------------------


class _Decoder:
    """Decodes one value (bytes) into a dict of Arrow-ready top-level values, or raises."""

    def __init__(self, spec: DecoderSpec) -> None:
        self.spec = spec
        self.fields = [f.name for f in spec.event_schema.fields]
        self.required = spec.required_fields
        self.event_time = spec.event_time
        self.writer_schemas: WriterSchemas | None = None
        if spec.format == "json":
            # Decimal fields keep their digits exactly; other numbers parse as float.
            decimals = "decimal(" in spec.event_schema.simpleString()
            # one decoder for all records (json.loads with options builds one per call)
            self.json = json.JSONDecoder(parse_float=Decimal if decimals else float)
            self.converters = {
                f.name: _json_converter(f.dataType) for f in spec.event_schema.fields
            }
        else:
            self.normalizers = {
                f.name: _avro_normalizer(f.dataType) for f in spec.event_schema.fields
            }
            url = spec.schema_registry_url
            self.writer_schemas = WriterSchemas(url) if url else None

    def decode(self, value: bytes | None) -> dict[str, Any]:
        if value is None:
            raise _FieldError("value is null (tombstone record)")
        row = self._decode_json(value) if self.spec.format == "json" else self._decode_avro(value)
        if row.get(self.event_time) is None:
            raise _FieldError(f"event time {self.event_time!r} is null")
        return row

    def _decode_json(self, value: bytes) -> dict[str, Any]:
        try:
            text = value.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _FieldError(f"value is not UTF-8: invalid byte at {exc.start}") from None
        try:
            obj = self.json.decode(text)
        except json.JSONDecodeError as exc:
            raise _FieldError(f"invalid JSON at char {exc.pos}: {exc.msg}") from None
        except RecursionError:
            raise _FieldError("invalid JSON: nested too deeply") from None
        if not isinstance(obj, dict):
            raise _FieldError(f"expected a JSON object, got {_shown(obj)}")
        problems: list[str] = []
        row: dict[str, Any] = {}
        for name in self.required:
            if name not in obj:
                problems.append(f"missing required field {name!r}")
            elif obj[name] is None:
                problems.append(f"required field {name!r} is null")
        for name in self.fields:
            try:
                row[name] = self.converters[name](obj.get(name), name)
            except _FieldError as exc:
                problems.append(str(exc))
        if problems:
            raise _FieldError("; ".join(problems))
        return row

    def _decode_avro(self, value: bytes) -> dict[str, Any]:
        spec = self.spec
        mode = spec.wire_format
        if mode == "plain":
            record = self._read_avro(value, 0, "")
        elif mode == "confluent":
            record = self._read_confluent(value)
        else:
            if len(value) >= 5 and value[0] == 0:
                try:
                    record = self._read_confluent(value)
                except _FieldError as confluent_error:
                    try:
                        record = self._read_avro(value, 0, "")
                    except _FieldError:
                        raise confluent_error from None
            else:
                try:
                    record = self._read_avro(value, 0, "")
                except _FieldError as plain_error:
                    what = (
                        (f"magic byte 0x{value[0]:02x}" if value else "empty value")
                        if len(value) >= 5 or not value
                        else f"only {len(value)} bytes"
                    )
                    raise _FieldError(
                        f"not Confluent wire format / schema mismatch: {what}; "
                        f"as plain Avro: {plain_error}"
                    ) from None
        problems = []
        for name in self.required:
            if record.get(name) is None:
                problems.append(f"required field {name!r} is null")
        if problems:
            raise _FieldError("; ".join(problems))
        row = {}
        for name in self.fields:
            norm = self.normalizers[name]
            element = record.get(name)
            row[name] = norm(element, name) if norm is not None and element is not None else element
        return row

    def _read_confluent(self, value: bytes) -> dict[str, Any]:
        if len(value) < 5:
            raise _FieldError(
                f"not Confluent wire format: {len(value)} bytes, need magic byte + schema id"
            )
        if value[0] != 0:
            raise _FieldError(
                f"not Confluent wire format: magic byte 0x{value[0]:02x}, expected 0x00"
            )
        schema_id = int.from_bytes(value[1:5], "big")
        ids = self.spec.schema_ids
        if ids is not None and schema_id not in ids:
            raise _FieldError(
                f"unknown Confluent schema id {schema_id}, expected one of {sorted(ids)}"
            )
        writer = None
        if self.writer_schemas is not None:
            try:
                writer = self.writer_schemas.get(schema_id)
            except UnknownSchemaId as exc:
                raise _FieldError(str(exc)) from None
        return self._read_avro(value, 5, f" (Confluent schema id {schema_id})", writer)

    def _read_avro(
        self, value: bytes, start: int, context: str, writer: Any = None
    ) -> dict[str, Any]:
        import fastavro

        stream = io.BytesIO(value)
        stream.seek(start)
        try:
            if writer is None:
                record = fastavro.schemaless_reader(stream, self.spec.avro_parsed)
            else:
                record = fastavro.schemaless_reader(stream, writer, self.spec.avro_parsed)
        except Exception as exc:  # EOFError, StopIteration, UnicodeDecodeError, ...
            detail = str(exc) or type(exc).__name__
            if isinstance(exc, EOFError | StopIteration):
                detail = f"truncated: {detail}"
            raise _FieldError(f"Avro decode failed{context}: {detail}") from None
        trailing = len(value) - stream.tell()
        if trailing:
            raise _FieldError(
                f"Avro schema mismatch{context}: {trailing} bytes left after the record"
            )
        if not isinstance(record, dict):
            raise _FieldError(f"Avro decode failed{context}: not a record")
        return record


def _decode_batches(
    spec: DecoderSpec, arrow_schema: pa.Schema, batches: Iterable[pa.RecordBatch]
) -> Iterator[pa.RecordBatch]:
    decoder = _Decoder(spec)
    names = decoder.fields
    event_types = [arrow_schema.field(n).type for n in names]
    for batch in batches:
        record = _record_struct(batch)
        values = batch.column("value").to_pylist()
        columns: list[list[Any]] = [[] for _ in names]
        errors: list[str | None] = []
        for value in values:
            try:
                row = decoder.decode(value)
            except _FieldError as exc:
                errors.append(str(exc))
                for column in columns:
                    column.append(None)
                continue
            errors.append(None)
            for column, name in zip(columns, names, strict=True):
                column.append(row[name])
        arrays = [
            _to_arrow(column, kind, name, errors)
            for column, kind, name in zip(columns, event_types, names, strict=True)
        ]
        arrays.append(pa.array(errors, type=pa.string()))
        arrays.append(record)
        yield pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)


def _to_arrow(
    column: list[Any], kind: pa.DataType, name: str, errors: list[str | None]
) -> pa.Array:
    try:
        return pa.array(column, type=kind)
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        pass
    # A value passed validation but Arrow refuses it: find it, make that row a dead letter.
    out = []
    for i, value in enumerate(column):
        try:
            pa.array([value], type=kind)
            out.append(value)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as exc:
            errors[i] = f"field {name!r}: cannot convert {_shown(value)} to {kind}: {exc}"
            out.append(None)
    return pa.array(out, type=kind)


def _record_struct(batch: pa.RecordBatch) -> pa.StructArray:
    arrays = []
    for f in RECORD_ARROW_TYPE:
        column = batch.column(f.name)
        if column.type != f.type:
            column = column.cast(f.type)
        arrays.append(column)
    return pa.StructArray.from_arrays(arrays, fields=list(RECORD_ARROW_TYPE))


# --------------------------------------------------------------------------------------
# DataFrame API
# --------------------------------------------------------------------------------------


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
    per action (:func:`kappaplus.dlq.decoded_batch_writer` does this). The observed counts
    are reported once per micro-batch either way.

    >>> decoded = decode_kafka(spark.readStream.format("kappa_kafka")
    ...                        .option("subscribe", "trips").load(), spec)  # doctest: +SKIP
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema

    check_kafka_schema(df)
    out_schema = spec.decoded_schema()
    arrow_schema = to_arrow_schema(out_schema, timezone="UTC")
    arrow_schema = pa.schema(
        [f.with_type(RECORD_ARROW_TYPE) if f.name == RECORD_COL else f for f in arrow_schema]
    )
    columns = [
        F.col(n).cast("binary").alias(n) if n in ("key", "value") else F.col(n)
        for n in KAFKA_COLUMNS
    ]
    frozen_spec = spec

    def decode(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        return _decode_batches(frozen_spec, arrow_schema, batches)

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
