"""Kafka source throughput vs a raw confluent-kafka consume loop (same topic, machine and run).

    .venv/bin/python bench/bench_kafka.py [--records 1000000] [--partitions 2] [--value-bytes 100]
                                          [--bootstrap HOST:PORT] [--no-docs]

Starts an embedded broker (unless ``--bootstrap``), produces the records with a batching
producer, then measures:

- raw: one confluent-kafka Consumer assigned to every partition, reading from offset 0 until all
  records were seen (touching each value);
- source: ``kappa_kafka`` with ``Trigger.AvailableNow`` into the ``noop`` sink, rows counted from
  the query progress; the time is the whole query (planning, offset probes, Spark tasks).

Both run once as warm-up on a small topic first. Prints rows/s of each and the ratio, and
rewrites the "Kafka source" section of ``docs/benchmarks.md`` (other sections are kept).
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_kafka:start -->", "<!-- bench_kafka:end -->"


def produce(bootstrap: str, topic: str, records: int, partitions: int, value_bytes: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 50,
            "batch.num.messages": 10_000,
            "compression.type": "none",
            "queue.buffering.max.messages": 1_000_000,
        }
    )
    payload = b"x" * max(0, value_bytes - 8)
    started = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(
                    topic, value=b"%08d" % (i % 100_000_000) + payload, partition=i % partitions
                )
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("producer could not deliver every record")
    return time.perf_counter() - started


def raw_consume(bootstrap: str, topic: str, records: int, partitions: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "bench-raw",
            "enable.auto.commit": False,
            "fetch.max.bytes": 64 * 1024 * 1024,
            "max.partition.fetch.bytes": 16 * 1024 * 1024,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    size = 0
    started = time.perf_counter()
    while seen < records:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
                size += len(message.value())
    elapsed = time.perf_counter() - started
    consumer.close()
    assert size > 0
    return elapsed


def source_consume(spark, bootstrap: str, topic: str, records: int) -> float:  # type: ignore[no-untyped-def]
    from kappaplus.connectors.kafka import read_kafka_stream

    checkpoint = tempfile.mkdtemp(prefix="bench-kafka-ckpt-")
    started = time.perf_counter()
    query = (
        read_kafka_stream(spark, bootstrap=bootstrap, subscribe=topic, startingOffsets="earliest")
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


def write_section(text: str) -> None:
    DOC.parent.mkdir(parents=True, exist_ok=True)
    current = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    section = f"{START}\n{text.rstrip()}\n{END}"
    if START in current and END in current:
        current = re.sub(
            re.escape(START) + r".*?" + re.escape(END), lambda _: section, current, flags=re.S
        )
    else:
        current = current.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--partitions", type=int, default=2)
    parser.add_argument("--value-bytes", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bootstrap", help="use this broker instead of an embedded one")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args()

    home = Path(tempfile.mkdtemp(prefix="bench-kafka-"))
    os.environ.setdefault("KAPPA_HOME", str(home))
    broker = None
    bootstrap = args.bootstrap
    if bootstrap is None:
        broker = EmbeddedBroker(home, port=free_port())
        bootstrap = broker.start()
    try:
        from kappaplus.session import create_session

        spark = create_session("bench-kafka", home=home, hive=False)
        stamp = int(time.time())
        warm, topic = f"bench-warm-{stamp}", f"bench-{stamp}"
        create_topic(bootstrap, warm, args.partitions)
        create_topic(bootstrap, topic, args.partitions)
        produce(bootstrap, warm, 20_000, args.partitions, args.value_bytes)
        raw_consume(bootstrap, warm, 20_000, args.partitions)
        source_consume(spark, bootstrap, warm, 20_000)

        produce_s = produce(bootstrap, topic, args.records, args.partitions, args.value_bytes)
        raw_runs, source_runs = [], []
        for _ in range(args.rounds):  # alternate, so load from elsewhere hits both alike
            raw_runs.append(raw_consume(bootstrap, topic, args.records, args.partitions))
            source_runs.append(source_consume(spark, bootstrap, topic, args.records))
        raw_s, source_s = statistics.median(raw_runs), statistics.median(source_runs)
        raw_rate, source_rate = args.records / raw_s, args.records / source_s
        ratio = source_rate / raw_rate
        best_ratio = min(raw_runs) / min(source_runs)
        lines = [
            "## Kafka source (`bench/bench_kafka.py`)",
            "",
            f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
            f"{platform.machine()} with {os.cpu_count()} CPUs (shared), Spark master "
            f"`{spark.sparkContext.master}`, broker "
            f"{'embedded tansu (memory)' if broker else bootstrap}: {args.records:,} records "
            f"of {args.value_bytes} bytes in {args.partitions} partitions "
            f"(produced in {produce_s:.1f} s).",
            "",
            "| reader | seconds | rows/s |",
            "|---|---:|---:|",
            f"| raw confluent-kafka consume loop (1 consumer) | {raw_s:.2f} | {raw_rate:,.0f} |",
            f"| `kappa_kafka` AvailableNow -> noop (whole query) | {source_s:.2f} | "
            f"{source_rate:,.0f} |",
            "",
            f"Median of {args.rounds} alternating rounds; all runs (s): raw "
            f"{', '.join(f'{x:.2f}' for x in raw_runs)}; source "
            f"{', '.join(f'{x:.2f}' for x in source_runs)}.",
            "",
            f"Ratio source / raw: **{ratio:.0%}** (medians; best run vs best run {best_ratio:.0%}; "
            "goal >= 50%).",
            "",
            "The source time includes query start, offset probes and planning; the raw loop is "
            "only the fetch loop. Both read the same topic in the same run after a warm-up.",
        ]
        text = "\n".join(lines)
        print(text)
        if not args.no_docs:
            write_section(text)
            print(f"\nwrote {DOC}")
        spark.stop()
    finally:
        if broker is not None:
            broker.stop()


if __name__ == "__main__":
    main()
