"""Decoding Kafka records into typed events; malformed records become dead letters."""

from __future__ import annotations

import io
import json
import struct
from collections.abc import Sequence
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import fastavro
import pytest
from pyspark.sql import functions as F
from pyspark.sql.types import (
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kappaplus.codecs import (
    ERROR_COL,
    DecoderSpec,
    dead_letters,
    decode_kafka,
    decode_values,
    dlq_schema,
    good_events,
)
from kappaplus.core.errors import ConfigError, DataError

KAFKA_DDL = (
    "key binary, value binary, topic string, partition int, offset bigint, "
    "timestamp timestamp, timestampType int"
)
KAFKA_TS = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
EVENT_DDL = "rider_id STRING NOT NULL, fare DOUBLE, trips INT, ts TIMESTAMP"
EVENT_SCHEMA = StructType(
    [
        StructField("rider_id", StringType(), False),
        StructField("fare", DoubleType(), True),
        StructField("trips", IntegerType(), True),
        StructField("ts", TimestampType(), True),
    ]
)


def kafka_frame(  # type: ignore[no-untyped-def]
    spark, values: Sequence[bytes | None], *, topic: str = "trips", first: int = 0
):
    """A batch DataFrame with Spark's Kafka schema; record i has offset first+i, key b'k<i>'."""
    rows = [
        (f"k{i}".encode(), value, topic, i % 2, first + i, KAFKA_TS, 0)
        for i, value in enumerate(values)
    ]
    return spark.createDataFrame(rows, KAFKA_DDL)


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)  # type: ignore[misc]


def check_split(
    spark,
    spec: DecoderSpec,
    values: Sequence[bytes | None],
    expected_good: list[dict[str, Any]],
    expected_dead: dict[int, str],
    sort_key: str = "rider_id",
) -> None:  # type: ignore[no-untyped-def]
    """Decode ``values``; good rows must equal ``expected_good`` exactly, dead rows (by index)
    must carry the expected reason (prefix) and the original bytes, key and offset."""
    decoded = decode_kafka(kafka_frame(spark, values, first=100), spec, metrics=None)
    good = good_events(decoded)
    assert good.schema == spec.event_schema
    got_good = sorted(good.toArrow().to_pylist(), key=lambda r: r[sort_key])
    assert got_good == sorted(expected_good, key=lambda r: r[sort_key])

    dead = dead_letters(decoded, "trips-job")
    assert dead.schema == dlq_schema()
    rows = {r["offset"]: r for r in dead.toArrow().to_pylist()}
    assert sorted(rows) == sorted(100 + i for i in expected_dead)
    for i, reason in expected_dead.items():
        row = rows[100 + i]
        assert row["reason"].startswith(reason), (i, row["reason"], reason)
        assert row["value"] == values[i]
        assert row["key"] == f"k{i}".encode()
        assert (row["topic"], row["partition"], row["kafka_timestamp"]) == (
            "trips",
            i % 2,
            KAFKA_TS,
        )
        assert row["job"] == "trips-job"
        assert row["dead_letter_time"] is not None
    # in = good + dead, and nothing is both
    assert len(values) == len(got_good) + len(rows)
    assert decoded.where(F.col(ERROR_COL).isNull()).count() == len(expected_good)


# ---------------------------------------------------------------------------------------
# spec validation
# ---------------------------------------------------------------------------------------


