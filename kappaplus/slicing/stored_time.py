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
from kappaplus.slicing.files import to_micros_array

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


def stat_micros(value: object, storage: str, *, upper: bool = False) -> int | None:
    """A row group's (or a data file's) min or max event-time statistic in microseconds, or
    None when it does not bound the times (a format that does not sort as the times, a
    value that is not a time).

    A string statistic cut short (Iceberg keeps the first 16 characters of a lower bound,
    and of an upper bound with its last character incremented) is completed with the
    smallest value of each missing field (the epoch's): a prefix of the minimum so
    completed is at most the minimum, an incremented prefix so completed is above every
    string it bounds, so both still bound the times. An incremented character that is no
    longer a digit (``'9'`` + 1 = ``':'``; ``upper``: the statistic is a maximum) leaves the
    prefix before it, completed and moved on by the unit above its last field: above every
    time starting with that prefix (a bound for planning, wider than the file's times)."""
    kind, _, arg = storage.partition(":")
    if kind == "unit" and isinstance(value, int | float) and not isinstance(value, bool):
        return int(round(value * UNIT_MICROS[arg]))
    if kind == "format" and isinstance(value, str | bytes) and sortable(arg):
        text = value.decode() if isinstance(value, bytes) else value
        fmt = strptime_format(arg)
        smallest = _smallest(arg)
        if len(text) < len(smallest):
            text += smallest[len(text) :]
        try:
            moment = datetime.strptime(text, fmt)
        except ValueError:
            cut = value.decode() if isinstance(value, bytes) else value
            return _past_prefix(cut[:-1], arg) if upper and len(cut) < len(smallest) else None
        return to_micros(moment)
    return None


_ABOVE = {
    "MM": 366 * 86_400_000_000,
    "dd": 31 * 86_400_000_000,
    "HH": 86_400_000_000,
    "mm": 3_600_000_000,
    "ss": 60_000_000,
}
"""Per field, a span that covers every completion of a prefix ending in it."""


def _past_prefix(prefix: str, pattern: str) -> int | None:
    """A time above every time whose text starts with ``prefix`` (None when the prefix
    ends inside the year, or is not the start of a time)."""
    smallest = _smallest(pattern)
    try:
        start = to_micros(
            datetime.strptime(prefix + smallest[len(prefix) :], strptime_format(pattern))
        )
    except ValueError:
        return None
    position, last = 0, None
    for token in _TOKEN.findall(pattern):
        if position >= len(prefix):
            break
        last = token if token in _FIELDS else last
        position += len(token.strip("'")) if token.startswith("'") else len(token)
    span = _ABOVE.get(last or "")
    return None if span is None else start + span


def stored_micros_array(column: pa.Array | pa.ChunkedArray, storage: str = "") -> np.ndarray:
    """Event times as int64 microseconds (UTC), nulls removed, whatever their storage: a
    timestamp column, epoch numbers or formatted strings (what a lister samples)."""
    return micros_array(column, storage) if storage else to_micros_array(column)


def stored_bounds(lo: int, hi: int, storage: str) -> tuple[object, object] | None:
    """The slice ``[lo, hi)`` (microseconds) as bounds on the *stored* values, for a
    reader's pushed-down filter ``low <= stored < high`` that keeps exactly the rows whose
    time is in the slice (the bounds are converted, not the rows): epoch numbers rounded up
    to the unit (``v * unit >= lo`` iff ``v >= ceil(lo / unit)``), strings of a sortable
    format at the next whole second formatted. None when the storage cannot be filtered
    so (a timestamp column: filter it as it is; a format that does not sort as the times)."""
    kind, _, arg = storage.partition(":")
    lo, hi = int(lo), int(hi)
    if kind == "unit":
        step = UNIT_MICROS[arg]
        return -(-lo // step), -(-hi // step)
    if kind == "format" and sortable(arg) and _whole_seconds(arg):
        fmt = strptime_format(arg)
        return _format_at(-(-lo // 1_000_000), fmt), _format_at(-(-hi // 1_000_000), fmt)
    return None


def _smallest(pattern: str) -> str:
    """The pattern's smallest string (``0000-01-01 00:00:00``): what completes a prefix."""
    least = {"yyyy": "0000", "MM": "01", "dd": "01", "HH": "00", "mm": "00", "ss": "00"}
    return "".join(least.get(t, t.strip("'")) for t in _TOKEN.findall(pattern))


def _whole_seconds(pattern: str) -> bool:
    """Whether the pattern goes down to the second (then a string bound is exact)."""
    return "ss" in _TOKEN.findall(pattern)


def _format_at(seconds: int, fmt: str) -> str:
    from datetime import UTC, timedelta

    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(seconds=seconds)
    return moment.strftime(fmt)
