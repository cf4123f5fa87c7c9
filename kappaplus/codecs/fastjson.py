"""JSON decoding in the JVM for the records it can vouch for; the others go to Python.

Used by :func:`~kappaplus.codecs.decode_kafka` with ``DecoderSpec(json_decoder="jvm")``
(opt-in: on the measured workload it is not faster than the Python decoder, see
``docs/benchmarks.md``). The record value is parsed once with Spark's ``try_parse_json``
(a ``VARIANT``, which keeps each JSON value's kind: string, number, boolean, object, array);
:func:`typed_value` then gives each field's typed value, null unless the Python converter
(:mod:`kappaplus.codecs.convert`) would accept the JSON value and produce exactly that.

A record is *vouched for* when the whole value is one JSON object (nothing after it) and
every field is present with an accepted value or missing/null where allowed; it is then
decoded without Python. Any other record is decoded by the Python decoder, which gives the
exact dead-letter reason, or the event when the record is good after all (an epoch-millis
float, a map, a base64 binary ...). So the checks only have to be sound one way: when the
JVM vouches, Python agrees; when in doubt, the record goes to Python.

Why ``VARIANT`` rather than ``from_json``: ``from_json`` reads ``3`` into a ``STRING`` field
as ``"3"``, ``"NaN"`` into a ``DOUBLE`` as NaN and rounds ``1.234`` into ``DECIMAL(10,2)``,
while the Python converter rejects all three; the variant keeps the JSON kind to compare.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa

from kappaplus.codecs.arrow_json import MAX_BRACKETS
from kappaplus.codecs.decoder import decode_flagged
from kappaplus.codecs.schema import ERROR_COL, EVENT_SCHEMA_KEY, KAFKA_COLUMNS, RECORD_COL
from kappaplus.codecs.spec import DecoderSpec

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame
    from pyspark.sql.types import DataType, DecimalType, StructType

_INTEGRAL_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")
_MAX_BRACKETS = MAX_BRACKETS
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


def record_checks(text: Column, wrapped: Column) -> Column:
    """``ok`` (never null) when a record's value ``text`` is one JSON object with nothing
    after it that Python reads the same way; ``wrapped``: ``try_parse_json("[" + text + "]")``.
    """
    from pyspark.sql import functions as F

    # One element in "[" + text + "]" rules out anything after the object but "]...",
    # which ends the array early; only then is '{"k":' + text + "}" parsed to rule that out.
    one = wrapped.isNotNull() & F.try_variant_get(wrapped, "$[1]", "variant").isNull()
    nothing_after = (
        F.when(~text.contains("]"), F.lit(True))
        .when(~text.rlike(r"\}[ \t\n\r]*\]"), F.lit(True))
        .otherwise(F.size(F.json_object_keys(F.concat(F.lit('{"k":'), text, F.lit("}")))) == 1)
    )
    # Python's parser gives up at a smaller nesting depth than Jackson's 1000; that takes
    # 2 characters a level
    shallow = F.when(F.length(text) < 2 * _MAX_BRACKETS, F.lit(True)).otherwise(
        F.length(text) - F.length(F.translate(text, "[{", "")) <= _MAX_BRACKETS
    )
    starts = F.when(text.startswith("{"), F.lit(True)).otherwise(text.rlike(r"^[ \t\n\r]*\{"))
    ok = one & F.is_valid_utf8(text) & starts & shallow & nothing_after
    return F.coalesce(ok, F.lit(False))


def field_check(kind: DataType, x: Column, *, nullable: bool) -> Check:
    """The check of one nested JSON value ``x`` (a variant, SQL null when the key is missing).

    A NOT NULL value (``nullable`` false) is ``ok`` only when present and its value column is
    non-nullable too, so the struct or array type matches the schema exactly.
    """
    from pyspark.sql import functions as F

    missing = is_missing(x)
    k = F.schema_of_variant(x)
    value = typed_value(kind, x, k, lambda t: raw_value(x, k, t))
    present_ok = ~missing & value.isNotNull()
    if nullable:
        return Check(missing | present_ok, F.when(present_ok, value))
    default = _default(kind)
    if default is None:  # a NOT NULL nested struct or array: Python decides
        return Check(F.lit(False), F.when(present_ok, value))
    return Check(present_ok, F.coalesce(value, default))


def is_missing(x: Column) -> Column:
    """The key is missing or its value is JSON null (never null)."""
    from pyspark.sql import functions as F

    return x.isNull() | F.coalesce(F.is_variant_null(x), F.lit(True))


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


def raw_types(kind: DataType) -> tuple[str, ...]:
    """The types :func:`typed_value` reads a value of ``kind`` as (``try_variant_get``)."""
    from pyspark.sql import types as T

    if isinstance(kind, T.StringType | T.BooleanType | T.DoubleType | T.DateType):
        return ("string" if isinstance(kind, T.DateType) else kind.simpleString(),)
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType | T.DecimalType):
        return (kind.simpleString(),)
    if isinstance(kind, T.TimestampType):
        return ("bigint", "string")
    return ()


def raw_value(x: Column, k: Column, t: str) -> Column:
    """``x`` as ``t`` when its kind ``k`` can be read as ``t`` (a failed ``try_variant_get``
    costs a JVM exception: read only the kinds :func:`typed_value` may accept)."""
    from pyspark.sql import functions as F

    if t in ("string", "boolean"):
        guard = k == t.upper()
    elif t in ("double",) or t.startswith("decimal"):
        guard = k.isin(*_INTEGRAL_KINDS, "DOUBLE") | k.startswith("DECIMAL")
    else:  # integral types
        guard = k.isin(*_INTEGRAL_KINDS)
    return F.when(guard, F.try_variant_get(x, "$", t))


def typed_value(kind: DataType, x: Column, k: Column, raw: Callable[[str], Column]) -> Column:
    """The value of a present JSON value ``x`` as ``kind``, null unless Python would accept
    it and produce exactly that. ``k``: ``schema_of_variant(x)``; ``raw(t)``: ``x`` as ``t``
    (``try_variant_get``; ``t`` one of :func:`raw_types`)."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if isinstance(kind, T.CharType | T.VarcharType):
        return F.lit(None).cast(kind)
    if isinstance(kind, T.StringType):
        return F.when(k == "STRING", raw("string"))
    if isinstance(kind, T.BooleanType):
        return F.when(k == "BOOLEAN", raw("boolean"))
    if isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType):
        return F.when(k.isin(*_INTEGRAL_KINDS), raw(kind.simpleString()))
    if isinstance(kind, T.DoubleType):
        value = raw("double")
        # DECIMAL(p, s) with p <= 15 converts to the correctly rounded double, as float()
        exact = k.isin(*_INTEGRAL_KINDS, "DOUBLE") | k.rlike(r"^DECIMAL\(([1-9]|1[0-5]),")
        finite = ~F.isnan(value) & (F.abs(value) != F.lit(float("inf")))
        return F.when(exact & finite, value)
    if isinstance(kind, T.DecimalType):
        return _decimal(kind, k, raw(kind.simpleString()))
    if isinstance(kind, T.TimestampType):
        return _timestamp(k, raw("bigint"), raw("string"))
    if isinstance(kind, T.DateType):
        text = raw("string")
        return F.when((k == "STRING") & text.rlike(_DATE_RE), text.try_cast("date"))
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
        return F.when(ok, F.struct(*[check.value.alias(name) for name, check in checks]))
    if isinstance(kind, T.ArrayType):
        element, contains_null = kind.elementType, kind.containsNull
        items = F.try_variant_get(x, "$", "array<variant>")
        ok = k.startswith("ARRAY") & F.forall(
            items, lambda e: field_check(element, e, nullable=contains_null).ok
        )
        return F.when(
            ok,
            F.transform(items, lambda e: field_check(element, e, nullable=contains_null).value),
        )
    # maps, binary, float, timestamp_ntz, ...: only a null value is vouched for here
    return F.lit(None).cast(kind)


