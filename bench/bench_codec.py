"""Kafka source + JSON decoding vs a raw confluent-kafka consume loop + ``json.loads``.

    .venv/bin/python bench/bench_codec.py [--records 200000] [--partitions 2] [--rounds 3]
                                          [--write-doc]

Starts an embedded broker, produces JSON rider events, then measures on the same topic, in
alternating rounds after a warm-up:

- raw: one confluent-kafka Consumer over every partition, ``json.loads`` of each value;
- source + decode: ``kappa_kafka`` (AvailableNow) -> ``decode_kafka`` (the job's typed event
  schema, per-field reasons for bad records; every record through the Python decoder, the
  default) -> ``good_events`` -> ``noop`` sink; the time is the whole query (start, offset
  probes, planning, Spark tasks);
- the same with ``json_decoder="jvm"``: Spark decodes the records it can vouch for, Python
  only the others (:mod:`kappaplus.codecs.fastjson`);
- source alone: ``kappa_kafka`` -> ``noop`` (no decoding): the ceiling of the two above.

Prints rows/s of each, the ratio (goal: source + decode >= 80% of raw) and where the
source + decode query's time goes (``durationMs`` per phase, summed over its micro-batches).
With ``--write-doc`` rewrites the figures block of ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from doc_blocks import replace_block  # noqa: E402

from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port  # noqa: E402

EVENT_DDL = "event_id STRING, rider_id STRING, event_type STRING, fare DOUBLE, event_time TIMESTAMP"
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_codec:start -->", "<!-- bench_codec:end -->"
WAYS = ("python", "jvm", "source")
LABELS = {
    "raw": "raw confluent-kafka consume loop + `json.loads` (1 consumer)",
    "python": "`kappa_kafka` -> `decode_kafka` (default: Python decoder) -> `good_events` -> noop",
    "jvm": '`kappa_kafka` -> `decode_kafka` (`json_decoder="jvm"`) -> `good_events` -> noop',
    "source": "`kappa_kafka` -> noop, no decoding",
}


def event_value(i: int) -> bytes:
    base = 1_709_251_200
    return json.dumps(
        {
            "event_id": f"e{i}",
            "rider_id": f"r{i % 150}",
            "event_type": "app_open",
            "fare": i % 97 / 4,
            "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i)),
        }
    ).encode()


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    for i in range(records):
        value = event_value(i)
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("producer could not deliver every record")


def raw_consume(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "bench-codec", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    started = time.perf_counter()
    while seen < records:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                json.loads(message.value())
                seen += 1
    elapsed = time.perf_counter() - started
    consumer.close()
    return elapsed


def source_query(spark, bootstrap: str, topic: str, records: int, way: str):  # type: ignore[no-untyped-def]
    """One AvailableNow query over the topic; (seconds, durationMs summed per phase)."""
    from kappaplus.codecs import DecoderSpec, decode_kafka, good_events
    from kappaplus.connectors.kafka import read_kafka_stream

    decoder = "jvm" if way == "jvm" else "python"
    spec = DecoderSpec(
        format="json", schema=EVENT_DDL, event_time="event_time", json_decoder=decoder
    )
    checkpoint = tempfile.mkdtemp(prefix="bench-codec-ckpt-")
    started = time.perf_counter()
    raw = read_kafka_stream(spark, bootstrap=bootstrap, subscribe=topic, startingOffsets="earliest")
    out = raw if way == "source" else good_events(decode_kafka(raw, spec))
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
    if rows != records:
        raise SystemExit(f"source read {rows} rows, expected {records}")
    phases: dict[str, float] = {}
    for progress in query.recentProgress:
        for phase, ms in progress.get("durationMs", {}).items():
            phases[phase] = phases.get(phase, 0.0) + ms / 1000
    return elapsed, phases


def write_doc(text: str) -> None:
    replace_block(DOC, START, END, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write-doc", action="store_true")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-codec-"))
    os.environ.setdefault("KAPPA_HOME", str(home))
    broker = EmbeddedBroker(home, port=free_port())
    bootstrap = broker.start()
    try:
        from kappaplus.session import create_session

        spark = create_session("bench-codec", home=home, hive=False)
        load_before = os.getloadavg()[0]
        stamp = int(time.time())
        warm, topic = f"codec-warm-{stamp}", f"codec-{stamp}"
        create_topic(bootstrap, warm, args.partitions)
        create_topic(bootstrap, topic, args.partitions)
        produce(bootstrap, warm, 5_000, args.partitions)
        raw_consume(bootstrap, warm, 5_000, args.partitions)
        for way in WAYS:
            source_query(spark, bootstrap, warm, 5_000, way)
        produce(bootstrap, topic, args.records, args.partitions)
        runs: dict[str, list[float]] = {way: [] for way in ("raw", *WAYS)}
        phases: dict[tuple[str, str], float] = {}
        for _ in range(args.rounds):
            runs["raw"].append(raw_consume(bootstrap, topic, args.records, args.partitions))
            for way in WAYS:
                seconds, spent = source_query(spark, bootstrap, topic, args.records, way)
                runs[way].append(seconds)
                for phase, value in spent.items():
                    key = (way, phase)
                    phases[key] = phases.get(key, 0.0) + value / args.rounds
        medians = {way: statistics.median(values) for way, values in runs.items()}
        rate = {way: args.records / seconds for way, seconds in medians.items()}
        load_after = os.getloadavg()[0]
        master = spark.sparkContext.master
        spark.stop()
        ratio = rate["python"] / rate["raw"]
        record_bytes = statistics.mean(len(event_value(i)) for i in range(1000))
        lines = [
            "## Kafka source + JSON decoding (`bench/bench_codec.py`)",
            "",
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{platform.machine()} with {os.cpu_count()} CPUs shared with other work (load "
            f"average {load_before:.1f} before, {load_after:.1f} after), Spark master "
            f"`{master}`, broker embedded: {args.records:,} JSON records of "
            f"about {record_bytes:.0f} bytes in {args.partitions} partitions, event schema "
            f"`{EVENT_DDL}`.",
            "",
            "| way | seconds | rows/s |",
            "|---|---:|---:|",
            *[
                f"| {LABELS[way]} | {medians[way]:.2f} | {rate[way]:,.0f} |"
                for way in ("raw", *WAYS)
            ],
            "",
            f"Median of {args.rounds} alternating rounds after a warm-up; all runs (s): "
            + "; ".join(
                f"{way} " + ", ".join(f"{v:.2f}" for v in values) for way, values in runs.items()
            )
            + ".",
            "",
            f"Ratio source + decode (default) / raw: **{ratio:.0%}** (goal >= 80%"
            f'{": met" if ratio >= 0.8 else ": missed"}); with `json_decoder="jvm"`: '
            f"**{rate['jvm'] / rate['raw']:.0%}**; source alone / raw: "
            f"{rate['source'] / rate['raw']:.0%} (the ceiling of any decoder); "
            f"JVM / Python decoder: {rate['jvm'] / rate['python']:.2f}x.",
            "",
            "Where each query's time goes (mean per query of `durationMs` summed over its "
            "micro-batches):",
            "",
            *[
                f"- {way}: "
                + " | ".join(
                    f"{phase} {value:.2f} s"
                    for (w, phase), value in sorted(phases.items(), key=lambda kv: -kv[1])
                    if w == way
                )
                for way in WAYS
            ],
        ]
        print("\n".join(lines))
        if args.write_doc:
            write_doc("\n".join(lines))
            print(f"\nwrote {DOC}")
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
