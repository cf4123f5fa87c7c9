"""Kafka source + Protobuf decoding vs a plain consume + ``ParseFromString`` + Arrow loop,
beside JSON and Avro over the same events.

    .venv/bin/python bench/bench_protobuf.py [--records 500000] [--partitions 2] [--rounds 3]
                                             [--write-doc]

Starts an embedded broker and produces the same rider events three times: as Protobuf
messages, as JSON and as plain Avro. Then, in alternating rounds after a warm-up, on the
same topics:

- loop: one confluent-kafka Consumer over every partition; per consumed batch each value
  ``FromString`` (the upb-backed runtime), the fields gathered into columns and made an
  Arrow record batch (the timestamp as microseconds): what a hand-written decoder does;
- the same loop for JSON (``json.loads``) and Avro (``fastavro.schemaless_reader``);
- source + decode: ``kappa_kafka`` (AvailableNow) -> ``decode_kafka`` (the job's decoder
  for the format, with its dead-letter reasons) -> ``good_events`` -> ``noop`` sink, for
  each of the three formats; the time is the whole query (start, offsets, planning, tasks);
- source alone: ``kappa_kafka`` -> ``noop`` (no decoding): the ceiling of the above.

Prints rows/s of each and the ratios (goal: Protobuf source + decode >= 80% of its loop).
With ``--write-doc`` rewrites the figures block of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from doc_blocks import replace_block  # noqa: E402

from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port  # noqa: E402

EVENT_DDL = "event_id STRING, rider_id STRING, event_type STRING, fare DOUBLE, event_time TIMESTAMP"
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_protobuf:start -->", "<!-- bench_protobuf:end -->"
PROTO = """syntax = "proto3";
package bench.v1;
import "google/protobuf/timestamp.proto";
message Event {
  string event_id = 1;
  string rider_id = 2;
  string event_type = 3;
  double fare = 4;
  google.protobuf.Timestamp event_time = 5;
}
"""
AVSC = {
    "type": "record",
    "name": "Event",
    "fields": [
        {"name": "event_id", "type": "string"},
        {"name": "rider_id", "type": "string"},
        {"name": "event_type", "type": "string"},
        {"name": "fare", "type": "double"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-micros"}},
    ],
}
FORMATS = ("protobuf", "json", "avro")
LABELS = {
    "loop-protobuf": "loop: consume + `FromString` + columns -> Arrow (1 consumer)",
    "loop-json": "loop: consume + `json.loads` + columns -> Arrow (1 consumer)",
    "loop-avro": "loop: consume + `fastavro.schemaless_reader` + columns -> Arrow (1 consumer)",
    "source-protobuf": '`kappa_kafka` -> `decode_kafka` (`format="protobuf"`) -> `good_events`',
    "source-json": '`kappa_kafka` -> `decode_kafka` (`format="json"`) -> `good_events`',
    "source-avro": '`kappa_kafka` -> `decode_kafka` (`format="avro"`) -> `good_events`',
    "source": "`kappa_kafka` -> noop, no decoding (Protobuf topic)",
}
BASE = 1_709_251_200


def event(i: int) -> dict[str, Any]:
    return {
        "event_id": f"e{i}",
        "rider_id": f"r{i % 150}",
        "event_type": "app_open",
        "fare": i % 97 / 4,
        "event_time": (BASE + i) * 1_000_000,
    }


class Codecs:
    """Encoders for producing and the loops' decoders, per format."""

    def __init__(self, work: Path) -> None:
        import fastavro
        from google.protobuf import message_factory

        from kappaplus.codecs.protobuf_schema import descriptor_set, message_descriptor

        self.proto = work / "event.proto"
        self.proto.write_text(PROTO)
        self.avsc = work / "event.avsc"
        self.avsc.write_text(json.dumps(AVSC))
        descriptor = message_descriptor(descriptor_set(self.proto), "bench.v1.Event", "bench")
        self.message = message_factory.GetMessageClass(descriptor)
        self.avro = fastavro.parse_schema(AVSC)

    def encode(self, fmt: str, i: int) -> bytes:
        values = event(i)
        if fmt == "protobuf":
            micros = values.pop("event_time")
            message = self.message(**values)
            message.event_time.FromMicroseconds(micros)
            return bytes(message.SerializeToString())
        if fmt == "json":
            moment = datetime.fromtimestamp(values["event_time"] / 1e6, UTC)
            return json.dumps({**values, "event_time": moment.isoformat()}).encode()
        import fastavro

        out = io.BytesIO()
        fastavro.schemaless_writer(out, self.avro, values)
        return out.getvalue()

    def spec(self, fmt: str) -> Any:
        from kappaplus.codecs import DecoderSpec

        if fmt == "protobuf":
            return DecoderSpec(
                format="protobuf",
                proto_schema=self.proto,
                message="bench.v1.Event",
                event_time="event_time",
            )
        if fmt == "json":
            return DecoderSpec(format="json", schema=EVENT_DDL, event_time="event_time")
        return DecoderSpec(format="avro", avro_schema=self.avsc, event_time="event_time")

    def columns(self, fmt: str) -> Callable[[list[bytes]], Any]:
        """The loop's decoder: values -> an Arrow record batch of the event columns."""
        import pyarrow as pa

        names = ["event_id", "rider_id", "event_type", "fare"]
        schema = pa.schema(
            [
                *(pa.field(n, pa.string()) for n in names[:3]),
                pa.field("fare", pa.float64()),
                pa.field("event_time", pa.timestamp("us", tz="UTC")),
            ]
        )
        if fmt == "protobuf":
            parse = self.message.FromString

            def protobuf(values: list[bytes]) -> Any:
                messages = [parse(v) for v in values]
                cols = [[getattr(m, n) for m in messages] for n in names]
                times = [
                    m.event_time.seconds * 1_000_000 + m.event_time.nanos // 1000 for m in messages
                ]
                return pa.RecordBatch.from_arrays(
                    [pa.array(c, t.type) for c, t in zip([*cols, times], schema, strict=True)],
                    schema=schema,
                )

            return protobuf
        if fmt == "json":

            def from_json(values: list[bytes]) -> Any:
                objects = [json.loads(v) for v in values]
                cols = [[o[n] for o in objects] for n in names]
                times = [datetime.fromisoformat(o["event_time"]) for o in objects]
                return pa.RecordBatch.from_arrays(
                    [pa.array(c, t.type) for c, t in zip([*cols, times], schema, strict=True)],
                    schema=schema,
                )

            return from_json
        import fastavro

        avro = self.avro

        def from_avro(values: list[bytes]) -> Any:
            records = [fastavro.schemaless_reader(io.BytesIO(v), avro) for v in values]
            cols = [[r[n] for r in records] for n in [*names, "event_time"]]
            return pa.RecordBatch.from_arrays(
                [pa.array(c, t.type) for c, t in zip(cols, schema, strict=True)], schema=schema
            )

        return from_avro