def test_spec_validation_names_option_and_value(spark, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match=r"option 'event_time' = 'when': no such field"):
        DecoderSpec(format="json", schema=EVENT_DDL, event_time="when")
    with pytest.raises(ConfigError, match=r"'event_time' = 'fare': must be a TIMESTAMP.*double"):
        DecoderSpec(format="json", schema=EVENT_DDL, event_time="fare")
    with pytest.raises(ConfigError, match=r"option 'format' = 'xml'"):
        DecoderSpec(format="xml", schema=EVENT_DDL, event_time="ts")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"option 'schema' = None"):
        DecoderSpec(format="json", event_time="ts")
    with pytest.raises(ConfigError, match=r"option 'schema' = 'ts TIMESTAMP,,': not a valid"):
        DecoderSpec(format="json", schema="ts TIMESTAMP,,", event_time="ts")
    with pytest.raises(ConfigError, match=r"option 'required' = 'driver'"):
        DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", required=("driver",))
    with pytest.raises(ConfigError, match=r"'_decode_error' is reserved"):
        DecoderSpec(format="json", schema="_decode_error STRING, ts TIMESTAMP", event_time="ts")
    missing = tmp_path / "nope.avsc"
    with pytest.raises(ConfigError, match=r"option 'avro_schema' = '.*nope.avsc': cannot read"):
        DecoderSpec(format="avro", avro_schema=missing, event_time="ts")
    bad = tmp_path / "bad.avsc"
    bad.write_text(
        json.dumps({"type": "record", "name": "X", "fields": [{"name": "ts", "type": "long"}]})
    )
    with pytest.raises(ConfigError, match=r"'event_time' = 'ts': must be a TIMESTAMP.*bigint"):
        DecoderSpec(format="avro", avro_schema=bad, event_time="ts")
    with pytest.raises(ConfigError, match=r"option 'wire_format' = 'raw'"):
        DecoderSpec(
            format="avro", avro_schema=AVSC_FILE(tmp_path), event_time="ts", wire_format="raw"
        )  # type: ignore[arg-type]
    # a StructType needs no session; a DDL string gives the same schema
    assert DecoderSpec(format="json", schema=EVENT_SCHEMA, event_time="ts").event_schema == (
        DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts").event_schema
    )


def test_input_must_have_the_kafka_schema(spark) -> None:  # type: ignore[no-untyped-def]
    spec = DecoderSpec(format="json", schema=EVENT_SCHEMA, event_time="ts")
    frame = spark.createDataFrame([(b"{}", "t")], "value binary, topic string")
    with pytest.raises(DataError, match=r"missing column 'partition'"):
        decode_kafka(frame, spec)


# ---------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------


def test_json_good_and_malformed_records(spark) -> None:  # type: ignore[no-untyped-def]
    spec = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", event_time_unit="ms")
    invalid = b'{"rider_id": "r3", "fare": }'
    values: list[bytes | None] = [
        b'{"rider_id": "r1", "fare": 12.5, "trips": 3, "ts": "2024-01-01T10:00:00Z"}',
        b'{"rider_id": "r2", "fare": 7, "ts": 1704103200123, "extra": [1]}',  # epoch millis
        invalid,
        b'{"rider_id": "r4", "ts": "abc"}',
        b'{"rider_id": "r5", "ts": null}',
        b'{"fare": 1.0, "ts": "2024-01-01T00:00:00Z"}',
        b'{"rider_id": "r7", "trips": "three", "ts": "2024-01-01T00:00:00Z"}',
        None,
        b"[1, 2]",
        b'{"rider_id": "r10", "ts": "2024-01-01T12:30:00.250+02:00", "trips": null}',
        b'{"rider_id": "r11", "trips": 3000000000, "ts": 0}',
        b"\xff\xfe",
        b'{"rider_id": "r13"}',
    ]
    expected_good = [
        {"rider_id": "r1", "fare": 12.5, "trips": 3, "ts": utc(2024, 1, 1, 10)},
        {
            "rider_id": "r2",
            "fare": 7.0,
            "trips": None,
            "ts": datetime(2024, 1, 1, 10, 0, 0, 123000, tzinfo=UTC),
        },
        {
            "rider_id": "r10",
            "fare": None,
            "trips": None,
            "ts": datetime(2024, 1, 1, 10, 30, 0, 250000, tzinfo=UTC),
        },
    ]
    expected_dead = {
        2: f"invalid JSON at char {invalid.index(b'}')}: Expecting value",
        3: "field 'ts': expected timestamp, got 'abc'",
        4: "event time 'ts' is null",
        5: "missing required field 'rider_id'",
        6: "field 'trips': expected int, got 'three'",
        7: "value is null (tombstone record)",
        8: "expected a JSON object, got an array",
        10: "field 'trips': expected int, got 3000000000 (out of range)",
        11: "value is not UTF-8: invalid byte at 0",
        12: "event time 'ts' is null",
    }
    check_split(spark, spec, values, expected_good, expected_dead)


