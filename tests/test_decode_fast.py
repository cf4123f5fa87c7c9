"""The JSON fast path (the JVM decodes what it can vouch for) against the Python decoder.

The oracle is the per-record Python decoder run in-process on the same bytes
(:func:`kappaplus.codecs.decode_batches`, what ``decode_kafka`` ran for every record before):
``decode_kafka`` on Spark must give every record the same verdict, the same event values and
the same dead-letter reason; and the JVM must vouch for the plain good records.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql import functions as F
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from pyspark.sql.types import _parse_datatype_json_value as _parse_type

from kappaplus.codecs import (
    ERROR_COL,
    RECORD_ARROW_TYPE,
    RECORD_COL,
    DecoderSpec,
    decode_batches,
    decode_kafka,
)
from kappaplus.codecs.fastjson import VOUCHED, json_checks

SCHEMA = StructType(
    [
        StructField("id", LongType(), False),
        StructField("name", StringType(), True),
        StructField("n", IntegerType(), True),
        StructField("small", ByteType(), True),
        StructField("fare", DoubleType(), True),
        StructField("flag", BooleanType(), True),
        StructField("price", DecimalType(6, 2), True),
        StructField("day", DateType(), True),
        StructField("tags", ArrayType(StringType(), True), True),
        StructField("nums", ArrayType(IntegerType(), False), True),
        StructField(
            "pos",
            StructType(
                [StructField("lat", DoubleType(), True), StructField("lon", DoubleType(), False)]
            ),
            True,
        ),
        StructField("attrs", MapType(StringType(), IntegerType()), True),
        StructField("blob", BinaryType(), True),
        StructField("ts", TimestampType(), True),
    ]
)
SPEC = DecoderSpec(
    format="json",
    schema=SCHEMA,
    event_time="ts",
    required=("name",),
    json_decoder="jvm",
    event_time_unit="ms",  # the records' numeric event times are epoch milliseconds
)
KAFKA_TS = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


def kafka_batch(values: Sequence[bytes | None]) -> pa.RecordBatch:
    n = len(values)
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
            pa.array(values, pa.binary()),
            pa.array(["trips"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([KAFKA_TS] * n, pa.timestamp("us", tz="UTC")),
        ],
        schema=pa.schema(list(RECORD_ARROW_TYPE)),
    )


def _plain(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return "NaN"
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def oracle(spec: DecoderSpec, values: Sequence[bytes | None]) -> list[dict[str, Any]]:
    """The Python decoder's rows (event fields and error) for ``values``, in order."""
    from pyspark.sql.pandas.types import to_arrow_schema as arrow_of

    arrow_schema = arrow_of(spec.decoded_schema(), timezone="UTC")
    arrow_schema = pa.schema(
        [f.with_type(RECORD_ARROW_TYPE) if f.name == RECORD_COL else f for f in arrow_schema]
    )
    (batch,) = decode_batches(spec, arrow_schema, [kafka_batch(values)])
    rows = batch.drop_columns([RECORD_COL]).to_pylist()
    return [_plain(r) for r in rows]


def on_spark(spark, spec: DecoderSpec, values: Sequence[bytes | None]):  # type: ignore[no-untyped-def]
    """(rows of decode_kafka in input order without the record, vouched flags)."""
    frame = spark.createDataFrame(
        [(f"k{i}".encode(), v, "trips", 0, i, KAFKA_TS) for i, v in enumerate(values)],
        "key binary, value binary, topic string, partition int, offset bigint, timestamp timestamp",
    )
    decoded = decode_kafka(frame, spec, metrics=None)
    assert decoded.schema == spec.decoded_schema()
    # toArrow cannot collect a NOT NULL field under a null struct: collect all nullable
    loose = [F.col(f.name).cast(_nullable(f.dataType)) for f in decoded.schema.fields]
    table = decoded.select(*loose, F.col(RECORD_COL)["offset"].alias("_o")).toArrow()
    rows = sorted(table.to_pylist(), key=lambda r: r["_o"])
    assert [r["_o"] for r in rows] == list(range(len(values)))
    got = [_plain({k: v for k, v in r.items() if k not in (RECORD_COL, "_o")}) for r in rows]
    flags = json_checks(frame, spec).orderBy("offset").select(VOUCHED).toArrow()
    return got, flags.column(0).to_pylist()