def produce(bootstrap: str, topic: str, values: Callable[[int], bytes], n: int, parts: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(n):
        while True:
            try:
                producer.produce(topic, value=values(i), partition=i % parts)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("producer could not deliver every record")


def loop(
    bootstrap: str, topic: str, n: int, parts: int, decode: Callable[[list[bytes]], Any]
) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-protobuf", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    seen = 0
    started = time.perf_counter()
    while seen < n:
        batch = [m.value() for m in consumer.consume(10_000, 1.0) if m.error() is None]
        if batch:
            seen += decode(batch).num_rows
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def source_query(spark: Any, bootstrap: str, topic: str, n: int, spec: Any) -> float:
    """One AvailableNow query over the topic (``spec`` None: no decoding); its seconds."""
    from kappaplus.codecs import decode_kafka, good_events
    from kappaplus.connectors.kafka import read_kafka_stream

    checkpoint = tempfile.mkdtemp(prefix="bench-protobuf-ckpt-")
    started = time.perf_counter()
    raw = read_kafka_stream(spark, bootstrap=bootstrap, subscribe=topic, startingOffsets="earliest")
    out = raw if spec is None else good_events(decode_kafka(raw, spec))
    query = (
        out.writeStream.format("noop")
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - started
    if query.exception():
        raise SystemExit(f"query failed: {query.exception()}")
    rows = sum(p["numInputRows"] for p in query.recentProgress)
    if rows != n:
        raise SystemExit(f"source read {rows} rows, expected {n}")
    return elapsed


def one_round(
    spark: Any, bootstrap: str, topics: dict[str, str], n: int, parts: int, codecs: Codecs
) -> dict[str, float]:
    times = {}
    for fmt in FORMATS:
        times[f"loop-{fmt}"] = loop(bootstrap, topics[fmt], n, parts, codecs.columns(fmt))
        times[f"source-{fmt}"] = source_query(spark, bootstrap, topics[fmt], n, codecs.spec(fmt))
    times["source"] = source_query(spark, bootstrap, topics["protobuf"], n, None)
    return times


def report(args: argparse.Namespace, runs: dict[str, list[float]], context: dict[str, Any]) -> str:
    medians = {way: statistics.median(values) for way, values in runs.items()}
    rate = {way: args.records / seconds for way, seconds in medians.items()}
    ratio = rate["source-protobuf"] / rate["loop-protobuf"]
    lines = [
        "## Kafka source + Protobuf decoding (`bench/bench_protobuf.py`, `make bench`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
        f"{platform.machine()} with {os.cpu_count()} CPUs shared with other work (load average "
        f"{context['load_before']:.1f} before, {context['load_after']:.1f} after), Spark master "
        f"`{context['master']}`, protobuf runtime `{context['runtime']}`, broker embedded: "
        f"{args.records:,} rider events per topic in {args.partitions} partitions, the same "
        f"events as Protobuf (about {context['bytes']['protobuf']:.0f} bytes), JSON "
        f"({context['bytes']['json']:.0f}) and Avro ({context['bytes']['avro']:.0f}); event "
        f"schema `{EVENT_DDL}`.",
        "",
        "| way | seconds | rows/s |",
        "|---|---:|---:|",
        *[f"| {LABELS[w]} | {medians[w]:.2f} | {rate[w]:,.0f} |" for w in LABELS],
        "",
        f"Median of {args.rounds} alternating rounds after a warm-up; all runs (s): "
        + "; ".join(f"{w} " + ", ".join(f"{v:.2f}" for v in vs) for w, vs in runs.items())
        + ".",
        "",
        f"Protobuf source + decode / its loop: **{ratio:.0%}** (goal >= 80%"
        f"{': met' if ratio >= 0.8 else ': missed'}); JSON: "
        f"{rate['source-json'] / rate['loop-json']:.0%} of its loop; Avro: "
        f"{rate['source-avro'] / rate['loop-avro']:.0%} of its loop. Source + decode, "
        f"Protobuf against JSON: {rate['source-protobuf'] / rate['source-json']:.2f}x, against "
        f"Avro: {rate['source-protobuf'] / rate['source-avro']:.2f}x; source alone / Protobuf "
        f"loop: {rate['source'] / rate['loop-protobuf']:.0%} (the ceiling of any decoder).",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()

    from google.protobuf.internal import api_implementation

    home = Path(tempfile.mkdtemp(prefix="bench-protobuf-"))
    os.environ.setdefault("KAPPA_HOME", str(home))
    codecs = Codecs(home)
    broker = EmbeddedBroker(home, port=free_port())
    bootstrap = broker.start()
    try:
        from kappaplus.session import create_session

        spark = create_session("bench-protobuf", home=home, hive=False)
        load_before = os.getloadavg()[0]
        stamp = int(time.time())
        warm = {fmt: f"pb-warm-{fmt}-{stamp}" for fmt in FORMATS}
        topics = {fmt: f"pb-{fmt}-{stamp}" for fmt in FORMATS}
        for fmt in FORMATS:
            for name, n in ((warm[fmt], 5_000), (topics[fmt], args.records)):
                create_topic(bootstrap, name, args.partitions)
                produce(bootstrap, name, lambda i, f=fmt: codecs.encode(f, i), n, args.partitions)
        one_round(spark, bootstrap, warm, 5_000, args.partitions, codecs)
        runs: dict[str, list[float]] = {way: [] for way in LABELS}
        for _ in range(args.rounds):
            for way, seconds in one_round(
                spark, bootstrap, topics, args.records, args.partitions, codecs
            ).items():
                runs[way].append(seconds)
        context = {
            "load_before": load_before,
            "load_after": os.getloadavg()[0],
            "master": spark.sparkContext.master,
            "runtime": api_implementation.Type(),
            "bytes": {
                f: statistics.mean(len(codecs.encode(f, i)) for i in range(1000)) for f in FORMATS
            },
        }
        spark.stop()
        text = report(args, runs, context)
        print(text)
        if args.write_doc:
            write_doc(text)
    finally:
        broker.stop()


def write_doc(text: str) -> None:
    """Replace the Protobuf block of ``docs/benchmarks.md`` (or append it)."""
    replace_block(DOC, START, END, text)
    print(f"\nwrote {DOC}")


if __name__ == "__main__":
    main()