def test_json_reasons_without_spark() -> None:
    schema = StructType(
        [
            StructField("id", LongType(), False),
            StructField("ts", TimestampType(), True),
            StructField("amount", StructType([StructField("value", DoubleType(), False)]), True),
        ]
    )
    spec = DecoderSpec(format="json", schema=schema, event_time="ts", event_time_unit="ms")
    got = decode_values(
        spec,
        [
            b'{"id": 1, "ts": 1.5}',
            b'{"id": true, "ts": 0}',
            b'{"id": 2, "ts": 0, "amount": {}}',
            b'{"id": 3, "ts": 0, "amount": {"value": "x"}}',
            b'{"id": null, "ts": 0}',
            b'{"id": 4, "ts": false}',
            b'{"id": 5.5, "ts": 0}',
        ],
    )
    assert got == [
        {"id": 1, "ts": 1500, "amount": None},
        "field 'id': expected long, got true",
        "missing required field 'amount.value'",
        "field 'amount.value': expected double, got 'x'",
        "required field 'id' is null",
        "field 'ts': expected timestamp, got false",
        "field 'id': expected long, got 5.5",
    ]


def test_json_nested_and_decimal_types(spark) -> None:  # type: ignore[no-untyped-def]
    ddl = (
        "rider_id STRING, tags ARRAY<STRING>, attrs MAP<STRING, INT>, price DECIMAL(10,2), "
        "day DATE, pos STRUCT<lat: DOUBLE, lon: DOUBLE>, ts TIMESTAMP"
    )
    spec = DecoderSpec(format="json", schema=ddl, event_time="ts", required=("rider_id",))
    values: list[bytes | None] = [
        b'{"rider_id": "a", "tags": ["x", "y"], "attrs": {"n": 1}, "price": 12.34, '
        b'"day": "2024-02-29", "pos": {"lat": 1.5, "lon": -2}, "ts": "2024-02-29T00:00:00"}',
        b'{"rider_id": "b", "price": 1.234, "ts": 0}',
        b'{"rider_id": "c", "tags": "x", "ts": 0}',
        b'{"rider_id": "d", "day": "2024-02-30", "ts": 0}',
    ]
    from datetime import date

    expected_good = [
        {
            "rider_id": "a",
            "tags": ["x", "y"],
            "attrs": [("n", 1)],
            "price": Decimal("12.34"),
            "day": date(2024, 2, 29),
            "pos": {"lat": 1.5, "lon": -2.0},
            "ts": utc(2024, 2, 29),
        },
    ]
    expected_dead = {
        1: "field 'price': expected decimal(10,2), got Decimal('1.234') (more than 2 decimals)",
        2: "field 'tags': expected array, got 'x'",
        3: "field 'day': expected date, got '2024-02-30'",
    }
    check_split(spark, spec, values, expected_good, expected_dead)


# ---------------------------------------------------------------------------------------
# Avro
# ---------------------------------------------------------------------------------------

AVRO_SCHEMA = {
    "type": "record",
    "name": "Trip",
    "namespace": "kappa.test",
    "fields": [
        {"name": "rider_id", "type": "string"},
        {"name": "fare", "type": "double"},
        {"name": "trips", "type": ["null", "int"], "default": None},
        {"name": "ts", "type": ["null", {"type": "long", "logicalType": "timestamp-millis"}]},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
    ],
}


def AVSC_FILE(directory: Path) -> Path:  # noqa: N802 - reads like a constant
    path = directory / "trip.avsc"
    path.write_text(json.dumps(AVRO_SCHEMA))
    return path


