"""Declaring options on frozen dataclasses and reading Spark's option maps into them (see
:mod:`kappaplus.core.options`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from typing_extensions import dataclass_transform

from kappaplus.core.errors import ConfigError
from kappaplus.core.options.kinds import TEXT, Kind

C = TypeVar("C")
_SPEC = "kappaplus.option"


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
