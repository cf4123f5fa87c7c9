"""Event times stored as epoch seconds/milliseconds/microseconds or as formatted strings.

A lake written by another pipeline keeps its event time as ``ts_ms bigint`` or as
``'2013-01-01 05:00:00'``. The slicing machinery works in microseconds; these helpers turn
a column, or a statistic's min/max, into microseconds, so slices, partition rules,
statistics-based pruning and the end-of-input flush stay exact: bounds are converted, the
rows keep their stored values until the reader delivers them as timestamps.

``storage`` is one hashable text (it keys cached file statistics): ``""`` (a timestamp
column), ``"unit:s"``, ``"unit:ms"``, ``"unit:us"`` or ``"format:<pattern>"`` with a Spark
datetime pattern made of ``yyyy MM dd HH mm ss`` and literal characters (``'T'`` quoted).
"""

from __future__ import annotations

import re
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kappaplus.core.errors import ConfigError, DataError
from kappaplus.core.timeutil import to_micros

UNIT_MICROS = {"s": 1_000_000, "ms": 1_000, "us": 1}
_FIELDS = {"yyyy": "%Y", "MM": "%m", "dd": "%d", "HH": "%H", "mm": "%M", "ss": "%S"}
_ORDER = ["yyyy", "MM", "dd", "HH", "mm", "ss"]
_TOKEN = re.compile(r"yyyy|MM|dd|HH|mm|ss|'[^']*'|[ \-:/._T]")
TS_UTC = pa.timestamp("us", tz="UTC")


def storage_of(unit: str | None, pattern: str | None) -> str:
    """The ``storage`` text of a binding's ``event_time = { unit | format }``."""
    if unit is not None:
        return f"unit:{unit}"
    if pattern is not None:
        strptime_format(pattern)  # validated here, once
        return f"format:{pattern}"
    return ""


def strptime_format(pattern: str) -> str:
    """A Spark datetime pattern as a ``strptime`` format; :class:`ConfigError` for one
    this reader cannot follow exactly."""
    out, pos = [], 0
    while pos < len(pattern):
        match = _TOKEN.match(pattern, pos)
        if match is None:
            raise ConfigError(
                "event_time.format",
                pattern,
                f"unsupported at {pattern[pos:]!r}: use yyyy MM dd HH mm ss and separators",
            )
        token = match.group()
        out.append(_FIELDS.get(token, token.strip("'")))
        pos = match.end()
    return "".join(out)


def sortable(pattern: str) -> bool:
    """Whether the strings sort as the times do (fields from the year down, fixed width):
    only then do a file's min/max string statistics bound its times."""
    fields = [t for t in _TOKEN.findall(pattern) if t in _FIELDS]
    return bool(fields) and fields == _ORDER[: len(fields)]


def column_micros(column: pa.Array | pa.ChunkedArray, storage: str) -> pa.Array:
    """The stored event times as int64 microseconds (nulls stay null; an unparsable
    string is null, so it is routed like a null event time)."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    if not storage:
        return pc.cast(pc.cast(column, TS_UTC, safe=False), pa.int64())
    kind, _, arg = storage.partition(":")
    if kind == "unit":
        if not (pa.types.is_integer(column.type) or pa.types.is_floating(column.type)):
            raise DataError(
                f"event-time values have type {column.type}; unit {arg!r} needs numbers"
            )
        if pa.types.is_floating(column.type):
            scaled = pc.round(pc.multiply(column, float(UNIT_MICROS[arg])))
            return pc.cast(scaled, pa.int64(), safe=False)
        return pc.multiply(pc.cast(column, pa.int64()), UNIT_MICROS[arg])
    if not pa.types.is_string(column.type) and not pa.types.is_large_string(column.type):
        raise DataError(f"event-time values have type {column.type}; format {arg!r} needs strings")
    parsed = pc.strptime(column, format=strptime_format(arg), unit="us", error_is_null=True)
    return pc.cast(pc.cast(parsed, TS_UTC), pa.int64())


def micros_array(column: pa.Array | pa.ChunkedArray, storage: str) -> np.ndarray:
    """:func:`column_micros` as a numpy array, nulls removed (for planning)."""
    values = column_micros(column, storage).drop_null()
    return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)


def stat_micros(value: object, storage: str) -> int | None:
    """A row group's min or max event-time statistic in microseconds, or None when it does
    not bound the times (a format that does not sort as the times)."""
    kind, _, arg = storage.partition(":")
    if kind == "unit" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(round(value * UNIT_MICROS[arg]))
    if kind == "format" and isinstance(value, str | bytes) and sortable(arg):
        text = value.decode() if isinstance(value, bytes) else value
        try:
            moment = datetime.strptime(text, strptime_format(arg))
        except ValueError:
            return None
        return to_micros(moment)
    return None


def stored_type_ok(kind: object, storage: str) -> bool:
    """Whether a Spark column type can hold event times stored as ``storage``."""
    from pyspark.sql import types as T

    if storage.startswith("unit:"):
        return isinstance(kind, T.ByteType | T.ShortType | T.IntegerType | T.LongType)
    if storage.startswith("format:"):
        return isinstance(kind, T.StringType | T.VarcharType | T.CharType)
    return isinstance(kind, T.TimestampType | T.TimestampNTZType)
