"""Kinds of option values: how an option's text becomes its typed value, is written back,
and what error names the option when it cannot (see :mod:`kappaplus.core.options`)."""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Generic, TypeVar

from kappaplus.core.errors import ConfigError
from kappaplus.core.timeutil import MICROS_PER_SECOND, Duration, parse_duration, parse_timestamp

T = TypeVar("T")

_SHOWN = 80
"""Characters of a long value (a JSON document) an error shows."""


@dataclass(frozen=True)
class Kind(Generic[T]):
    """How one option's value is read and written back.

    - ``parse(text, option)``: Spark's text (stripped, never blank) -> the typed value;
    - ``accept(value, option)``: a Python value that is not text (a constructor argument,
      a JSON value) -> the typed value; without it only text is accepted;
    - ``render(value)``: the typed value -> text that ``parse`` reads as the same value.

    ``parse`` and ``accept`` raise :class:`ConfigError` ``(option, value, problem)``.
    """

    expected: str
    parse: Callable[[str, str], T]
    render: Callable[[T], str] = str
    accept: Callable[[Any, str], T] | None = None

    def read(self, value: Any, option: str) -> T:
        """The typed value of ``value`` (text or a Python value) for ``option``."""
        if isinstance(value, str):
            return self.parse(str(value).strip(), option)  # str(): a Duration as its text
        if self.accept is not None:
            return self.accept(value, option)
        raise ConfigError(option, value, f"expected {self.expected}")


# -- kinds -----------------------------------------------------------------------------------


def _text(text: str, option: str) -> str:
    return text


TEXT: Kind[str] = Kind("text", _text)
"""Any text (stripped)."""


def _nonempty(text: str, option: str) -> str:
    if not text:
        raise ConfigError(option, text, "must not be empty")
    return text


NAME: Kind[str] = Kind("a non-empty name", _nonempty)
"""Text that must not be empty (a column name): what a Python caller passes is checked."""


def matching(regex: re.Pattern[str], expected: str) -> Kind[str]:
    """Text that ``regex`` matches; else "expected <expected>"."""

    def parse(text: str, option: str) -> str:
        if not regex.match(text):
            raise ConfigError(option, text, f"expected {expected}")
        return text

    return Kind(expected, parse)


def integer(
    minimum: int | None = None, maximum: int | None = None, *, what: str = "a whole number"
) -> Kind[int]:
    """A whole number in ``[minimum, maximum]`` (``what`` names it in errors)."""

    def check(number: int, shown: Any, option: str) -> int:
        if minimum is not None and number < minimum:
            raise ConfigError(
                option, shown, "must be positive" if minimum == 1 else f"must be >= {minimum}"
            )
        if maximum is not None and number > maximum:
            raise ConfigError(option, shown, f"must be <= {maximum}")
        return number

    def parse(text: str, option: str) -> int:
        try:
            number = int(text)
        except ValueError:
            raise ConfigError(option, text, f"expected {what}") from None
        return check(number, text, option)

    def accept(value: Any, option: str) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(option, value, f"expected {what}")
        return check(value, value, option)

    return Kind(what, parse, str, accept)


POSITIVE_INT = integer(minimum=1)


def positive_number(what: str = "a positive number") -> Kind[float]:
    """A finite number > 0 (``what`` names it in errors, e.g. "a positive number of seconds")."""

    def accept(value: Any, option: str) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ConfigError(option, value, f"expected {what}")
        number = float(value)
        if not number > 0 or math.isinf(number):
            raise ConfigError(option, value, f"expected {what}")
        return number

    def parse(text: str, option: str) -> float:
        try:
            number = float(text)
        except ValueError:
            raise ConfigError(option, text, f"expected {what}") from None
        if not number > 0 or math.isinf(number):
            raise ConfigError(option, text, f"expected {what}")
        return number

    return Kind(what, parse, repr, accept)


