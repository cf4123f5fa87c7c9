"""Arrow's JSON reader decodes a batch only where the Python decoder would agree.

Each tricky value goes into a batch of good records; the batch decoded with the reader
(:mod:`kappaplus.codecs.arrow_json`) equals the batch decoded record by record, dead
letters and their reasons included. Batches of good records are answered by the reader
itself (else these comparisons would prove nothing).
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pyarrow as pa
import pytest
from pyspark.sql import types as T

from kappaplus.codecs.arrow_json import ArrowJsonReader
from kappaplus.codecs.decoder import decode_batches
from kappaplus.codecs.frames import decoded_arrow_schema
from kappaplus.codecs.spec import DecoderSpec

SCHEMA = T.StructType(
    [
        T.StructField("id", T.StringType(), False),
        T.StructField("n", T.IntegerType()),
        T.StructField("big", T.LongType()),
        T.StructField("small", T.ByteType()),
        T.StructField("fare", T.DoubleType()),
        T.StructField("ok", T.BooleanType()),
        T.StructField("seen", T.TimestampType()),
        T.StructField("ts", T.TimestampType()),
    ]
)
GOOD = [
    b'{"id": "a", "n": 1, "big": 9007199254740993, "small": -128, "fare": 12.5, "ok": true,'
    b' "seen": "2024-03-01T10:00:00.123456+05:30", "ts": "2024-03-01T00:00:00+00:00"}',
    b'{"id":"b","ts":"2024-03-01 00:00:01","fare":1,"extra":{"deep":[1,[2,{"x":null}]]}}',
    b'{"id": "c\\u00e9\\n\\"q\\"", "ts": "2024-03-01T00:00Z", "fare": -0.0, "n": -0}',
    b'{"ts": "2024-03-01T00:00:02.5Z", "id": "d", "fare": 1e-3, "seen": null}',
    b' {"id": "e", "ts": "0001-01-01T00:00:00Z", "fare": 9007199254740993} ',
    b'{"id": "f", "ts": "9999-12-31T23:59:59.999999Z", "fare": NaN, "big": -9223372036854775808}',
    b'{"id": "g", "ts": "2024-03-01T00:00:00-23:59", "fare": Infinity, "\\u006e": 7}',
    b'{"id": "h", "ts": "2024-02-29T12:00:00.1Z", "fare": 1.7976931348623157e308}',
]
TRICKY = [
    b"not json",
    b"",
    b"   ",
    b"[1, 2]",
    b"3",
    b"null",
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z"} {"id": "y"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z"}x',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z",}',
    b'{"id": "x",\n "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": "x",\r "ts": "2024-03-01T00:00:00Z"}',
    b'\xef\xbb\xbf{"id": "x", "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": "\xff", "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": "\\ud800", "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": "a\tb", "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": 3, "ts": "2024-03-01T00:00:00Z"}',
    b'{"id": null, "ts": "2024-03-01T00:00:00Z"}',
    b'{"ts": "2024-03-01T00:00:00Z"}',
    b'{"id": "x"}',
    b'{"id": "x", "ts": null}',
    b'{"id": "x", "ts": 1709251200000}',
    b'{"id": "x", "ts": "2024-03-01"}',
    b'{"id": "x", "ts": "2024-02-30T00:00:00Z"}',
    b'{"id": "x", "ts": "2024-03-01T24:00:00Z"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00.1234567Z"}',
    b'{"id": "x", "ts": "2024-03-01t00:00:00z"}',
    b'{"id": "x", "ts": " 2024-03-01T00:00:00Z"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00+0530"}',
    b'{"id": "x", "ts": "0000-03-01T00:00:00Z"}',
    b'{"id": "x", "ts": "0001-01-01T00:00:00+05:00"}',
    b'{"id": "x", "ts": "9999-12-31T23:59:59-01:00"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": 1.0}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": 1e2}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": "1"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": true}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": 2147483648}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "small": 128}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "big": 9223372036854775808}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": NaN}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "n": 01}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "fare": "1.5"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "fare": 1e400}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "fare": true}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "ok": 1}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "seen": 1709251200000}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "id": "y"}',
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "deep": ' + b"[" * 600 + b"]" * 600 + b"}",
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "deep": ' + b"[" * 450 + b"]" * 450 + b"}",
    b'{"id": "x", "ts": "2024-03-01T00:00:00Z", "s": "' + b"[" * 1200 + b'"}',
]


def spec(**extra: object) -> DecoderSpec:
    return DecoderSpec(format="json", schema=SCHEMA, event_time="ts", **extra)  # type: ignore[arg-type]


def kafka_batch(values: list[bytes | None], *, large: bool = False) -> pa.RecordBatch:
    n = len(values)
    value_type = pa.large_binary() if large else pa.binary()
    return pa.RecordBatch.from_arrays(
        [
            pa.array([f"k{i}".encode() for i in range(n)], pa.binary()),
            pa.array(values, value_type),
            pa.array(["t"] * n),
            pa.array([0] * n, pa.int32()),
            pa.array(range(n), pa.int64()),
            pa.array([datetime(2026, 11, 1, tzinfo=UTC)] * n, pa.timestamp("us", tz="UTC")),
        ],
        names=["key", "value", "topic", "partition", "offset", "timestamp"],
    )


def decoded(the_spec: DecoderSpec, batch: pa.RecordBatch, *, arrow_json: bool) -> pa.Table:
    schema = decoded_arrow_schema(the_spec)
    return pa.Table.from_batches(
        list(decode_batches(the_spec, schema, [batch], arrow_json=arrow_json)), schema=schema
    )


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (Arrow's ``equals`` says NaN differs from itself)."""

    def rows(t: pa.Table) -> list[dict[str, object]]:
        t = as_numbers(t)
        return [
            {k: "NaN" if isinstance(v, float) and math.isnan(v) else v for k, v in r.items()}
            for r in t.to_pylist()
        ]

    return a.schema.equals(b.schema, check_metadata=True) and rows(a) == rows(b)


