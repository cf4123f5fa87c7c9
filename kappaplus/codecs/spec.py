"""How a Kafka record's value becomes one typed event: :class:`DecoderSpec`, validated at
construction (errors name the option and the value)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.codecs.avro import _load_avsc
from kappaplus.codecs.schema import (
    ERROR_COL,
    EVENT_SCHEMA_KEY,
    RECORD_COL,
    Format,
    JsonDecoder,
    WireFormat,
)
from kappaplus.errors import ConfigError
from kappaplus.secrets import mask_url

if TYPE_CHECKING:
    from pyspark.sql.types import StructType


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
    - ``json_decoder``: JSON only: ``"python"`` (default: every record through the Python
      decoder) or ``"jvm"`` (Spark decodes the records it can vouch for, Python only the
      others, with the same events and reasons: :mod:`kappaplus.codecs.fastjson`; not faster
      on the measured workload, see ``docs/benchmarks.md``).

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
    json_decoder: JsonDecoder = "python"
    event_schema: StructType = field(init=False, repr=False, compare=False)
    avro_parsed: Any = field(init=False, repr=False, compare=False, default=None)

    def __post_init__(self) -> None:
        if self.format not in ("json", "avro"):
            raise ConfigError("format", self.format, "expected 'json' or 'avro'")
        if self.format == "json" and self.schema_registry_url is not None:
            raise ConfigError("schema_registry_url", "***", "only for format 'avro'")
        if self.json_decoder not in ("python", "jvm"):
            raise ConfigError("json_decoder", self.json_decoder, "expected 'python' or 'jvm'")
        if self.format != "json" and self.json_decoder != "python":
            raise ConfigError("json_decoder", self.json_decoder, "only for format 'json'")
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