def _nullable(kind: DataType) -> DataType:
    def loosen(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: True if k in ("nullable", "containsNull", "valueContainsNull") else loosen(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [loosen(v) for v in node]
        return node

    return _parse_type(loosen(kind.jsonValue()))


def assert_same(spark, spec: DecoderSpec, values: Sequence[bytes | None]) -> list[bool]:  # type: ignore[no-untyped-def]
    got, vouched = on_spark(spark, spec, values)
    want = oracle(spec, values)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        assert g == w, (i, values[i], g, w)
    # the JVM vouches only for good records
    for i, flag in enumerate(vouched):
        assert not flag or want[i][ERROR_COL] is None, (i, values[i])
    return vouched


GOOD = {
    "id": 7,
    "name": "ann",
    "n": 3,
    "small": -5,
    "fare": 12.5,
    "flag": True,
    "price": 1.5,
    "day": "2024-02-29",
    "tags": ["a", None],
    "nums": [1, 2],
    "pos": {"lat": 1.25, "lon": -2},
    "ts": "2024-01-01T10:00:00.250+02:00",
}


def record(**changes: Any) -> bytes:
    fields = {**GOOD, **changes}
    return json.dumps({k: v for k, v in fields.items() if v is not ...}).encode()


def test_the_four_kinds_of_record_are_routed_right(spark) -> None:  # type: ignore[no-untyped-def]
    values = [
        record(n="three"),  # wrong type
        b'{"id": 1, "name": "x", "ts": 0',  # malformed JSON
        record(name=...),  # missing required field
        record(n=None, fare=None, tags=None, pos=None, day=None, attrs=None, blob=None),
        record(),
    ]
    vouched = assert_same(spark, SPEC, values)
    assert vouched == [False, False, False, True, True]
    want = oracle(SPEC, values)
    assert want[0][ERROR_COL] == "field 'n': expected int, got 'three'"
    assert want[1][ERROR_COL] == "invalid JSON at char 30: Expecting ',' delimiter"
    assert want[2][ERROR_COL] == "missing required field 'name'"
    assert want[3][ERROR_COL] is None and want[3]["n"] is None and want[3]["name"] == "ann"
    assert want[4]["ts"] == datetime(2024, 1, 1, 8, 0, 0, 250000, tzinfo=UTC)


TRICKY: list[bytes | None] = [
    None,
    b"",
    b"\xff{}",
    b"[1]",
    b'"s"',
    record(n=1.0),  # a float for an int
    record(n=2**31),  # out of range
    record(small=200),
    record(n=True),
    record(name=3),  # a number for a string
    record(name="3"),  # a numeric string is a string
    record(name="true"),
    record(fare="12.5"),  # a string for a double
    record(fare="NaN"),
    record(fare=10**30),  # a big int for a double
    record(fare=0.1),
    record(fare=1e300),
    record(flag="true"),
    record(flag=1),
    record(price=1.234),  # too many decimals
    record(price=1.2),
    record(price="1.25"),  # a string decimal (Python accepts it)
    record(price=12345.6),  # too many digits
    record(price=-0.0),
    record(day="2024-02-30"),
    record(day="20240229"),
    record(day=20240229),
    record(tags="x"),
    record(tags=[1]),
    record(nums=[1, None]),  # NOT NULL elements
    record(nums=[]),
    record(pos={"lat": 1}),  # missing NOT NULL lon
    record(pos={"lat": "x", "lon": 1}),
    record(pos={"lon": 1, "extra": [1]}),
    record(pos=[1]),
    record(attrs={"a": 1}),
    record(attrs={"a": "x"}),
    record(blob="aGk="),
    record(blob="not base64!"),
    record(id=None),
    record(id=...),
    record(ts=None),
    record(ts=...),
    record(ts=1704103200123),  # epoch millis
    record(ts=1704103200.5),
    record(ts=10**17),
    record(ts="2024-01-01T10:00:00Z"),
    record(ts="2024-01-01 10:00"),  # good, but Spark does not read it: Python does
    record(ts="2024-01-01T10:00:00.1234567"),
    record(ts="2024-01-01"),
    record(ts="0000-01-01T00:00:00"),
    record(ts="2024-01-01T24:00:00"),
    record(ts="2024-01-01T10:00:00+23:00"),
    record(ts=" 2024-01-01T10:00:00"),
    record(ts="abc"),
    record(ts=True),
    record() + b" x",  # trailing garbage
    record() + b"]",
    record() + b"}",
    record() + b" {}",
    record() + b"\n ",
    b" \t" + record(),
    record()[:-1] + b', "id": 8}',  # a duplicate key: the last wins
    record(name="\ud800"),  # a lone surrogate
    record(name="caf\u00e9 \U0001f600"),
    record(extra={"deep": [[[[1]]]]}),
    b'{"id": NaN, "name": "x", "ts": 0}',
    b'{"id": 1, "name": "x", "ts": 0, "fare": Infinity}',
    b'{"id": 1, "name": "x", "ts": 0} ' * 2,
    b"[" * 600 + b"]" * 600,
    b'{"id": 1, "name": "x", "ts": 0, "e": ' + b"[" * 990 + b"]" * 990 + b"}",
]


PLAIN_GOOD = [
    record(),
    record(ts=1704103200123),
    record(ts="2024-01-01T10:00:00Z"),
    record(ts="2024-01-01 10:00:01.5"),
    record(name="3"),
    record(price=1.2),
    record(price=-0.0),
    record(fare=-7),
    record(nums=[]),
    record(pos={"lon": 1, "extra": [1]}),
    record(extra={"deep": [[[[1]]]]}),
    record(name="caf\u00e9 \U0001f600"),
    b" \t" + record() + b"\n ",
]


def test_tricky_records_match_the_python_decoder(spark) -> None:  # type: ignore[no-untyped-def]
    vouched = assert_same(spark, SPEC, TRICKY + PLAIN_GOOD)
    # the plain good records are decoded in the JVM, without Python
    assert dict(zip(PLAIN_GOOD, vouched[len(TRICKY) :], strict=True)) == dict.fromkeys(
        PLAIN_GOOD, True
    )


def _number() -> st.SearchStrategy[str]:
    return st.one_of(
        st.integers(-(2**66), 2**66).map(str),
        st.integers(-300, 300).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.decimals(min_value=-(10**5), max_value=10**5, allow_nan=False, allow_infinity=False).map(
            str
        ),
    )


_TIMES = st.one_of(
    st.datetimes(min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30)).map(
        lambda d: json.dumps(d.isoformat())
    ),
    st.datetimes(
        min_value=datetime(1, 1, 2), max_value=datetime(9999, 12, 30), timezones=st.just(UTC)
    ).map(lambda d: json.dumps(d.isoformat(sep=" ", timespec="milliseconds"))),
    st.integers(-(10**15), 10**15).map(str),
    st.sampled_from(['"2024-01-01T10:00:00Z"', '"2024-13-01T00:00:00"', '"2024-01-01"', "1.5"]),
)
_SCALAR = st.one_of(
    _number(),
    st.sampled_from(["true", "false", "null", '""', '"aGk="']),
    st.text(max_size=6).map(json.dumps),
    st.sampled_from(['"12"', '"1.5"', '"2024-02-29"', '"true"', '"NaN"']),
    _TIMES,
)
_VALUE = st.recursive(
    _SCALAR,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.dictionaries(st.sampled_from(["lat", "lon", "a", "x"]), inner, max_size=3).map(
            lambda d: "{" + ", ".join(f"{json.dumps(k)}: {v}" for k, v in d.items()) + "}"
        ),
    ),
    max_leaves=5,
)
_FIELDS = [f.name for f in SCHEMA.fields] + ["extra"]