def _decimal(kind: DecimalType, k: Column, value: Column) -> Column:
    from pyspark.sql import functions as F

    precision, scale = kind.precision, kind.scale
    digits = F.regexp_extract(k, _DECIMAL_KIND, 1).try_cast("int")
    decimals = F.regexp_extract(k, _DECIMAL_KIND, 2).try_cast("int")
    # the variant keeps the decimal's digits without trailing zeros: it fits without
    # rounding when it has no more decimals and no more integer digits than the field
    fits = (decimals <= scale) & (digits - decimals <= precision - scale)
    return F.when(k.isin(*_INTEGRAL_KINDS) | F.coalesce(fits, F.lit(False)), value)


def _timestamp(k: Column, millis: Column, text: Column) -> Column:
    from pyspark.sql import functions as F

    in_range = k.isin(*_INTEGRAL_KINDS) & (F.abs(millis) <= _MAX_EPOCH_MILLIS)
    from_millis = F.timestamp_micros(F.try_multiply(millis, F.lit(1000)))
    zoned = F.when(text.endswith("Z") | text.rlike(_ZONED_RE), text).otherwise(
        F.concat(text, F.lit("Z"))
    )
    from_text = F.when((k == "STRING") & text.rlike(_TS_RE), zoned.try_cast("timestamp"))
    return F.when(in_range, from_millis).otherwise(from_text)