def avro_bytes(record: dict[str, Any]) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(AVRO_SCHEMA), record)
    return out.getvalue()


def confluent(record: dict[str, Any], schema_id: int = 7, magic: int = 0) -> bytes:
    return bytes([magic]) + struct.pack(">I", schema_id) + avro_bytes(record)


def trip(rider: str, ts: datetime | None, trips: int | None = 1) -> dict[str, Any]:
    return {"rider_id": rider, "fare": 2.5, "trips": trips, "ts": ts, "tags": ["a"]}


def test_avro_schema_becomes_the_event_schema(tmp_path: Path) -> None:
    spec = DecoderSpec(format="avro", avro_schema=AVSC_FILE(tmp_path), event_time="ts")
    assert spec.event_schema.simpleString() == (
        "struct<rider_id:string,fare:double,trips:int,ts:timestamp,tags:array<string>>"
    )
    assert [f.nullable for f in spec.event_schema.fields] == [False, False, True, True, False]


@pytest.mark.parametrize("wire", ["auto", "confluent", "plain"])
def test_avro_plain_and_confluent_wire_format(spark, tmp_path: Path, wire: str) -> None:  # type: ignore[no-untyped-def]
    spec = DecoderSpec(
        format="avro",
        avro_schema=AVSC_FILE(tmp_path),
        event_time="ts",
        wire_format=wire,
        required=("trips",),  # type: ignore[arg-type]
    )
    t1 = datetime(2024, 3, 1, 8, 0, 0, 123000, tzinfo=UTC)
    good_plain = avro_bytes(trip("p1", t1))
    good_wire = confluent(trip("c1", t1))
    truncated_plain = avro_bytes(trip("p2", t1))[:-4]
    truncated_wire = confluent(trip("c2", t1))[:-4]
    wrong_magic = confluent(trip("c3", t1), magic=1)
    null_time_wire = confluent(trip("c4", None))
    null_trips_plain = avro_bytes(trip("p5", t1, trips=None))
    values = [
        good_plain,
        good_wire,
        truncated_plain,
        truncated_wire,
        wrong_magic,
        null_time_wire,
        null_trips_plain,
    ]
    row = {"fare": 2.5, "trips": 1, "ts": t1, "tags": ["a"]}
    if wire == "auto":
        expected_good = [{"rider_id": "p1", **row}, {"rider_id": "c1", **row}]
        expected_dead = {
            2: "not Confluent wire format / schema mismatch: ",
            3: "Avro decode failed (Confluent schema id 7): ",
            4: "not Confluent wire format / schema mismatch: magic byte 0x01; as plain Avro:",
            5: "event time 'ts' is null",
            6: "required field 'trips' is null",
        }
    elif wire == "confluent":
        expected_good = [{"rider_id": "c1", **row}]
        expected_dead = {
            0: "not Confluent wire format: magic byte 0x",
            2: "not Confluent wire format: magic byte 0x",
            3: "Avro decode failed (Confluent schema id 7): ",
            4: "not Confluent wire format: magic byte 0x01, expected 0x00",
            5: "event time 'ts' is null",
            6: "not Confluent wire format: magic byte 0x",
        }
    else:
        expected_good = [{"rider_id": "p1", **row}]
        expected_dead = {i: "Avro " for i in (1, 2, 3, 4, 5)}
        expected_dead[6] = "required field 'trips' is null"
    check_split(spark, spec, values, expected_good, expected_dead)


