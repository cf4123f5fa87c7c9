"""Event-time arithmetic in integer microseconds since the epoch (UTC).

Offsets, slices and partition ranges are all plain ``int`` microseconds so that they
serialise exactly into Spark's offset log and compare without time-zone surprises.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime, timedelta

from kappaplus.core.errors import ConfigError

MICROS_PER_SECOND = 1_000_000
_UNIT_MICROS = {
    "us": 1,
    "microsecond": 1,
    "ms": 1_000,
    "millisecond": 1_000,
    "s": MICROS_PER_SECOND,
    "sec": MICROS_PER_SECOND,
    "second": MICROS_PER_SECOND,
    "m": 60 * MICROS_PER_SECOND,
    "min": 60 * MICROS_PER_SECOND,
    "minute": 60 * MICROS_PER_SECOND,
    "h": 3600 * MICROS_PER_SECOND,
    "hr": 3600 * MICROS_PER_SECOND,
    "hour": 3600 * MICROS_PER_SECOND,
    "d": 86400 * MICROS_PER_SECOND,
    "day": 86400 * MICROS_PER_SECOND,
    "w": 7 * 86400 * MICROS_PER_SECOND,
    "week": 7 * 86400 * MICROS_PER_SECOND,
}
_TERM = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*")


def parse_duration(value: str | int | float | timedelta, option: str = "duration") -> int:
    """Parse a duration such as ``"2 hours"``, ``"90 min"``, ``"1 day 6h"`` into microseconds.

    Plain numbers are seconds. ``option`` names the option in the error message.

    >>> parse_duration("2 hours")
    7200000000
    """
    if isinstance(value, timedelta):
        return int(value.total_seconds() * MICROS_PER_SECOND)
    if isinstance(value, int | float) and not isinstance(value, bool):
        if value < 0:
            raise ConfigError(option, value, "a duration cannot be negative")
        return _finite(value * MICROS_PER_SECOND, value, option)
    text = str(value).strip().lower()
    if not text:
        raise ConfigError(option, value, "expected a duration like '2 hours'")
    try:
        seconds = float(text)
    except ValueError:
        pass
    else:
        return _finite(seconds * MICROS_PER_SECOND, value, option)
    pos, total = 0, 0
    text = text.replace("interval", " ").replace(",", " ")
    while pos < len(text):
        match = _TERM.match(text, pos)
        if not match or match.end() == pos:
            raise ConfigError(option, value, "expected a duration like '2 hours' or '30 min'")
        unit = match.group(2)
        if unit not in _UNIT_MICROS and unit.endswith("s") and unit[:-1] in _UNIT_MICROS:
            unit = unit[:-1]  # a plural ("hours"), never "ms" read as "m" (minutes)
        if unit not in _UNIT_MICROS:
            raise ConfigError(option, value, f"unknown time unit {match.group(2)!r}")
        total += _finite(float(match.group(1)) * _UNIT_MICROS[unit], value, option)
        pos = match.end()
    return total


def _finite(micros: float, value: object, option: str) -> int:
    if isinstance(micros, float) and not math.isfinite(micros):
        raise ConfigError(option, value, "expected a finite duration like '2 hours'")
    return int(micros)


class Duration(str):
    """A duration as written (``"2 hours"``: the text Spark's options and ``withWatermark``
    take), parsed once, at construction: :attr:`micros` and :attr:`delta` are what Python
    code uses, so no one parses the text again.

    >>> d = Duration.parse("90 min", "watermark_delay")
    >>> d, d.micros, d.delta
    ('90 min', 5400000000, datetime.timedelta(seconds=5400))
    """

    micros: int

    def __new__(cls, text: str, micros: int) -> Duration:
        self = super().__new__(cls, text)
        self.micros = micros
        return self

    @classmethod
    def parse(cls, value: str | int | float | timedelta, option: str = "duration") -> Duration:
        """Parse ``value`` (text, seconds, or a timedelta); errors name ``option``."""
        if isinstance(value, Duration):
            return value
        micros = parse_duration(value, option)
        if isinstance(value, str):
            return cls(value, micros)
        if isinstance(value, timedelta):
            return cls(format_duration(micros), micros)
        return cls(f"{value} seconds", micros)

    @property
    def delta(self) -> timedelta:
        return timedelta(microseconds=self.micros)

    def __reduce__(self) -> tuple[type[Duration], tuple[str, int]]:
        return (Duration, (str(self), self.micros))


def format_duration(micros: int) -> str:
    """Render microseconds as a Spark interval string, e.g. ``"7200 seconds"``."""
    if micros % MICROS_PER_SECOND == 0:
        return f"{micros // MICROS_PER_SECOND} seconds"
    return f"{micros // 1000} milliseconds"


def parse_timestamp(value: str | int | datetime | date, option: str = "timestamp") -> int:
    """Parse an ISO-8601 timestamp (naive means UTC) or epoch microseconds into microseconds.

    >>> parse_timestamp("2024-01-01T00:00:00Z")
    1704067200000000
    """
    if isinstance(value, bool):
        raise ConfigError(option, value, "expected an ISO-8601 timestamp")
    if isinstance(value, int):
        return value
    if isinstance(value, datetime):
        return to_micros(value)
    if isinstance(value, date):
        return to_micros(datetime(value.year, value.month, value.day, tzinfo=UTC))
    text = str(value).strip()
    if text.lstrip("-").isdecimal():
        return int(text)
    try:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00").replace(" UTC", "+00:00"))
    except ValueError as exc:
        raise ConfigError(
            option, value, "expected an ISO-8601 timestamp like '2024-01-01T00:00:00Z'"
        ) from exc
    return to_micros(parsed)


def to_micros(moment: datetime) -> int:
    """Microseconds since the epoch; a naive datetime is taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - datetime(1970, 1, 1, tzinfo=UTC)
    return (delta.days * 86400 + delta.seconds) * MICROS_PER_SECOND + delta.microseconds


def from_micros(micros: int) -> datetime:
    """The UTC datetime for microseconds since the epoch."""
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=micros)


def iso(micros: int) -> str:
    """Compact ISO-8601 rendering of microseconds, for logs and progress."""
    moment = from_micros(micros)
    if moment.microsecond:
        return moment.isoformat().replace("+00:00", "Z")
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
