"""How a Kafka record's value becomes one typed event: :class:`DecoderSpec`, validated at
construction (errors name the option and the value)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import field
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from kappaplus.codecs.avro import _load_avsc
from kappaplus.codecs.schema import (
    ERROR_COL,
    EVENT_SCHEMA_KEY,
    RECORD_COL,
    Format,
    JsonDecoder,
    WireFormat,
)
from kappaplus.core.errors import ConfigError
from kappaplus.core.options import (
    NAME,
    TEXT,
    Kind,
    check_fields,
    choice,
    from_options,
    names,
    option,
    options_class,
    to_options,
)
from kappaplus.core.secrets import mask_url

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


def _schema(text: str, option: str) -> str | StructType:
    """A ``StructType`` JSON (what :meth:`DecoderSpec.to_options` writes) or DDL text."""
    if not text.startswith("{"):
        return text
    try:
        return _accept_schema(json.loads(text), option)
    except ValueError as exc:
        raise ConfigError(option, text[:80], f"not a Spark schema JSON: {exc}") from exc


def _accept_schema(value: Any, option: str) -> StructType:
    from pyspark.sql.types import StructType

    if isinstance(value, StructType):
        return value
    try:
        return StructType.fromJson(value)
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(
            option, value, f"expected a Spark DDL string or a StructType: {exc}"
        ) from exc


def _schema_text(schema: str | StructType) -> str:
    return schema if isinstance(schema, str) else schema.json()


SCHEMA: Kind[Any] = Kind(
    "a Spark DDL string or a StructType", _schema, _schema_text, _accept_schema
)


def _file(text: str, option: str) -> str:
    return text


def _accept_file(value: Any, option: str) -> Path:
    if not isinstance(value, Path):
        raise ConfigError(option, value, "expected the path of an .avsc file")
    return value


AVSC_FILE: Kind[Any] = Kind("the path of an .avsc file", _file, str, _accept_file)
PROTO_FILE: Kind[Any] = Kind("the path of a .proto file or a descriptor set", _file, str, _file)


def _ids(text: str, option: str) -> frozenset[int]:
    return _accept_ids([t.strip() for t in text.split(",") if t.strip()], option)


def _accept_ids(value: Any, option: str) -> frozenset[int]:
    try:
        return frozenset(int(i) for i in value if not isinstance(i, bool))
    except (TypeError, ValueError):
        raise ConfigError(option, value, "expected schema ids (whole numbers)") from None


SCHEMA_IDS: Kind[frozenset[int]] = Kind(
    "schema ids", _ids, lambda ids: ",".join(str(i) for i in sorted(ids)), _accept_ids
)


@options_class
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
    - ``proto_schema`` / ``message``: Protobuf only: a ``.proto`` file (compiled when the spec
      is made) or a descriptor set, and the message's full name (``rides.v1.Ride``); the
      event schema is derived from it (:mod:`kappaplus.codecs.protobuf_schema`). With
      ``schema_registry_url`` or ``wire_format="confluent"`` values are Confluent-framed
      (:mod:`kappaplus.codecs.protobuf_registry`); ``"auto"`` tells the two apart by the
      first byte (a Protobuf message never starts with 0).
    - ``event_time_unit``: JSON and Protobuf: the unit of a numeric event time (``s``, ``ms``,
      ``us``); without it a record whose event time is a number is a dead letter whose
      reason says to declare the unit (a unit is never guessed).
    - ``json_decoder``: JSON only: ``"python"`` (default: every record through the Python
      decoder) or ``"jvm"`` (Spark decodes the records it can vouch for, Python only the
      others, with the same events and reasons: :mod:`kappaplus.codecs.fastjson`; not faster
      on the measured workload, see ``docs/benchmarks.md``).

    >>> DecoderSpec(format="avro", avro_schema="trip.avsc", event_time="ts")  # doctest: +SKIP
    """

    format: Format = option("format", choice(get_args(Format)))
    event_time: str = option("eventTime", NAME)
    schema: str | StructType | None = option("schema", SCHEMA, default=None)
    avro_schema: str | Path | None = option("avroSchema", AVSC_FILE, default=None)
    required: tuple[str, ...] = option("required", names(what="fields"), default=())
    wire_format: WireFormat = option("wireFormat", choice(get_args(WireFormat)), default="auto")
    schema_ids: frozenset[int] | None = option("schemaIds", SCHEMA_IDS, default=None)
    schema_registry_url: str | None = option("schemaRegistryUrl", TEXT, default=None, repr=False)
    json_decoder: JsonDecoder = option(
        "jsonDecoder", choice(get_args(JsonDecoder)), default="python"
    )
    event_time_unit: str | None = option("eventTimeUnit", choice(("s", "ms", "us")), default=None)
    proto_schema: str | Path | None = option("protoSchema", PROTO_FILE, default=None)
    message: str | None = option("message", NAME, default=None)
    event_schema: StructType = field(init=False, repr=False, compare=False)
    avro_parsed: Any = field(init=False, repr=False, compare=False, default=None)
    proto_set: bytes | None = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        check_fields(self)
        if self.format == "json" and self.schema_registry_url is not None:
            raise ConfigError(
                "schema_registry_url", "***", "only for formats 'avro' and 'protobuf'"
            )
        if self.format != "protobuf" and self.message is not None:
            raise ConfigError("message", self.message, "only for format 'protobuf'")
        if self.format != "json" and self.json_decoder != "python":
            raise ConfigError("json_decoder", self.json_decoder, "only for format 'json'")
        if self.format == "json":
            if self.schema is None:
                raise ConfigError("schema", None, "format 'json' needs the event schema")
            if self.avro_schema is not None:
                raise ConfigError("avro_schema", self.avro_schema, "only for format 'avro'")
            event_schema = _struct_from(self.schema)
        elif self.format == "protobuf":
            event_schema = self._protobuf_schema()
        else:
            if self.avro_schema is None:
                raise ConfigError("avro_schema", None, "format 'avro' needs an .avsc file path")
            if self.schema is not None:
                raise ConfigError(
                    "schema", self.schema, "format 'avro' derives the schema from avro_schema"
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

    def _protobuf_schema(self) -> StructType:
        from kappaplus.codecs.protobuf_schema import (
            descriptor_set,
            message_descriptor,
            spark_schema,
        )

        if self.proto_schema is None:
            raise ConfigError(
                "schema_file", None, "format 'protobuf' needs a .proto file or a descriptor set"
            )
        if self.message is None:
            raise ConfigError(
                "message", None, "format 'protobuf' needs the message's full name (pkg.Message)"
            )
        for other in ("schema", "avro_schema"):
            if getattr(self, other) is not None:
                raise ConfigError(
                    other, "...", "format 'protobuf' derives the schema from schema_file"
                )
        if self.schema_registry_url is not None and self.wire_format == "plain":
            raise ConfigError(
                "schema_registry_url",
                mask_url(self.schema_registry_url),
                "a registry needs the Confluent wire format: wire_format 'confluent' or 'auto'",
            )
        path = str(self.proto_schema)
        data = descriptor_set(path)
        descriptor = message_descriptor(data, self.message, path)
        object.__setattr__(self, "proto_set", data)
        return spark_schema(descriptor, path, self.event_time, self.event_time_unit)

    @classmethod
    def parse(cls, options: Mapping[str, Any]) -> DecoderSpec:
        """A spec from its options (:meth:`to_options`; Python values are taken too)."""
        return from_options(cls, options)

    def to_options(self) -> dict[str, str]:
        """The options :meth:`parse` reads as this spec: a JSON decoder's schema as the
        ``StructType`` JSON, so that reading it needs no SparkSession."""
        out = to_options(self)
        if self.format == "json":
            out["schema"] = self.event_schema.json()
        return out

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
        """Fields that must be present and non-null, in schema order (event time excluded):
        :func:`~kappaplus.codecs.required.required_names`."""
        from kappaplus.codecs.required import required_names

        return required_names(self.event_schema, self.required, event_time=self.event_time)

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
