"""The typed options layer (:mod:`kappaplus.core.options`): keys and field names, case-insensitive;
defaults declared once; every parse failure names the option and the value; what is written
back reads as the same value."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from enum import StrEnum
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kappaplus.core.errors import ConfigError
from kappaplus.core.options import (
    BOOL,
    DURATION_TEXT,
    MICROS,
    NAME,
    PATH,
    POSITIVE_INT,
    POSITIVE_MICROS,
    POSITIVE_NUMBER,
    TEXT,
    TIMESTAMP,
    TIMESTAMP_TEXT,
    Kind,
    Option,
    check_fields,
    choice,
    duration_text,
    from_options,
    integer,
    json_value,
    names,
    option,
    option_keys,
    options_class,
    options_of,
    read_options,
    to_options,
)
from kappaplus.core.timeutil import parse_duration


class Colour(StrEnum):
    RED = "red"
    DEEP_BLUE = "deepBlue"


@options_class
class Sample:
    location: str = option("location")
    max_rows_per_trigger: int | None = option("maxRowsPerTrigger", POSITIVE_INT, default=None)
    fail_on_data_loss: bool = option("failOnDataLoss", BOOL, default=True)
    max_lateness: int = option("maxLateness", MICROS, default=0)
    colour: Colour = option("colour", choice(Colour), default=Colour.RED)
    columns: tuple[str, ...] | None = option("columns", names(), default=None)
    rate: float | None = option("maxRecordsPerSecond", POSITIVE_NUMBER, default=None)
    starting_timestamp: int | None = option("startingTimestamp", TIMESTAMP, default=None)
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def flip_case(draw: st.DrawFn, word: str) -> str:
    flags = draw(st.lists(st.booleans(), min_size=len(word), max_size=len(word)))
    return "".join(c.upper() if f else c.lower() for c, f in zip(word, flags, strict=True))


@st.composite
def spellings(draw: st.DrawFn, spec: Option) -> str:
    return flip_case(draw, draw(st.sampled_from([spec.key, spec.name])))


SAMPLE_OPTIONS = {o.name: o for o in options_of(Sample)}


@given(st.data())
def test_key_and_field_name_are_accepted_in_any_case(data: st.DataObject) -> None:
    key = data.draw(spellings(SAMPLE_OPTIONS["max_rows_per_trigger"]))
    where = data.draw(spellings(SAMPLE_OPTIONS["location"]))
    parsed = from_options(Sample, {where: "/data", key: "17"})
    assert (parsed.location, parsed.max_rows_per_trigger) == ("/data", 17)


@given(st.data())
def test_errors_name_the_option_as_spelled(data: st.DataObject) -> None:
    key = data.draw(spellings(SAMPLE_OPTIONS["max_rows_per_trigger"]))
    with pytest.raises(ConfigError) as info:
        from_options(Sample, {"location": "/data", key: "-3"})
    by_field = key.lower() == "max_rows_per_trigger"
    expected = "max_rows_per_trigger" if by_field else "maxRowsPerTrigger"
    assert (info.value.option, info.value.value) == (expected, "-3")
    assert f"option {expected!r} = '-3'" in str(info.value)


def test_defaults_blanks_required_and_unknown_keys() -> None:
    parsed = from_options(Sample, {"location": "/d", "maxRowsPerTrigger": "  ", "path": "/x"})
    assert parsed == Sample(location="/d")
    assert (parsed.fail_on_data_loss, parsed.max_lateness, parsed.colour) == (True, 0, Colour.RED)
    read = read_options(Sample, {"location": "/d", "Kafka.Group.Id": "g"})
    assert read.rest == {"kafka.group.id": "g"}, "unknown keys are left, lower-cased"
    assert not read.given("max_rows_per_trigger") and read["max_rows_per_trigger"] is None
    with pytest.raises(ConfigError, match="option 'location' = None: is required"):
        from_options(Sample, {"maxRowsPerTrigger": "5"})
    with pytest.raises(ConfigError, match="option 'location' = None: is required"):
        from_options(Sample, {"location": " "})


def test_one_option_given_twice_must_agree() -> None:
    assert from_options(Sample, {"location": "/d", "LOCATION": "/d"}).location == "/d"
    with pytest.raises(ConfigError, match="given twice"):
        from_options(Sample, {"location": "/d", "max_lateness": "1h", "maxLateness": "2h"})


def test_clashing_declarations_are_refused() -> None:
    with pytest.raises(TypeError, match="clash"):

        @options_class
        class Clash:
            a: int = option("Max_Rows", POSITIVE_INT, default=1)
            max_rows: int = option("other", POSITIVE_INT, default=1)

    assert {"maxrowspertrigger", "max_rows_per_trigger", "location"} <= option_keys(Sample)


def test_fields_of_an_object_built_in_python_are_checked_by_their_kinds() -> None:
    @options_class
    class Built:
        mode: Colour = option("mode", choice(Colour))
        root: Path | None = option("root", PATH, default=None)
        seconds: float | None = option("seconds", POSITIVE_NUMBER, default=None)
        lateness: str | None = option("lateness", DURATION_TEXT, default=None)
        column: str = option("column", NAME, default="ts")

        def __post_init__(self) -> None:
            check_fields(self)

    built = Built("DEEPBLUE", root="/tmp", seconds=2, lateness="90 min")  # type: ignore[arg-type]
    assert built.mode is Colour.DEEP_BLUE and built.root == Path("/tmp")
    assert built.seconds == 2.0 and built.lateness.micros == 5_400_000_000  # type: ignore[union-attr]
    for kwargs, field in [
        ({"mode": "green"}, "mode"),
        ({"mode": "red", "seconds": 0}, "seconds"),
        ({"mode": "red", "seconds": True}, "seconds"),
        ({"mode": "red", "lateness": "soon"}, "lateness"),
        ({"mode": "red", "column": ""}, "column"),
        ({"mode": "red", "column": None}, "column"),
        ({"mode": "red", "root": 5}, "root"),
    ]:
        with pytest.raises(ConfigError) as info:
            Built(**kwargs)  # type: ignore[arg-type]
        assert info.value.option == field


# -- every kind: a failure names the option and the value; a success renders back exactly ------

KINDS: dict[str, Kind[Any]] = {
    "text": TEXT,
    "name": NAME,
    "int": integer(),
    "positive int": POSITIVE_INT,
    "port": integer(0, 65535),
    "number": POSITIVE_NUMBER,
    "bool": BOOL,
    "duration": MICROS,
    "positive duration": POSITIVE_MICROS,
    "duration text": DURATION_TEXT,
    "timestamp": TIMESTAMP,
    "timestamp text": TIMESTAMP_TEXT,
    "enum": choice(Colour),
    "choice": choice(("parquet", "orc")),
    "names": names(),
    "topics": names(unique=True, nonempty=True, what="topics"),
    "json": json_value(lambda v: tuple(int(x) for x in v), list, "a list of numbers"),
    "path": PATH,
}

TEXTS = st.one_of(
    st.text(max_size=30),
    st.integers(-(10**12), 10**12).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(str),
    st.sampled_from(
        [
            "true",
            "No",
            "2 hours",
            "90 min",
            "1 day 6h",
            "-5",
            "1.5 s",
            "2024-01-01T00:00:00Z",
            "2024-02-30",
            "RED",
            "deepblue",
            "ORC",
            "a, b,,a",
            ",",
            "[1, 2]",
            "[1, 'x']",
            "{",
            "inf",
            "-inf",
            "nan",
            "1e400",
            "\u00b2",
            "\uff11\uff12",
            "1_000",
        ]
    ),
    st.datetimes().map(lambda d: d.isoformat()),
)


def _one(kind: Kind[Any]) -> type:
    @options_class
    class One:
        value: Any = option("someOption", kind)

    return One


ONE = {name: _one(kind) for name, kind in KINDS.items()}


@given(st.sampled_from(sorted(KINDS)), TEXTS)
def test_a_text_either_fails_naming_option_and_value_or_reads_back_the_same(
    name: str, text: str
) -> None:
    One = ONE[name]  # noqa: N806
    if not text.strip():
        with pytest.raises(ConfigError, match="'someOption' = None: is required"):
            from_options(One, {"someOption": text})
        return
    try:
        value = from_options(One, {"SomeOption": text}).value
    except ConfigError as exc:
        assert exc.option == "someOption"
        assert isinstance(exc.value, str) and exc.value == text.strip()[: len(exc.value)]
        assert len(exc.value) >= min(len(text.strip()), 80)
        assert "'someOption'" in str(exc)
        return
    rendered = to_options(One(value))
    assert from_options(One, rendered).value == value, rendered


@given(st.integers(0, 10**15))
def test_duration_text_is_exact(micros: int) -> None:
    assert parse_duration(duration_text(micros)) == micros
    assert (
        from_options(Sample, {"location": "/", "maxLateness": duration_text(micros)}).max_lateness
        == micros
    )


def test_kind_messages() -> None:
    cases = [
        ({"maxRowsPerTrigger": "0"}, "option 'maxRowsPerTrigger' = '0': must be positive"),
        ({"maxRowsPerTrigger": "1.5"}, "'maxRowsPerTrigger' = '1.5': expected a whole number"),
        ({"failOnDataLoss": "maybe"}, "'failOnDataLoss' = 'maybe': expected true or false"),
        ({"maxLateness": "-5"}, "'maxLateness' = '-5': must not be negative"),
        ({"maxLateness": "soon"}, "'maxLateness' = 'soon': expected a duration"),
        ({"colour": "green"}, "'colour' = 'green': expected 'red' or 'deepBlue'"),
        ({"maxRecordsPerSecond": "inf"}, "'maxRecordsPerSecond' = 'inf': expected a positive"),
        ({"startingTimestamp": "soon"}, "'startingTimestamp' = 'soon': expected an ISO-8601"),
    ]
    for given_options, message in cases:
        with pytest.raises(ConfigError, match=message):
            from_options(Sample, {"location": "/", **given_options})


def test_to_options_skips_none_and_reads_back() -> None:
    sample = Sample(
        location="/d",
        max_rows_per_trigger=5,
        max_lateness=int(timedelta(hours=1).total_seconds() * 1_000_000),
        colour=Colour.DEEP_BLUE,
        columns=(),
        rate=2.5,
        starting_timestamp=-1,
    )
    written = to_options(sample)
    assert written["maxLateness"] == "1 hour" and written["colour"] == "deepBlue"
    assert "extra" not in written and written["columns"] == ","
    assert from_options(Sample, written) == sample
    assert to_options(Sample(location="/d")) == {
        "location": "/d",
        "failOnDataLoss": "true",
        "maxLateness": "0 seconds",
        "colour": "red",
    }


def test_python_values_are_taken_by_their_kinds() -> None:
    from kappaplus.core.timeutil import Duration

    read = from_options(
        Sample,
        {"location": "/", "maxLateness": Duration.parse("1 h"), "columns": ["a", "b"]},
    )
    assert (read.max_lateness, read.columns) == (3_600_000_000, ("a", "b"))
    assert (
        from_options(Sample, {"location": "/", "maxLateness": timedelta(minutes=1)}).max_lateness
        == 60_000_000
    )
    with pytest.raises(ConfigError, match="option 'maxRowsPerTrigger' = True: expected a whole"):
        from_options(Sample, {"location": "/", "maxRowsPerTrigger": True})