def as_numbers(t: pa.Table) -> pa.Table:
    """Timestamps as microseconds (a time before year 1 has no Python ``datetime``)."""
    for i, f in enumerate(t.schema):
        if pa.types.is_timestamp(f.type):
            t = t.set_column(i, f.name, t.column(i).cast(pa.int64()))
    return t


def diff(a: pa.Table, b: pa.Table) -> list[tuple[object, object]]:
    pairs = zip(as_numbers(a).to_pylist(), as_numbers(b).to_pylist(), strict=True)
    return [(x, y) for x, y in pairs if x != y]


def test_good_batches_are_read_by_arrow_and_equal_the_python_decoder() -> None:
    the_spec = spec()
    reader = ArrowJsonReader.of(the_spec, decoded_arrow_schema(the_spec))
    assert reader is not None
    for large in (False, True):
        batch = kafka_batch(GOOD, large=large)
        assert reader.decode(batch.column("value")) is not None, "Arrow did not vouch"
        fast, slow = (
            decoded(the_spec, batch, arrow_json=True),
            decoded(the_spec, batch, arrow_json=False),
        )
        assert slow.column("_decode_error").null_count == len(GOOD)  # all good, by Python
        assert same(fast, slow), diff(fast, slow)


@pytest.mark.parametrize("value", TRICKY, ids=range(len(TRICKY)))
def test_a_tricky_record_gets_the_python_decoders_outcome(value: bytes) -> None:
    the_spec = spec(required=("n",)) if value.endswith(b'"n": NaN}') else spec()
    batch = kafka_batch([GOOD[0], value, GOOD[1]])
    fast, slow = (
        decoded(the_spec, batch, arrow_json=True),
        decoded(the_spec, batch, arrow_json=False),
    )
    assert same(fast, slow), diff(fast, slow)


def test_a_null_value_and_the_epoch_unit() -> None:
    the_spec = spec()
    batch = kafka_batch([GOOD[0], None])
    assert same(
        decoded(the_spec, batch, arrow_json=True), decoded(the_spec, batch, arrow_json=False)
    )
    for unit, value in (("ms", 1709251200123), ("s", 1709251200), ("us", -1), ("ms", 2**62)):
        the_spec = spec(event_time_unit=unit)
        batch = kafka_batch(
            [b'{"id": "a", "ts": %d}' % value, b'{"id": "b", "ts": "2024-03-01T00:00:00Z"}']
        )
        assert same(
            decoded(the_spec, batch, arrow_json=True), decoded(the_spec, batch, arrow_json=False)
        )
        numeric = kafka_batch([b'{"id": "a", "ts": %d}' % value] * 3)
        reader = ArrowJsonReader.of(the_spec, decoded_arrow_schema(the_spec))
        assert reader is not None
        answered = reader.decode(numeric.column("value"))
        assert (answered is None) == (value == 2**62), unit  # out of range: Python's to tell
        assert same(
            decoded(the_spec, numeric, arrow_json=True),
            decoded(the_spec, numeric, arrow_json=False),
        )


def test_schemas_it_does_not_vouch_for_are_left_to_python() -> None:
    for kind in (T.DecimalType(10, 2), T.FloatType(), T.DateType(), T.BinaryType()):
        schema = T.StructType([*SCHEMA.fields, T.StructField("x", kind)])
        the_spec = DecoderSpec(format="json", schema=schema, event_time="ts")
        assert ArrowJsonReader.of(the_spec, decoded_arrow_schema(the_spec)) is None, kind
    nested = T.StructType([*SCHEMA.fields, T.StructField("x", T.ArrayType(T.StringType()))])
    the_spec = DecoderSpec(format="json", schema=nested, event_time="ts")
    assert ArrowJsonReader.of(the_spec, decoded_arrow_schema(the_spec)) is None