def _event_time(k: Column, raw: Callable[[str], Column], value: Column, unit: str | None) -> Column:
    """The event time's typed value: a number only in its declared unit (without one the
    record goes to Python, which dead-letters it with the reason), else an ISO string."""
    from pyspark.sql import functions as F

    text = F.when(k == "STRING", value)
    if unit is None:
        return text
    scale = {"s": F.timestamp_seconds, "ms": F.timestamp_millis, "us": F.timestamp_micros}[unit]
    bound = _MAX_EPOCH_MILLIS // {"s": 1000, "ms": 1, "us": 1}[unit]
    bound = bound * 1000 if unit == "us" else bound
    number = k.isin(*_INTEGRAL_KINDS) & (F.abs(raw("bigint")) <= bound)
    return F.when(number, scale(raw("bigint"))).otherwise(text)


VOUCHED = "_kappa_vouched"
"""Column of :func:`json_checks`: the JVM vouches for the record."""
_PY = "_kappa_python"


def json_checks(records: DataFrame, spec: DecoderSpec) -> DataFrame:
    """``records`` (:data:`KAFKA_COLUMNS`, key and value binary) with :data:`VOUCHED` (the
    JVM vouches for the record: never null) and the typed event fields as ``_kappa_f<i>``.

    Built in steps (one ``select`` each) so that no expression is computed twice per row:
    the parse, each field's variant, its kind and raw values, its typed value, the verdict.
    """
    from pyspark.sql import functions as F

    fields = spec.event_schema.fields
    required = set(spec.required_fields) | {spec.event_time}
    keep = [F.col(n) for n in KAFKA_COLUMNS]
    text = F.col("value").cast("string")
    wrapped = F.try_parse_json(F.concat(F.lit("["), text, F.lit("]")))
    step = records.select(*keep, wrapped.alias("_kappa_v"))
    xs = []
    for i, f in enumerate(fields):
        path = variant_path(f.name)
        assert path is not None  # supported() was checked
        xs.append(F.try_variant_get("_kappa_v", "$[0]" + path[1:], "variant").alias(f"_x{i}"))
    step = step.select(*keep, record_checks(text, F.col("_kappa_v")).alias("_ok"), *xs)
    keep.append(F.col("_ok"))
    xs = [F.col(f"_x{i}") for i in range(len(fields))]
    kinds = [is_missing(x).alias(f"_m{i}") for i, x in enumerate(xs)]
    kinds += [F.schema_of_variant(x).alias(f"_k{i}") for i, x in enumerate(xs)]
    step = step.select(*keep, *xs, *kinds)
    raws = []
    for i, f in enumerate(fields):
        x, k = F.col(f"_x{i}"), F.col(f"_k{i}")
        raws += [raw_value(x, k, t).alias(f"_r{i}_{t}") for t in raw_types(f.dataType)]
    ks = [F.col(f"_{c}{i}") for c in "mk" for i in range(len(fields))]
    step = step.select(*keep, *xs, *ks, *raws)
    values = []
    for i, f in enumerate(fields):

        def raw(t: str, i: int = i) -> Column:
            return F.col(f"_r{i}_{t}")

        value = typed_value(f.dataType, F.col(f"_x{i}"), F.col(f"_k{i}"), raw)
        if f.name == spec.event_time:
            value = _event_time(F.col(f"_k{i}"), raw, value, spec.event_time_unit)
        values.append(F.when(~F.col(f"_m{i}"), value).alias(f"_kappa_f{i}"))
    missing = [F.col(f"_m{i}").alias(f"_m{i}") for i in range(len(fields))]
    step = step.select(*keep, *missing, *values)
    ok = F.col("_ok")
    for i, f in enumerate(fields):
        present = F.col(f"_kappa_f{i}").isNotNull()
        ok = ok & (present if f.name in required else F.col(f"_m{i}") | present)
    out = [F.col(f"_kappa_f{i}") for i in range(len(fields))]
    return step.select(*keep[:-1], F.coalesce(ok, F.lit(False)).alias(VOUCHED), *out)


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
