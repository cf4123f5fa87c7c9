"""Protobuf records on the embedded broker: written with the ``protobuf`` package (classes
compiled here by ``grpc_tools.protoc``, not by the code under test), read with the Kafka
source and the job's decoder, compared field by field; evolution, registry framing, dead
letters, and bad schemas named in one line before any query starts."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer
from typer.testing import CliRunner

from kappaplus.codecs import DecoderSpec, dead_letters, decode_kafka, good_events
from kappaplus.connectors.kafka import read_kafka
from kappaplus.core.errors import ConfigError

HERE = Path(__file__).parent / "protobuf"
EVOLUTION = HERE / "evolution"
T0 = datetime(2024, 3, 1, 12, 30, 0, 123456, tzinfo=UTC)


def message_classes(proto: Path, *include: Path) -> dict[str, Any]:
    """Message classes of ``proto`` (by full name), compiled by protoc independently."""
    import grpc_tools
    from google.protobuf import descriptor_pb2, message_factory

    out = proto.parent / f".{proto.stem}.test.desc"
    wkt = Path(grpc_tools.__file__).parent / "_proto"
    args = [sys.executable, "-m", "grpc_tools.protoc", f"-I{proto.parent}"]
    args += [f"-I{d}" for d in include] + [f"-I{wkt}", "--include_imports"]
    subprocess.run([*args, f"--descriptor_set_out={out}", proto.name], check=True, cwd=proto.parent)
    files = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
    out.unlink()
    return message_factory.GetMessages(list(files.file))


def produce(bootstrap: str, topic: str, values: list[bytes | None]) -> list[tuple[int, int]]:
    """Produce in order; the (partition, offset) of each."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    where: list[tuple[int, int]] = []

    def delivered(err: Any, msg: Any) -> None:
        assert err is None, err
        where.append((msg.partition(), msg.offset()))

    for value in values:
        producer.produce(topic, value=value, on_delivery=delivered)
        producer.flush(30)
    return where


def read(spark, bootstrap: str, topic: str, spec: DecoderSpec) -> tuple[list, list]:  # type: ignore[no-untyped-def]
    """(good events as dicts in offset order, dead letters) through the Kafka source."""
    decoded = decode_kafka(
        read_kafka(spark, bootstrap=bootstrap, subscribe=topic), spec, metrics=None
    )
    decoded = decoded.persist()
    good = [
        r.asDict(recursive=True)
        for r in good_events(decoded).orderBy(spec.event_time, spec.event_schema.names[0]).collect()
    ]
    dead = dead_letters(decoded, "protobuf-test").orderBy("offset").collect()
    decoded.unpersist()
    return good, dead


def everything_spec() -> DecoderSpec:
    return DecoderSpec(
        format="protobuf",
        proto_schema=HERE / "everything.proto",
        message="acme.events.v1.Everything",
        event_time="event_time",
    )


def naive(moment: datetime) -> datetime:
    return moment.astimezone(UTC).replace(tzinfo=None)


