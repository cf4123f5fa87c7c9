"""JSON decoding in the JVM for the records it can vouch for; the others go to Python.

The record value is parsed once with Spark's ``try_parse_json`` (a ``VARIANT``, which keeps
each JSON value's kind: string, number, boolean, object, array). Every field then gets two
Spark expressions from :func:`field_check`:

- ``ok``: the Python converter (:mod:`kappaplus.codecs.convert`) would accept this value and
  produce exactly ``value``;
- ``value``: the typed value.

A record is *vouched for* when the whole value is one JSON object (nothing after it) and
every field is ``ok``; it is then decoded without Python. Any other record is decoded by the
Python decoder, which gives the exact dead-letter reason, or the event when the record is
good after all (an epoch-millis float, a map, a base64 binary ...). So the checks only have
to be sound one way: when ``ok`` holds, Python agrees; when in doubt, ``ok`` is false.

Why ``VARIANT`` rather than ``from_json``: ``from_json`` reads ``3`` into a ``STRING`` field
as ``"3"``, ``"NaN"`` into a ``DOUBLE`` as NaN and rounds ``1.234`` into ``DECIMAL(10,2)``,
while the Python converter rejects all three; the variant keeps the JSON kind to compare.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from kappaplus.codecs.decoder import decode_flagged
from kappaplus.codecs.schema import ERROR_COL, EVENT_SCHEMA_KEY, KAFKA_COLUMNS, RECORD_COL
from kappaplus.codecs.spec import DecoderSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, DecimalType, StructType

_INTEGRAL_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MAX_BRACKETS = 500
"""More ``[``/``{`` characters than this (in the raw text, strings included) and the record
goes to Python: Python's parser stops at a nesting depth below Jackson's limit."""
_MAX_EPOCH_MILLIS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z
# The ISO forms both datetime.fromisoformat and Spark's string -> timestamp cast read alike
# (year 0001-9999, T or space, seconds and 1-6 fraction digits optional, Z or +hh:mm).
_DATE = r"(?!0000)[0-9]{4}-[0-9]{2}-[0-9]{2}"
_ZONE = r"(Z|[+-][0-9]{2}:[0-9]{2})"
_TS_RE = rf"^{_DATE}[T ][0-9]{{2}}:[0-9]{{2}}(:[0-9]{{2}}(\.[0-9]{{1,6}})?)?{_ZONE}?$"
_DATE_RE = rf"^{_DATE}$"
_ZONED_RE = rf"{_ZONE}$"
_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DECIMAL_KIND = r"^DECIMAL\(([0-9]+),([0-9]+)\)$"


@dataclass(frozen=True)
class Check:
    """``ok``: Python would accept the value and produce ``value``; never null."""

    ok: Column
    value: Column


def variant_path(name: str) -> str | None:
    """The variant path of a field, or ``None`` when the name cannot be written as one."""
    if _PLAIN_NAME.match(name):
        return f"$.{name}"
    if "'" in name or "\\" in name or not name:
        return None
    return f"$['{name}']"


def supported(schema: StructType) -> bool:
    """Whether every field name (at any depth) can be addressed by a variant path."""
    from pyspark.sql import types as T

    def walk(kind: DataType) -> bool:
        if isinstance(kind, T.StructType):
            return all(variant_path(f.name) and walk(f.dataType) for f in kind.fields)
        if isinstance(kind, T.ArrayType):
            return walk(kind.elementType)
        return True

    return walk(schema)


def record_checks(text: Column) -> tuple[Column, Column]:
    """``(ok, variant)`` of a record's value (a string column): ``ok`` when the value is
    one JSON object with nothing after it that Python reads the same way."""
    from pyspark.sql import functions as F

    variant = F.try_parse_json(text)
    # try_parse_json stops after the first JSON value; "[" + text + "]" holding exactly one
    # element rules out anything after it but "]..." and '{"k":' + text + "}" rules that out.
    one_value = (F.json_array_length(F.concat(F.lit("["), text, F.lit("]"))) == 1) & (
        F.size(F.json_object_keys(F.concat(F.lit('{"k":'), text, F.lit("}")))) == 1
    )
    brackets = F.length(text) - F.length(F.translate(text, "[{", ""))
    ok = (
        variant.isNotNull()
        & F.is_valid_utf8(text)
        & text.rlike(r"^[ \t\n\r]*\{")
        & (brackets <= _MAX_BRACKETS)
        & one_value
    )
    return F.coalesce(ok, F.lit(False)), variant


def field_check(kind: DataType, x: Column, *, nullable: bool, top_level: bool = False) -> Check:
    """The check of one JSON value ``x`` (a variant, SQL null when the key is missing).

    A NOT NULL value (``nullable`` false) is ``ok`` only when present; nested, its value
    column is non-nullable too, so the struct or array type matches the schema exactly.
    """
    from pyspark.sql import functions as F

    missing = x.isNull() | F.coalesce(F.is_variant_null(x), F.lit(True))
    present_ok, value = _typed(kind, x)
    present_ok = F.coalesce(present_ok, F.lit(False))
    if top_level:  # every event column is nullable in the decoded frame
        ok = (missing & F.lit(nullable)) | (~missing & present_ok)
        return Check(ok, F.when(~missing & present_ok, value))
    if nullable:
        return Check(missing | (~missing & present_ok), F.when(~missing & present_ok, value))
    default = _default(kind)
    if default is None:  # a NOT NULL nested struct or array: Python decides
        return Check(F.lit(False), F.when(~missing & present_ok, value))
    return Check(~missing & present_ok, F.coalesce(value, default))


def _default(kind: DataType) -> Column | None:
    """A non-null literal of ``kind`` (keeps NOT NULL nested fields non-nullable)."""
    from datetime import date

    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(kind, T.StringType):
        return F.lit("")
    if isinstance(kind, T.BooleanType):
        return F.lit(False)
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.DoubleType):
        return F.lit(0).cast(kind)
    if isinstance(kind, T.DecimalType):
        return F.lit(0).cast(kind)
    if isinstance(kind, T.TimestampType):
        return F.timestamp_micros(F.lit(0))
    if isinstance(kind, T.DateType):
        return F.lit(date(1970, 1, 1))
    return None


def _typed(kind: DataType, x: Column) -> tuple[Column, Column]:
    """``(ok, value)`` for a present, non-null JSON value ``x`` of the declared ``kind``."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    k = F.schema_of_variant(x)
    if isinstance(kind, T.StringType) and not isinstance(kind, T.CharType | T.VarcharType):
        return k == "STRING", F.try_variant_get(x, "$", "string")
    if isinstance(kind, T.BooleanType):
        return k == "BOOLEAN", F.try_variant_get(x, "$", "boolean")
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        value = F.try_variant_get(x, "$", kind.simpleString())
        return k.isin(*_INTEGRAL_KINDS) & value.isNotNull(), value
    if isinstance(kind, T.DoubleType):
        value = F.try_variant_get(x, "$", "double")
        # DECIMAL(p, s) with p <= 15 converts to the correctly rounded double, as float()
        exact = k.isin(*_INTEGRAL_KINDS, "DOUBLE") | k.rlike(r"^DECIMAL\(([1-9]|1[0-5]),")
        finite = ~F.isnan(value) & (F.abs(value) != F.lit(float("inf")))
        return exact & finite, value
    if isinstance(kind, T.DecimalType):
        return _decimal(kind, x, k)
    if isinstance(kind, T.TimestampType):
        return _timestamp(x, k)
    if isinstance(kind, T.DateType):
        text = F.try_variant_get(x, "$", "string")
        value = text.try_cast("date")
        return (k == "STRING") & text.rlike(_DATE_RE) & value.isNotNull(), value
    if isinstance(kind, T.StructType):
        checks = []
        for f in kind.fields:
            path = variant_path(f.name)
            assert path is not None  # supported() was checked
            sub = F.try_variant_get(x, path, "variant")
            checks.append((f.name, field_check(f.dataType, sub, nullable=f.nullable)))
        ok = k.startswith("OBJECT")
        for _, check in checks:
            ok = ok & check.ok
        return ok, F.struct(*[check.value.alias(name) for name, check in checks])
    if isinstance(kind, T.ArrayType):
        element, contains_null = kind.elementType, kind.containsNull
        items = F.try_variant_get(x, "$", "array<variant>")
        ok = k.startswith("ARRAY") & F.forall(
            items, lambda e: field_check(element, e, nullable=contains_null).ok
        )
        return ok, F.transform(
            items, lambda e: field_check(element, e, nullable=contains_null).value
        )
    # maps, binary, float, timestamp_ntz, ...: only a null value is vouched for here
    return F.lit(False), F.lit(None).cast(kind)


def _decimal(kind: DecimalType, x: Column, k: Column) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    precision, scale = kind.precision, kind.scale
    value = F.try_variant_get(x, "$", kind.simpleString())
    digits = F.regexp_extract(k, _DECIMAL_KIND, 1).try_cast("int")
    decimals = F.regexp_extract(k, _DECIMAL_KIND, 2).try_cast("int")
    # the variant keeps the decimal's digits without trailing zeros: it fits without
    # rounding when it has no more decimals and no more integer digits than the field
    fits = (decimals <= scale) & (digits - decimals <= precision - scale)
    ok = (k.isin(*_INTEGRAL_KINDS) | fits) & value.isNotNull()
    return ok, value


def _timestamp(x: Column, k: Column) -> tuple[Column, Column]:
    from pyspark.sql import functions as F

    millis = F.try_variant_get(x, "$", "bigint")
    in_range = k.isin(*_INTEGRAL_KINDS) & (F.abs(millis) <= _MAX_EPOCH_MILLIS)
    from_millis = F.timestamp_micros(F.try_multiply(millis, F.lit(1000)))
    text = F.try_variant_get(x, "$", "string")
    zoned = F.when(text.rlike(_ZONED_RE), text).otherwise(F.concat(text, F.lit("Z")))
    parsed = zoned.try_cast("timestamp")
    from_text = (k == "STRING") & text.rlike(_TS_RE) & parsed.isNotNull()
    ok = in_range | from_text
    return ok, F.when(in_range, from_millis).when(from_text, parsed)


VOUCHED = "_kappa_vouched"
"""Column of :func:`json_checks`: the JVM vouches for the record."""
_PY = "_kappa_python"


def json_checks(records: DataFrame, spec: DecoderSpec) -> DataFrame:
    """``records`` (:data:`KAFKA_COLUMNS`, key and value binary) with :data:`VOUCHED` (the
    JVM vouches for the record: never null) and the typed event fields as ``_kappa_f<i>``."""
    from pyspark.sql import functions as F

    text = F.col("value").cast("string")
    record_ok, variant = record_checks(text)
    staged = records.select(*KAFKA_COLUMNS, record_ok.alias(VOUCHED), variant.alias("_kappa_v"))
    required = set(spec.required_fields) | {spec.event_time}
    ok = F.col(VOUCHED)
    values = []
    for i, f in enumerate(spec.event_schema.fields):
        path = variant_path(f.name)
        assert path is not None  # supported() was checked
        x = F.try_variant_get(F.col("_kappa_v"), path, "variant")
        check = field_check(f.dataType, x, nullable=f.name not in required, top_level=True)
        ok = ok & check.ok
        values.append(check.value.alias(f"_kappa_f{i}"))
    return staged.select(*KAFKA_COLUMNS, F.coalesce(ok, F.lit(False)).alias(VOUCHED), *values)


def decode_json_frame(records: DataFrame, spec: DecoderSpec) -> DataFrame:
    """:func:`~kappaplus.codecs.decode_kafka` for JSON: ``records`` has :data:`KAFKA_COLUMNS`
    (key and value binary); the result has the same columns and types as the Python path.

    The records the JVM vouches for never reach Python: the Arrow UDF that decodes the
    others receives a null value and a false flag for them and answers with a null row.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StringType, StructField, StructType

    checked = json_checks(records, spec)
    names = spec.event_schema.fieldNames()
    out_type = StructType(
        [StructField(f.name, f.dataType, True) for f in spec.event_schema]
        + [StructField(ERROR_COL, StringType(), True)]
    )
    arrow_type = to_arrow_schema(StructType([StructField("r", out_type)]), timezone="UTC")
    row_type = arrow_type.field("r").type
    frozen_spec = spec

    def fallback(values: pa.Array, flagged: pa.Array) -> pa.Array:
        return decode_flagged(frozen_spec, row_type, values, flagged)

    python = F.arrow_udf(fallback, out_type)  # type: ignore[call-overload]
    need = ~F.col(VOUCHED)
    both = checked.select("*", python(F.when(need, F.col("value")), need).alias(_PY))
    fast = F.col(VOUCHED)
    meta = {EVENT_SCHEMA_KEY: spec.event_schema.json()}
    return both.select(
        *[
            F.when(fast, F.col(f"_kappa_f{i}")).otherwise(F.col(_PY)[name]).alias(name)
            for i, name in enumerate(names)
        ],
        F.when(fast, F.lit(None).cast("string"))
        .otherwise(F.col(_PY)[ERROR_COL])
        .alias(ERROR_COL, metadata=meta),
        # when(true, c): nullable like the Python path's record struct fields
        F.struct(*[F.when(F.lit(True), F.col(n)).alias(n) for n in KAFKA_COLUMNS]).alias(
            RECORD_COL
        ),
    )