@st.composite
def _record(draw: st.DrawFn) -> bytes:
    chosen = draw(st.lists(st.sampled_from(_FIELDS), unique=True, max_size=len(_FIELDS)))
    parts = []
    for name in ["id", "name", "ts", *chosen]:
        if name in ("id", "name", "ts") and name in chosen:
            continue
        if name == "ts":
            text = draw(_TIMES)
        elif name == "id":
            text = draw(st.one_of(st.integers(-(2**63), 2**63 - 1).map(str), _VALUE))
        elif name == "name":
            text = draw(st.one_of(st.text(max_size=5).map(json.dumps), _VALUE))
        else:
            text = draw(_VALUE)
        parts.append(f"{json.dumps(name)}: {text}")
    body = "{" + ", ".join(parts) + "}"
    tail = draw(st.sampled_from(["", "", "", "", " ", "x", "}", "]", ",", "\n"]))
    return (body + tail).encode()


# Three examples: each is a Spark job (~5 s); larger lists exceed Hypothesis's entropy limit.
@settings(
    max_examples=3,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(values=st.lists(_record(), min_size=30, max_size=60))
def test_random_records_match_the_python_decoder(spark, values: list[bytes]) -> None:  # type: ignore[no-untyped-def]
    assert_same(spark, SPEC, values)


def test_json_decoder_option_is_validated(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from kappaplus.core.errors import ConfigError

    with pytest.raises(ConfigError, match="json_decoder.*expected 'python' or 'jvm'"):
        DecoderSpec(format="json", schema=SCHEMA, event_time="ts", json_decoder="fast")  # type: ignore[arg-type]
    assert DecoderSpec(format="json", schema=SCHEMA, event_time="ts").json_decoder == "python"


def test_numeric_event_times_agree_in_every_unit(spark) -> None:  # type: ignore[no-untyped-def]
    """Without a unit the JVM vouches for no numeric event time (Python refuses it); with
    one both paths read it in that unit."""
    values = [record(ts=1357016400), record(ts=1357016400123), record(ts=1.5), record(ts=10**17)]
    for unit in (None, "s", "ms", "us"):
        spec = DecoderSpec(
            format="json",
            schema=SCHEMA,
            event_time="ts",
            required=("name",),
            json_decoder="jvm",
            event_time_unit=unit,
        )
        vouched = assert_same(spark, spec, values)
        if unit is None:
            assert not any(vouched)