def test_every_type_round_trips_field_by_field(spark, kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    classes = message_classes(HERE / "everything.proto")
    Everything = classes["acme.events.v1.Everything"]  # noqa: N806 - a class
    full = Everything(
        id="full", i32=-7, i64=-(2**40), u32=2**32 - 1, u64=2**64 - 1, s32=-3, s64=-(2**50),
        f32=7, f64=2**63, sf32=-9, sf64=-(2**60), fl=1.5, db=2.25, flag=True, blob=b"\x00\xff",
        kind=1, counts=[1, 2, 3], tally={"x": 1, "y": -2}, kinds=[2, 1, 9],
    )  # fmt: skip
    full.event_time.FromDatetime(T0)
    full.place.city, full.place.lat = "Oslo", 59.9
    full.place.tags.extend(["a", "b"])
    full.stops.add(city="A")
    full.stops.add(city="B", tags=["x"])
    full.places_by_no[7].city = "Rome"
    full.cash.currency, full.cash.units, full.cash.nanos = "EUR", 12, 5
    full.took.FromMicroseconds(90_500_000)
    full.note.value = "hello"
    full.maybe_count.value = 0  # present, zero: not null
    full.rating = 0  # proto3 optional, present: 0, not null
    full.tip.value = 1.25
    bare = Everything(id="bare", card="visa")
    bare.event_time.FromDatetime(datetime(2024, 3, 1, 13, tzinfo=UTC))

    topic = new_topic()
    produce(kafka_bootstrap, topic, [full.SerializeToString(), bare.SerializeToString()])
    good, dead = read(spark, kafka_bootstrap, topic, everything_spec())
    assert dead == []
    assert len(good) == 2
    place = {"city": "Oslo", "lat": 59.9, "tags": ["a", "b"]}
    assert good[0] == {
        "id": "full", "event_time": naive(T0), "i32": -7, "i64": -(2**40), "u32": 2**32 - 1,
        "u64": Decimal(2**64 - 1), "s32": -3, "s64": -(2**50), "f32": 7, "f64": Decimal(2**63),
        "sf32": -9, "sf64": -(2**60), "fl": 1.5, "db": 2.25, "flag": True,
        "blob": bytearray(b"\x00\xff"), "kind": "KIND_RIDE", "place": place,
        "counts": [1, 2, 3],
        "stops": [{"city": "A", "lat": 0.0, "tags": []}, {"city": "B", "lat": 0.0, "tags": ["x"]}],
        "tally": {"x": 1, "y": -2}, "places_by_no": {7: {"city": "Rome", "lat": 0.0, "tags": []}},
        "card": None, "cash": {"currency": "EUR", "units": 12, "nanos": 5},
        "took": 90_500_000, "note": "hello", "maybe_count": 0, "rating": 0,
        "kinds": ["KIND_EATS", "KIND_RIDE", "9"],  # a number this schema does not name
        "tip": 1.25,
    }  # fmt: skip
    assert good[1] == {
        "id": "bare", "event_time": datetime(2024, 3, 1, 13), "i32": 0, "i64": 0, "u32": 0,
        "u64": Decimal(0), "s32": 0, "s64": 0, "f32": 0, "f64": Decimal(0), "sf32": 0,
        "sf64": 0, "fl": 0.0, "db": 0.0, "flag": False, "blob": bytearray(b""),
        "kind": "KIND_UNSPECIFIED", "place": None, "counts": [], "stops": [], "tally": {},
        "places_by_no": {}, "card": "visa", "cash": None, "took": None, "note": None,
        "maybe_count": None, "rating": None, "kinds": [], "tip": None,
    }  # fmt: skip


def test_the_schema_comes_from_the_descriptor_with_imports_and_nested_packages() -> None:
    spec = everything_spec()
    schema = spec.event_schema
    # acme.common.v1.Money, imported from a nested package beside the file
    assert (
        schema["cash"].dataType.simpleString() == "struct<currency:string,units:bigint,nanos:int>"
    )
    assert schema["event_time"].dataType.simpleString() == "timestamp"
    assert schema["tally"].dataType.simpleString() == "map<string,bigint>"
    assert schema["u64"].dataType.simpleString() == "decimal(20,0)"
    # presence decides nullability: a proto3 scalar reads its default, never null
    nullable = {f.name for f in schema.fields if f.nullable}
    assert {"card", "cash", "place", "took", "note", "rating", "tip", "event_time"} <= nullable
    assert not {"i32", "id", "counts", "tally", "kind"} & nullable
    # a descriptor set (protoc --descriptor_set_out) gives the same schema
    from kappaplus.codecs.protobuf_schema import descriptor_set

    desc = HERE / ".everything.test.desc"
    desc.write_bytes(descriptor_set(HERE / "everything.proto"))
    try:
        again = DecoderSpec(
            format="protobuf", proto_schema=desc, message="acme.events.v1.Everything",
            event_time="event_time",
        )  # fmt: skip
    finally:
        desc.unlink()
    assert again.event_schema == schema


def ride_spec(version: str = "v1", url: str | None = None) -> DecoderSpec:
    return DecoderSpec(
        format="protobuf",
        proto_schema=EVOLUTION / version / "ride.proto",
        message="rides.v1.Ride",
        event_time="event_time",
        schema_registry_url=url,
    )


def rides(version: str) -> Any:
    return message_classes(EVOLUTION / version / "ride.proto")["rides.v1.Ride"]


def ride(cls: Any, no: int, **fields: Any) -> Any:
    message = cls(id=f"r{no}", **fields)
    message.event_time.FromDatetime(datetime(2024, 3, 1, 12, no, tzinfo=UTC))
    return message


def test_schema_evolution_added_and_removed_fields(spark, kafka_bootstrap: str, new_topic) -> None:  # type: ignore[no-untyped-def]
    old, new = rides("v1"), rides("v2")
    values = [
        ride(old, 1, fare=9.5, zone="soma").SerializeToString(),
        ride(new, 2, zone="mission", city="sf").SerializeToString(),  # no fare; a city
        ride(old, 3, zone="marina").SerializeToString(),  # fare absent
    ]
    topic = new_topic()
    produce(kafka_bootstrap, topic, values)
    good, dead = read(spark, kafka_bootstrap, topic, ride_spec("v1"))
    assert dead == []
    assert [(r["id"], r["fare"], r["zone"]) for r in good] == [
        ("r1", 9.5, "soma"),
        ("r2", None, "mission"),  # the writer removed 'fare': absent, and 'city' skipped
        ("r3", None, "marina"),
    ]
    # the new schema as the reader: the old records' fare is an unknown field, city empty
    good, dead = read(spark, kafka_bootstrap, topic, ride_spec("v2"))
    assert dead == []
    assert [(r["id"], r["city"], r["zone"]) for r in good] == [
        ("r1", "", "soma"),
        ("r2", "sf", "mission"),
        ("r3", "", "marina"),
    ]
    assert "fare" not in good[0]


REGISTERED = {
    1: (EVOLUTION / "v1" / "ride.proto").read_text(),
    2: (EVOLUTION / "v2" / "ride.proto").read_text(),
    3: (EVOLUTION / "two_messages.proto").read_text(),
}


@pytest.fixture()
def registry() -> Iterator[str]:
    """A minimal Schema Registry serving ``GET /schemas/ids/{id}`` for Protobuf schemas."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            parts = self.path.split("?")[0].strip("/").split("/")
            found = None
            if len(parts) == 3 and parts[:2] == ["schemas", "ids"] and parts[2].isdigit():
                found = REGISTERED.get(int(parts[2]))
            if found is None:
                body = json.dumps({"error_code": 40403, "message": "Schema not found"})
                self.send_response(404)
            else:
                body = json.dumps({"schemaType": "PROTOBUF", "schema": found})
                self.send_response(200)
            data = body.encode()
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:  # noqa: N802 - register a schema: its id
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            assert body.get("schemaType") == "PROTOBUF", body
            ids = [i for i, text in REGISTERED.items() if text == body["schema"]]
            schema_id = ids[0] if ids else max(REGISTERED) + 1
            REGISTERED[schema_id] = body["schema"]
            data = json.dumps({"id": schema_id}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def framed(schema_id: int, indexes: bytes, message: Any) -> bytes:
    return b"\x00" + schema_id.to_bytes(4, "big") + indexes + message.SerializeToString()


def test_registry_framed_records_with_two_writer_ids(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic, registry: str
) -> None:
    old, new = rides("v1"), rides("v2")
    values = [
        framed(1, b"\x00", ride(old, 1, fare=3.0, zone="soma")),  # [0] as the single 0
        framed(2, b"\x02\x00", ride(new, 2, zone="mission", city="sf")),  # [0] spelled out
        framed(3, b"\x02\x02", ride(old, 3, fare=4.0, zone="marina")),  # index [1]: Ride
        framed(3, b"\x00", ride(old, 4, zone="x")),  # index [0] is rides.v1.Ping
        framed(7, b"\x00", ride(old, 5, zone="y")),  # id 7: not in the registry
    ]
    topic = new_topic()
    where = produce(kafka_bootstrap, topic, values)
    good, dead = read(spark, kafka_bootstrap, topic, ride_spec("v1", registry))
    assert [(r["id"], r["fare"], r["zone"]) for r in good] == [
        ("r1", 3.0, "soma"),
        ("r2", None, "mission"),
        ("r3", 4.0, "marina"),
    ]
    assert [(d["partition"], d["offset"]) for d in dead] == where[3:]
    assert (
        "schema id 3: the record is a rides.v1.Ping, the job reads rides.v1.Ride"
        in dead[0]["reason"]
    )
    assert dead[1]["reason"] == f"Confluent schema id 7 is not in the Schema Registry {registry}"


def test_rows_encode_to_messages_the_decoder_reads_back(registry: str) -> None:
    """What a Kafka output with format = "protobuf" writes (no Spark needed here)."""
    from kappaplus.codecs import decode_values
    from kappaplus.codecs.protobuf_encode import ProtobufWriter, registered_header

    row = {
        "id": "w1", "event_time": datetime(2024, 3, 1, 12, tzinfo=UTC), "i32": -1,
        "u64": Decimal(2**64 - 1), "kind": "KIND_EATS", "blob": bytearray(b"\x01"),
        "place": {"city": "Oslo", "lat": 1.5, "tags": ["t"]}, "counts": [3, 4],
        "stops": [{"city": "A", "lat": None, "tags": []}], "tally": [("k", 2)],
        "places_by_no": {5: {"city": "Rome", "lat": 0.0, "tags": []}}, "cash": None,
        "took": 1_500_000, "note": "n", "maybe_count": 0, "rating": None, "kinds": ["KIND_RIDE"],
        "tip": 0.5,
    }  # fmt: skip
    spec = everything_spec()
    writer = ProtobufWriter(HERE / "everything.proto", "acme.events.v1.Everything")
    (back,) = decode_values(spec, [writer.encode(row)])
    assert isinstance(back, dict), back
    assert back["event_time"] == 1_709_294_400_000_000
    assert (back["kind"], back["u64"], back["blob"]) == ("KIND_EATS", 2**64 - 1, b"\x01")
    assert back["place"] == {"city": "Oslo", "lat": 1.5, "tags": ["t"]}
    assert back["stops"] == [{"city": "A", "lat": 0.0, "tags": []}]
    assert (back["tally"], back["places_by_no"][0][0]) == ([("k", 2)], 5)
    assert (back["took"], back["note"], back["maybe_count"], back["tip"]) == (
        1_500_000,
        "n",
        0,
        0.5,
    )
    assert (back["cash"], back["rating"], back["kinds"]) == (None, None, ["KIND_RIDE"])
    with pytest.raises(Exception, match="not a value of acme.events.v1.Everything.Kind"):
        writer.encode({**row, "kind": "KIND_NOPE"})
    with pytest.raises(ConfigError, match="columns not in acme.events.v1.Everything"):
        writer.check(["id", "nope"], "outputs.o.kafka.message")

    # with a registry: the .proto registered, values framed with its id, read back framed
    ride = EVOLUTION / "v1" / "ride.proto"
    header = registered_header(ride, "rides.v1.Ride", registry, "rides-out")
    assert header[0] == 0 and header[5:] == b"\x00"
    framed_writer = ProtobufWriter(ride, "rides.v1.Ride", header)
    value = framed_writer.encode({"id": "x", "event_time": datetime(2024, 3, 1, tzinfo=UTC)})
    (read_back,) = decode_values(ride_spec("v1", registry), [value])
    assert isinstance(read_back, dict) and read_back["id"] == "x", read_back


def test_corrupt_bytes_are_dead_letters_with_reasons_and_coordinates(  # type: ignore[no-untyped-def]
    spark, kafka_bootstrap: str, new_topic
) -> None:
    old = rides("v1")
    good_one = ride(old, 1, fare=1.0, zone="soma").SerializeToString()
    no_time = old(id="r9", zone="x").SerializeToString()
    values: list[bytes | None] = [
        good_one,
        good_one[:-3],  # truncated inside the timestamp
        b"\x08\x01" + good_one[good_one.index(b"\x12") :],  # 'id' as a varint
        b"\xff\xff\xff\xff",  # not a message at all
        b"\x0f\x01",  # wire type 7
        None,  # a tombstone
        no_time,  # parses, but no event time
        b"\x00\x00\x01",  # a Confluent frame cut short
    ]
    topic = new_topic()
    where = produce(kafka_bootstrap, topic, values)
    good, dead = read(spark, kafka_bootstrap, topic, ride_spec())
    assert [r["id"] for r in good] == ["r1"]
    assert len(dead) == len(values) - 1  # nothing dropped, nothing as a silent null row
    assert [(d["topic"], d["partition"], d["offset"]) for d in dead] == [
        (topic, p, o) for p, o in where[1:]
    ]
    assert [bytes(d["value"]) if d["value"] is not None else None for d in dead] == values[1:]
    reasons = [d["reason"] for d in dead]
    assert reasons[0].startswith("Protobuf decode failed: ") and "truncated" in reasons[0]
    assert "field 'id' (number 1) has wire type 0" in reasons[1]
    assert "not one rides.v1.Ride message" in reasons[2]
    assert "invalid wire type 7 (field 1) at byte 0" in reasons[3]
    assert reasons[4] == "value is null (tombstone record)"
    assert reasons[5] == "event time 'event_time' is null"
    assert reasons[6].startswith("not Confluent wire format: 3 bytes")


def test_kappa_check_resolves_the_job_against_the_message(spark) -> None:  # type: ignore[no-untyped-def]
    from kappaplus.config import KafkaInput
    from kappaplus.examples.generate import RIDER_EVENT_DDL
    from kappaplus.examples.rides_protobuf import kafka_keys
    from kappaplus.jobs import InputSpec
    from kappaplus.runtime.binding.unify import kafka_resolution

    spec = InputSpec("rider_events", RIDER_EVENT_DDL, "event_time")
    kafka = KafkaInput(topic="t", bootstrap_servers="127.0.0.1:9092", **kafka_keys())
    resolution = kafka_resolution(spark, spec, kafka)
    assert resolution.mismatches == []
    assert [c.column for c in resolution.columns] == spec.struct_type().names
    # a declared column the message lacks is named, with the message's fields
    wider = InputSpec("rider_events", RIDER_EVENT_DDL + ", fare DOUBLE", "event_time")
    with pytest.raises(
        ConfigError,
        match=r"kafka\.columns.*lacks the job's columns fare \(it has event_id, .*app_version\)",
    ):
        kafka_resolution(spark, wider, kafka)
    # a declared type the message does not have is a mismatch kappa check shows
    typed = InputSpec(
        "rider_events", RIDER_EVENT_DDL.replace("area STRING", "area INT"), "event_time"
    )
    assert any("area" in m for m in kafka_resolution(spark, typed, kafka).mismatches)


JOB = "kappaplus.examples.sessionization:JOB"


@pytest.mark.parametrize(
    ("schema_file", "message", "problem"),
    [
        ("rides", "rides.v1.Nope", "no such message in"),
        ("bad/broken.proto", "bad.v1.Broken", 'does not compile: broken.proto:7:3: Expected ";"'),
        ("bad/orphan.proto", "bad.v1.Orphan", "nowhere/missing.proto: File not found"),
    ],
)
def test_bad_schemas_are_one_line_naming_the_file_before_any_query(
    tmp_path: Path, schema_file: str, message: str, problem: str
) -> None:
    from kappaplus.cli import app
    from kappaplus.examples.rides_protobuf import RIDES_PROTO

    path = RIDES_PROTO if schema_file == "rides" else HERE / schema_file
    config = tmp_path / "job.toml"
    config.write_text(
        f'job = "{JOB}"\n'
        "[inputs.rider_events.kafka]\n"
        'topic = "t"\nbootstrap_servers = "127.0.0.1:9"\nformat = "protobuf"\n'
        f'schema_file = "{path}"\nmessage = "{message}"\n'
        "[outputs.sessions.hive]\n"
        'table = "o"\n'
    )
    result = CliRunner().invoke(
        app, ["run", "sessionization", "-c", str(config), "-m", "stream"], env={"COLUMNS": "400"}
    )
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert "inputs.rider_events.kafka." in lines[0] and path.name in lines[0]
    assert problem in lines[0]
    assert "Traceback" not in result.output and "Spark" not in result.output


def test_bad_bindings_name_the_key() -> None:
    from kappaplus.config import KafkaInput, KafkaOutput

    with pytest.raises(ValueError, match="needs 'message'"):
        KafkaInput(topic="t", bootstrap_servers="b:1", format="protobuf", schema_file="x.proto")
    with pytest.raises(ValueError, match="'message' is for format 'protobuf' only"):
        KafkaOutput(topic="t", bootstrap_servers="b:1", message="a.B")
    with pytest.raises(ConfigError, match="schema_file"):
        DecoderSpec(format="protobuf", message="a.B", event_time="ts")
    with pytest.raises(ConfigError, match="must be a TIMESTAMP column"):
        DecoderSpec(
            format="protobuf", proto_schema=EVOLUTION / "v1" / "ride.proto",
            message="rides.v1.Ride", event_time="zone",
        )  # fmt: skip


def test_an_integer_event_time_with_a_unit() -> None:
    from kappaplus.codecs import decode_values

    spec = DecoderSpec(
        format="protobuf",
        proto_schema=HERE / "epoch.proto",
        message="acme.events.v1.Tick",
        event_time="sent_at_ms",
        event_time_unit="ms",
    )
    assert spec.event_schema["sent_at_ms"].dataType.simpleString() == "timestamp"
    tick = message_classes(HERE / "epoch.proto")["acme.events.v1.Tick"]
    (row,) = decode_values(spec, [tick(id="a", sent_at_ms=1_709_294_400_123).SerializeToString()])
    assert row == {"id": "a", "sent_at_ms": 1_709_294_400_123_000}
    with pytest.raises(ConfigError, match="a unit is for an integer field"):
        DecoderSpec(
            format="protobuf", proto_schema=EVOLUTION / "v1" / "ride.proto",
            message="rides.v1.Ride", event_time="event_time", event_time_unit="ms",
        )  # fmt: skip
