"""One typed options layer: how every option object of kappaplus names, types, defaults and
reads its options.

An option object is a frozen dataclass decorated with :func:`options_class`; each option is
a field declared once with :func:`option`:

- its **key**, Spark's camelCase name (what ``.option(...)`` takes). The field name is
  accepted too, and both are case-insensitive, as Spark treats option names;
- its **kind**: how the text becomes the typed value (and is written back, for
  :func:`to_options`), with the error when it cannot (:data:`TEXT`, :func:`integer`,
  :data:`POSITIVE_INT`, :data:`POSITIVE_NUMBER`, :data:`BOOL`, :func:`duration`,
  :data:`DURATION_TEXT`, :data:`TIMESTAMP`, :data:`TIMESTAMP_TEXT`, :func:`choice`,
  :func:`json_value`, :func:`names`, :func:`matching`, :data:`PATH`, or a :class:`Kind` of
  one's own);
- its **default**, declared there only: it is the dataclass default and the value when the
  option is not given. Without a default the option is required.

:func:`read_options` reads Spark's ``Mapping[str, str]`` (a blank value counts as not
given) into typed values, which the class's parser checks against each other before it
builds the object; :func:`check_fields` applies the same kinds to the arguments of an
object built in Python (its ``__post_init__`` calls it); :func:`to_options` writes an
object back as the options that read as the same object.

Keys no option claims are ignored, as Spark's own sources do (Spark, the JVM reader and
the planner process pass keys a Python source does not read, ``kafka.*`` client settings
are read by prefix, and the hybrid source routes one map to two sources); they are left
in :attr:`Read.rest`. Every error is a :class:`~kappaplus.errors.ConfigError` naming the
option as the user spelled it and the bad value.

>>> @options_class
... class Example:
...     max_rows_per_trigger: int | None = option("maxRowsPerTrigger", POSITIVE_INT, default=None)
...     max_lateness: int = option("maxLateness", duration(), default=0)
>>> from_options(Example, {"maxrowspertrigger": "10", "max_lateness": "1 min"})
Example(max_rows_per_trigger=10, max_lateness=60000000)
>>> to_options(Example(max_rows_per_trigger=10))
{'maxRowsPerTrigger': '10', 'maxLateness': '0 seconds'}
>>> from_options(Example, {"maxRowsPerTrigger": "ten"})  # doctest: +IGNORE_EXCEPTION_DETAIL
Traceback (most recent call last):
kappaplus.errors.ConfigError: option 'maxRowsPerTrigger' = 'ten': expected a whole number
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from enum import Enum
from pathlib import Path
from typing import Any, Generic, TypeVar

from typing_extensions import dataclass_transform

from kappaplus.errors import ConfigError
from kappaplus.timeutil import MICROS_PER_SECOND, Duration, parse_duration, parse_timestamp

T = TypeVar("T")
C = TypeVar("C")

_SPEC = "kappaplus.option"
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
"""A duration kept as written (a :class:`~kappaplus.timeutil.Duration`: the text Spark
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


# -- declaring options -----------------------------------------------------------------------


@dataclass(frozen=True)
class Option:
    """One option: ``key`` (Spark's name), ``name`` (the field's), its kind and default.

    Declared with :func:`option` on a field; an option that is no field of its own (read
    to compute one) is an ``Option`` passed to :func:`read_options`.
    """

    key: str
    kind: Kind[Any] = TEXT
    name: str = ""
    required: bool = False
    default: Any = None
    default_factory: Callable[[], Any] | None = None

    def __post_init__(self) -> None:
        if not self.name:
            object.__setattr__(self, "name", _snake(self.key))

    def default_value(self) -> Any:
        return self.default_factory() if self.default_factory is not None else self.default


def _snake(key: str) -> str:
    out = "".join("_" + c.lower() if c.isupper() else c for c in key.replace(".", "_"))
    return out.lstrip("_")


def option(
    key: str,
    kind: Kind[Any] = TEXT,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    required: bool | None = None,
    init: bool = True,
    repr: bool = True,
    compare: bool = True,
) -> Any:
    """A dataclass field that is option ``key`` of ``kind`` (see the module docstring).

    ``required=False`` without a default: the parser computes the value when the option is
    not given (e.g. a name that defaults to another option's value).
    """
    no_default = default is dataclasses.MISSING and default_factory is dataclasses.MISSING
    spec = Option(
        key,
        kind,
        name="-",  # the field's name, filled in by options_of
        required=no_default if required is None else required,
        default=None if default is dataclasses.MISSING else default,
        default_factory=None if default_factory is dataclasses.MISSING else default_factory,
    )
    return dataclasses.field(  # type: ignore[call-overload]
        default=default,
        default_factory=default_factory,
        init=init,
        repr=repr,
        compare=compare,
        metadata={_SPEC: spec},
    )


@dataclass_transform(field_specifiers=(option, dataclasses.field), frozen_default=True)
def options_class(cls: type[C] | None = None, /, *, kw_only: bool = False) -> Any:
    """``@dataclass(frozen=True)`` for an option object, whose keys are checked once here:
    two options of one class cannot share a key or a field name, case-insensitively."""

    def wrap(klass: type[C]) -> type[C]:
        built = dataclass(frozen=True, kw_only=kw_only)(klass)
        _index(options_of(built))
        return built

    return wrap if cls is None else wrap(cls)


_DECLARED: dict[type, tuple[Option, ...]] = {}


def options_of(cls: type) -> tuple[Option, ...]:
    """The options declared on the fields of the dataclass ``cls``, in field order."""
    found = _DECLARED.get(cls)
    if found is None:
        found = tuple(
            dataclasses.replace(f.metadata[_SPEC], name=f.name)
            for f in dataclasses.fields(cls)
            if _SPEC in f.metadata
        )
        _DECLARED[cls] = found
    return found


def _index(options: Iterable[Option]) -> dict[str, Option]:
    index: dict[str, Option] = {}
    for spec in options:
        for spelling in {spec.key.lower(), spec.name.lower()}:
            if spelling in index:
                raise TypeError(f"options {index[spelling].key!r} and {spec.key!r} clash")
            index[spelling] = spec
    return index


def option_keys(cls: type, *extra: Option) -> frozenset[str]:
    """Every spelling (key and field name) of ``cls``'s options, lower-cased."""
    return frozenset(_index((*options_of(cls), *extra)))


# -- reading ---------------------------------------------------------------------------------


class Read:
    """What :func:`read_options` found: typed values by field name, and how each was given."""

    def __init__(self, options: dict[str, Option]) -> None:
        self._options = options
        self.values: dict[str, Any] = {}
        """Typed values by field name: of every option given, and the default of every
        option not given that has one."""
        self.rest: dict[str, Any] = {}
        """The keys no option claims, lower-cased, with their values."""
        self._given: dict[str, tuple[str, Any]] = {}

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def given(self, name: str) -> bool:
        """Whether option ``name`` (a field name) was given (not blank)."""
        return name in self._given

    def text(self, name: str) -> Any:
        """The value of option ``name`` as given, or ``None``."""
        given = self._given.get(name)
        return None if given is None else given[1]

    def spelled(self, name: str) -> str:
        """Option ``name`` as the user spelled it: its field name if given so, else its key."""
        given = self._given.get(name)
        return given[0] if given is not None else self._options[name].key

    def error(self, name: str, problem: str, value: Any = dataclasses.MISSING) -> ConfigError:
        """A :class:`ConfigError` for option ``name``: its value as given unless ``value``."""
        shown = self.text(name) if value is dataclasses.MISSING else value
        return ConfigError(self.spelled(name), shown, problem)

    def init(self, cls: type) -> dict[str, Any]:
        """The values that are init fields of the dataclass ``cls``."""
        fields = {f.name for f in dataclasses.fields(cls) if f.init}
        return {k: v for k, v in self.values.items() if k in fields}


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def read_options(cls: type, options: Mapping[str, Any], *extra: Option) -> Read:
    """Read ``options`` (Spark's strings, or Python values) for the options of ``cls`` and
    ``extra``: each given one parsed by its kind, in declaration order, a required one
    missing refused; see :class:`Read`."""
    declared = (*options_of(cls), *extra)
    by_name = {o.name: o for o in declared}
    index = _index(declared)
    read = Read(by_name)
    found: dict[str, tuple[str, Any]] = {}
    for key, value in options.items():
        lowered = str(key).lower()
        spec = index.get(lowered)
        if spec is None:
            read.rest[lowered] = value
            continue
        if _blank(value):
            continue
        spelled = spec.name if lowered == spec.name.lower() else spec.key
        if spec.name in found and found[spec.name][1] != value:
            first, other = found[spec.name]
            raise ConfigError(spelled, value, f"given twice: also as {first!r} = {other!r}")
        found[spec.name] = (spelled, value)
    read._given = found
    for spec in declared:
        if spec.name in found:
            spelled, value = found[spec.name]
            read.values[spec.name] = spec.kind.read(value, spelled)
        elif spec.required:
            raise ConfigError(spec.key, None, "is required")
        else:
            read.values[spec.name] = spec.default_value()
    return read


def from_options(cls: type[C], options: Mapping[str, Any], **fields: Any) -> C:
    """``cls`` built from ``options`` (see :func:`read_options`) and further ``fields``."""
    return cls(**{**read_options(cls, options).init(cls), **fields})


def to_options(obj: Any) -> dict[str, str]:
    """The declared options of ``obj`` as Spark's strings, by key (``None`` values left out):
    :func:`from_options` reads them back as the same values."""
    out: dict[str, str] = {}
    for spec in options_of(type(obj)):
        value = getattr(obj, spec.name)
        if value is not None:
            out[spec.key] = spec.kind.render(value)
    return out


def check_fields(obj: Any) -> None:
    """Check (and convert) the declared option fields of a frozen dataclass built in
    Python, by their kinds; errors name the field. ``None`` passes where it is the default."""
    for spec in options_of(type(obj)):
        value = getattr(obj, spec.name)
        if value is None:
            if spec.required or spec.default_value() is not None:
                raise ConfigError(spec.name, None, "is required")
            continue
        object.__setattr__(obj, spec.name, spec.kind.read(value, spec.name))
