"""Kafka source + JSON decoding vs a raw confluent-kafka consume loop + ``json.loads``.

    .venv/bin/python bench/bench_codec.py [--records 200000] [--partitions 2] [--rounds 3]

Starts an embedded broker, produces JSON rider events, then measures on the same topic, in
alternating rounds after a warm-up:

- raw: one confluent-kafka Consumer over every partition, ``json.loads`` of each value;
- source + decode: ``kappa_kafka`` (AvailableNow) -> ``decode_kafka`` (the job's typed event
  schema, per-field reasons for bad records) -> ``good_events`` -> ``noop`` sink; the time is
  the whole query (start, offset probes, planning, Spark tasks).

Prints rows/s of each and the ratio (goal: source + decode >= 80% of raw).
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

from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port  # noqa: E402

EVENT_DDL = "event_id STRING, rider_id STRING, event_type STRING, fare DOUBLE, event_time TIMESTAMP"


def produce(bootstrap: str, topic: str, records: int, partitions: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50})
    base = 1_709_251_200
    for i in range(records):
        value = json.dumps(
            {
                "event_id": f"e{i}",
                "rider_id": f"r{i % 150}",
                "event_type": "app_open",
                "fare": i % 97 / 4,
                "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(base + i)),
            }
        ).encode()
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


def source_decode(spark, bootstrap: str, topic: str, records: int) -> float:  # type: ignore[no-untyped-def]
    from kappaplus.codecs import DecoderSpec, decode_kafka, good_events
    from kappaplus.connectors.kafka import read_kafka_stream

    spec = DecoderSpec(format="json", schema=EVENT_DDL, event_time="event_time")
    checkpoint = tempfile.mkdtemp(prefix="bench-codec-ckpt-")
    started = time.perf_counter()
    raw = read_kafka_stream(spark, bootstrap=bootstrap, subscribe=topic, startingOffsets="earliest")
    query = (
        good_events(decode_kafka(raw, spec))
        .writeStream.format("noop")
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
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-codec-"))
    os.environ.setdefault("KAPPA_HOME", str(home))
    broker = EmbeddedBroker(home, port=free_port())
    bootstrap = broker.start()
    try:
        from kappaplus.session import create_session

        spark = create_session("bench-codec", home=home, hive=False)
        stamp = int(time.time())
        warm, topic = f"codec-warm-{stamp}", f"codec-{stamp}"
        create_topic(bootstrap, warm, args.partitions)
        create_topic(bootstrap, topic, args.partitions)
        produce(bootstrap, warm, 5_000, args.partitions)
        raw_consume(bootstrap, warm, 5_000, args.partitions)
        source_decode(spark, bootstrap, warm, 5_000)
        produce(bootstrap, topic, args.records, args.partitions)
        raw_runs, source_runs = [], []
        for _ in range(args.rounds):
            raw_runs.append(raw_consume(bootstrap, topic, args.records, args.partitions))
            source_runs.append(source_decode(spark, bootstrap, topic, args.records))
        raw_rate = args.records / statistics.median(raw_runs)
        source_rate = args.records / statistics.median(source_runs)
        print(
            f"{platform.machine()}, {os.cpu_count()} CPUs (shared), load "
            f"{os.getloadavg()[0]:.1f}, master {spark.sparkContext.master}, "
            f"{args.records:,} JSON records in {args.partitions} partitions"
        )
        print(f"raw consume loop + json.loads: {raw_rate:,.0f} rows/s  runs {raw_runs}")
        print(f"kappa_kafka + decode_kafka: {source_rate:,.0f} rows/s  runs {source_runs}")
        print(f"ratio source+decode / raw: {source_rate / raw_rate:.0%} (goal >= 80%)")
        spark.stop()
    finally:
        broker.stop()


if __name__ == "__main__":
    main()