def test_avro_reasons_name_truncation_and_schema_ids(tmp_path: Path) -> None:
    spec = DecoderSpec(
        format="avro",
        avro_schema=AVSC_FILE(tmp_path),
        event_time="ts",
        wire_format="confluent",
        schema_ids=frozenset({7}),
    )
    t1 = utc(2024, 3, 1)
    got = decode_values(spec, [confluent(trip("a", t1))[:-4], confluent(trip("b", t1), 8), b"\x00"])
    assert isinstance(got[0], str) and got[0].startswith(
        "Avro decode failed (Confluent schema id 7): truncated"
    )
    assert got[1] == "unknown Confluent schema id 8, expected one of [7]"
    assert got[2] == "not Confluent wire format: 1 bytes, need magic byte + schema id"
    extra = decode_values(spec, [confluent(trip("c", t1)) + b"\x00\x00"])[0]
    assert extra == "Avro schema mismatch (Confluent schema id 7): 2 bytes left after the record"


# ---------------------------------------------------------------------------------------
# observed metrics in a real streaming query
# ---------------------------------------------------------------------------------------


def test_observed_counts_per_micro_batch(spark, scratch: Path) -> None:  # type: ignore[no-untyped-def]
    """A file stream with the Kafka schema, one file per micro-batch: every batch's progress
    carries records/good/dead, and they add up to the ground truth."""
    spec = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", event_time_unit="ms")
    source = scratch / "in"
    batches: list[list[bytes | None]] = [
        [b'{"rider_id": "a", "ts": 1000}', b"{oops", b'{"rider_id": "b", "ts": 2000}'],
        [b'{"rider_id": "c", "ts": "x"}', None],
        [b'{"rider_id": "d", "ts": 3000}'],
    ]
    first = 0
    for n, values in enumerate(batches):
        kafka_frame(spark, values, first=first).coalesce(1).write.parquet(str(source / f"b{n}"))
        first += len(values)
    paths = sorted(p for d in source.iterdir() for p in d.glob("*.parquet"))
    flat = scratch / "flat"
    flat.mkdir()
    for i, path in enumerate(paths):
        path.rename(flat / f"{i:03d}.parquet")

    stream = spark.readStream.schema(KAFKA_DDL).option("maxFilesPerTrigger", 1).parquet(str(flat))
    decoded = decode_kafka(stream, spec, metrics="trips_decode")
    query = (
        good_events(decoded)
        .writeStream.format("memory")
        .queryName("decoded_good_events")
        .option("checkpointLocation", str(scratch / "ckpt"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(120)
        progress = [p for p in query.recentProgress if p["numInputRows"] > 0]
        observed = [p["observedMetrics"]["trips_decode"] for p in progress]
    finally:
        query.stop()
    total = sum(len(b) for b in batches)
    expected_good = sum(1 for b in batches for v in b if v and b"rider_id" in v and b'"x"' not in v)
    assert sum(m["records"] for m in observed) == total
    assert sum(m["good"] for m in observed) == expected_good == 3
    assert sum(m["dead"] for m in observed) == total - expected_good
    for m in observed:
        assert m["records"] == m["good"] + m["dead"]
    got = sorted(r.rider_id for r in spark.table("decoded_good_events").collect())
    assert got == ["a", "b", "d"]
    assert len(observed) == len(batches)


def test_a_numeric_event_time_needs_a_declared_unit() -> None:
    """Epoch seconds are never read as milliseconds (1357016400 was 1970-01-16): without a
    unit a numeric event time is a dead letter naming the field and the way out."""
    values = [b'{"rider_id": "r1", "ts": 1357016400}', b'{"rider_id": "r2", "ts": 1357016400.5}']
    spec = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts")
    for error in decode_values(spec, values):
        assert isinstance(error, str), error
        assert "event time 'ts' is a number" in error and "declare" in error, error
        assert 'event_time = { unit = "s" }' in error, error
    seconds = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", event_time_unit="s")
    micros = [row["ts"] for row in decode_values(seconds, values)]  # type: ignore[index]
    at = int(datetime(2013, 1, 1, 5, tzinfo=UTC).timestamp()) * 1_000_000
    assert micros == [at, at + 500_000]
    millis = DecoderSpec(format="json", schema=EVENT_DDL, event_time="ts", event_time_unit="ms")
    assert decode_values(millis, values[:1])[0]["ts"] == 1357016400 * 1000  # type: ignore[index]
