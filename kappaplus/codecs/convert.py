"""Per-field value converters that run in the Python workers: JSON values checked against
the event schema with a reason per field, Avro values normalized for Arrow."""

from __future__ import annotations

import base64
import binascii
import json
import math
import uuid
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any

from kappaplus.codecs.schema import _MAX_SHOWN
from kappaplus.core.errors import ConfigError

if TYPE_CHECKING:
    from pyspark.sql.types import DataType, StructType


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


EVENT_TIME_UNITS = {"s": 1_000_000, "ms": 1_000, "us": 1}
"""Microseconds per unit of a numeric event time (``event_time_unit``)."""


def event_time_converter(name: str, unit: str | None) -> Converter:
    """The converter of the event-time field ``name``: an ISO string, or a number in the
    declared ``unit`` (``s``, ``ms``, ``us``). Without a declared unit a number is refused
    with a reason saying so: epoch seconds read as milliseconds land in January 1970 and
    pass every plausible bound, so a unit is never guessed."""
    factor = EVENT_TIME_UNITS[unit] if unit is not None else None

    def conv_event_time(v: Any, p: str) -> Any:
        if v is None:
            return None
        if isinstance(v, int | float | Decimal) and not isinstance(v, bool):
            if factor is None:
                raise _FieldError(
                    f"event time {name!r} is a number ({_shown(v)}) and no unit is declared "
                    'for it: declare it in the Kafka binding (event_time = { unit = "s" }, '
                    '"ms" or "us")'
                )
            if not math.isfinite(float(v)):
                raise _mismatch(p, "timestamp", v)
            micros = int(v) * factor if isinstance(v, int) else int(round(Decimal(v) * factor))
            if abs(micros) > MAX_MICROS:
                raise _mismatch(p, "timestamp", v, f"out of range as epoch {unit}")
            return micros
        return _json_timestamp_micros(v, p)

    return conv_event_time


MAX_MICROS = 253_402_300_799_999_999  # 9999-12-31T23:59:59.999999Z
"""The largest event time, in epoch microseconds, either way of 1970 (year 9999's end)."""


def _json_converter(kind: DataType) -> Converter:
    """A function validating one JSON value against ``kind`` and returning an Arrow-ready value.

    ``None`` passes through (nullability is checked by the caller).
    """
    from pyspark.sql import types as T

    simple: list[tuple[type | tuple[type, ...], Converter]] = [
        (T.StringType, _conv_string),
        (T.BooleanType, _conv_bool),
        ((T.TimestampType, T.TimestampNTZType), _conv_timestamp),
        (T.DateType, _conv_date),
        (T.BinaryType, _conv_binary),
    ]
    for types, converter in simple:
        if isinstance(kind, types):
            return converter
    built: list[tuple[type | tuple[type, ...], Callable[[Any], Converter]]] = [
        ((T.ByteType, T.ShortType, T.IntegerType, T.LongType), _int_converter),
        ((T.FloatType, T.DoubleType), _float_converter),
        (T.DecimalType, _decimal_converter),
        (T.ArrayType, _array_converter),
        (T.MapType, _map_converter),
    ]
    for types, build in built:
        if isinstance(kind, types):
            return build(kind)
    if isinstance(kind, T.StructType):
        return _struct_converter(kind, prefix=True)
    raise ConfigError("schema", kind.simpleString(), "unsupported type for JSON decoding")


def _conv_string(v: Any, p: str) -> Any:
    if v is None or isinstance(v, str):
        return v
    raise _mismatch(p, "string", v)


def _conv_bool(v: Any, p: str) -> Any:
    if v is None or isinstance(v, bool):
        return v
    raise _mismatch(p, "boolean", v)


def _conv_timestamp(v: Any, p: str) -> Any:
    return None if v is None else _json_timestamp_micros(v, p)


def _conv_date(v: Any, p: str) -> Any:
    if v is None:
        return None
    if not isinstance(v, str):
        raise _mismatch(p, "date", v)
    try:
        return date.fromisoformat(v.strip())
    except ValueError:
        raise _mismatch(p, "date", v) from None


def _conv_binary(v: Any, p: str) -> Any:
    if v is None:
        return None
    if not isinstance(v, str):
        raise _mismatch(p, "binary (base64 string)", v)
    try:
        return base64.b64decode(v, validate=True)
    except (binascii.Error, ValueError):
        raise _mismatch(p, "binary (base64 string)", v) from None


def _int_converter(kind: Any) -> Converter:
    """Whole JSON numbers within the range of ``kind`` (tinyint .. bigint); not booleans."""
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


def _float_converter(kind: Any) -> Converter:
    """Any JSON number, as a Python float; not booleans."""
    from pyspark.sql import types as T

    label = "float" if isinstance(kind, T.FloatType) else "double"

    def conv_float(v: Any, p: str) -> Any:
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, int | float | Decimal):
            raise _mismatch(p, label, v)
        return float(v)

    return conv_float


def _decimal_converter(kind: Any) -> Converter:
    """A JSON number or numeric string that fits ``kind``'s precision and scale exactly."""
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


def _array_converter(kind: Any) -> Converter:
    """A JSON array, each element converted (a null element only where ``kind`` allows)."""
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


def _map_converter(kind: Any) -> Converter:
    """A JSON object as ``(key, value)`` pairs; keys of a non-string key type are parsed
    as JSON first (``"1"`` -> 1)."""
    from pyspark.sql import types as T

    key_conv = None if isinstance(kind.keyType, T.StringType) else _json_converter(kind.keyType)
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