POSITIVE_NUMBER = positive_number()

_TRUE, _FALSE = ("true", "1", "yes"), ("false", "0", "no")


def _bool(text: str, option: str) -> bool:
    lowered = text.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise ConfigError(option, text, "expected true or false")


def _accept_bool(value: Any, option: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(option, value, "expected true or false")
    return value


BOOL: Kind[bool] = Kind("true or false", _bool, lambda v: "true" if v else "false", _accept_bool)
"""``true``/``false`` (also ``1``/``0``, ``yes``/``no``), any case."""

_UNITS = (
    (86_400 * MICROS_PER_SECOND, "days"),
    (3_600 * MICROS_PER_SECOND, "hours"),
    (60 * MICROS_PER_SECOND, "minutes"),
    (MICROS_PER_SECOND, "seconds"),
    (1_000, "milliseconds"),
)


def duration_text(micros: int) -> str:
    """Microseconds as the shortest exact duration text :func:`parse_duration` reads back.

    >>> duration_text(7_200_000_000), duration_text(60_000_000), duration_text(1_500)
    ('2 hours', '1 minute', '1500 microseconds')
    """
    if micros == 0:
        return "0 seconds"
    for size, unit in (*_UNITS, (1, "microseconds")):
        if micros % size == 0:
            count = micros // size
            return f"{count} {unit.removesuffix('s') if count == 1 else unit}"
    raise AssertionError("unreachable")


def _signed(micros: int, shown: Any, option: str, positive: bool) -> int:
    if micros < 0:
        raise ConfigError(option, shown, "must not be negative")
    if positive and micros == 0:
        raise ConfigError(option, shown, "must be positive")
    return micros


def duration(*, positive: bool = False) -> Kind[int]:
    """A duration (``"2 hours"``, ``"90 min"``, a plain number of seconds) as integer
    microseconds, never negative (``positive``: never zero either)."""

    def parse(text: str, option: str) -> int:
        return _signed(parse_duration(text, option), text, option, positive)

    def accept(value: Any, option: str) -> int:
        if not isinstance(value, timedelta):
            raise ConfigError(option, value, "expected a duration like '2 hours'")
        return _signed(parse_duration(value, option), value, option, positive)

    return Kind("a duration like '2 hours'", parse, duration_text, accept)


MICROS = duration()
POSITIVE_MICROS = duration(positive=True)


def _duration_text(text: str, option: str) -> Duration:
    parsed = Duration.parse(text, option)
    _signed(parsed.micros, text, option, False)
    return parsed


def _accept_duration_text(value: Any, option: str) -> Duration:
    if isinstance(value, bool) or not isinstance(value, timedelta | int | float):
        raise ConfigError(option, value, "expected a duration like '2 hours'")
    parsed = Duration.parse(value, option)
    _signed(parsed.micros, value, option, False)
    return parsed


DURATION_TEXT: Kind[Duration] = Kind(
    "a duration like '2 hours'", _duration_text, str, _accept_duration_text
)
"""A duration kept as written (a :class:`~kappaplus.core.timeutil.Duration`: the text Spark
takes, with ``.micros`` and ``.delta`` parsed once), never negative."""


def _timestamp(text: str, option: str) -> int:
    return parse_timestamp(text, option)


def _accept_timestamp(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int | datetime | date):
        raise ConfigError(option, value, "expected an ISO-8601 timestamp")
    return parse_timestamp(value, option)


TIMESTAMP: Kind[int] = Kind("an ISO-8601 timestamp", _timestamp, str, _accept_timestamp)
"""A moment (ISO-8601, naive means UTC, or epoch microseconds) as epoch microseconds."""


def _timestamp_text(text: str, option: str) -> str:
    parse_timestamp(text, option)
    return text


def _accept_timestamp_text(value: Any, option: str) -> Any:
    _accept_timestamp(value, option)
    return value


TIMESTAMP_TEXT: Kind[str] = Kind(
    "an ISO-8601 timestamp", _timestamp_text, str, _accept_timestamp_text
)
"""A moment kept as written (a run's ``--start``), checked once."""


def _path(text: str, option: str) -> Path:
    return Path(text)


def _accept_path(value: Any, option: str) -> Path:
    if not isinstance(value, os.PathLike):
        raise ConfigError(option, value, "expected a path")
    return Path(value)


PATH: Kind[Path] = Kind("a path", _path, str, _accept_path)


def _listing(values: list[str]) -> str:
    quoted = [repr(v) for v in values]
    if len(quoted) == 2:
        return f"{quoted[0]} or {quoted[1]}"
    return "one of " + ", ".join(quoted)


def choice(values: type[Enum] | Iterable[str]) -> Kind[Any]:
    """One of ``values`` (a string enum's members, or strings), any case; the canonical
    spelling (or the member) is the value."""
    enum = values if isinstance(values, type) and issubclass(values, Enum) else None
    allowed: list[Any] = list(enum) if enum is not None else list(values)  # type: ignore[arg-type]
    spelled = [str(v.value) if isinstance(v, Enum) else str(v) for v in allowed]
    by_lower = {s.lower(): v for s, v in zip(spelled, allowed, strict=True)}
    expected = _listing(spelled)

    def parse(text: str, option: str) -> Any:
        found = by_lower.get(text.lower())
        if found is None:
            raise ConfigError(option, text, f"expected {expected}")
        return found

    def accept(value: Any, option: str) -> Any:
        if enum is not None and isinstance(value, enum):
            return value
        raise ConfigError(option, value, f"expected {expected}")

    def render(value: Any) -> str:
        return str(value.value) if isinstance(value, Enum) else str(value)

    return Kind(expected, parse, render, accept)


def names(*, unique: bool = False, nonempty: bool = False, what: str = "names") -> Kind[Any]:
    """A comma-separated list (``"a, b"``) as a tuple of its stripped, non-empty items;
    ``unique`` drops repeats, ``nonempty`` refuses a list of none."""

    def done(items: Iterable[str], shown: Any, option: str) -> tuple[str, ...]:
        found = tuple(dict.fromkeys(items)) if unique else tuple(items)
        if nonempty and not found:
            raise ConfigError(option, shown, f"expected a comma-separated list of {what}")
        return found

    def parse(text: str, option: str) -> tuple[str, ...]:
        return done((t.strip() for t in text.split(",") if t.strip()), text, option)

    def accept(value: Any, option: str) -> tuple[str, ...]:
        if not isinstance(value, list | tuple) or not all(isinstance(v, str) for v in value):
            raise ConfigError(option, value, f"expected a list of {what}")
        return done(value, value, option)

    def render(items: tuple[str, ...]) -> str:
        return ",".join(items) or ","  # a list of none, not "not given"

    return Kind(f"a comma-separated list of {what}", parse, render, accept)


def json_value(
    convert: Callable[[Any], T],
    render: Callable[[T], Any],
    what: str,
    accept: Callable[[Any], T] | None = None,
) -> Kind[T]:
    """A JSON document: ``convert`` makes the decoded JSON the value (raising
    ``ValueError``, ``KeyError`` or ``TypeError`` when it does not fit: the error says
    "not <what>"), ``render`` makes the value JSON again. ``accept`` takes a Python value
    (default: ``convert`` of it, as if decoded)."""

    def parse(text: str, option: str) -> T:
        try:
            return convert(json.loads(text))
        except ConfigError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(option, text[:_SHOWN], f"not {what}: {exc}") from exc

    def accepted(value: Any, option: str) -> T:
        try:
            return (accept or convert)(value)
        except ConfigError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ConfigError(option, value, f"not {what}: {exc}") from exc

    return Kind(what, parse, lambda v: json.dumps(render(v), sort_keys=True), accepted)
