"""The stream's end probe against the embedded broker as its topic grows (no Spark).

    .venv/bin/python bench/bench_end_probe.py [--rate 11000] [--seconds 130] [--every 5]

Starts an embedded broker, sends ``--rate`` records/s to a 4-partition topic from a paced
producer thread, and every ``--every`` seconds asks what a stream's ``latestOffset`` asks
(:class:`kappaplus.connectors.kafka.offsets.OffsetOracle`): the partitions, their reported
watermarks (four ListOffsets calls) and the true end as of the call
(``end_offsets(as_of_call=True)``, which reads past the broker's coarse watermark). Prints
each call's milliseconds beside the records the topic then holds and the broker process's
CPU over the interval, so a cost that grows with the topic shows against its size
(``docs/benchmarks.md``, the stream's round 8).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def produce(bootstrap: str, topic: str, rate: int, stop: threading.Event) -> None:
    """Send ``rate`` records/s (paced every 10 ms) until ``stop``."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
    )
    sent, began = 0, time.monotonic()
    while not stop.is_set():
        due = int((time.monotonic() - began) * rate)
        while sent < due:
            value = json.dumps({"n": sent, "at": time.time()}).encode()
            producer.produce(topic, value=value, partition=sent % 4)
            sent += 1
            if sent % 1000 == 0:
                producer.poll(0)
        time.sleep(0.01)
    producer.flush(10)


def cpu_ticks(pid: int) -> int:
    """User + system clock ticks of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rate", type=int, default=11_000, help="records/s (default 11000)")
    parser.add_argument("--seconds", type=int, default=130, help="how long (default 130)")
    parser.add_argument("--every", type=float, default=5.0, help="seconds between probes")
    args = parser.parse_args()

    from kappaplus.connectors.kafka.offsets import OffsetOracle
    from kappaplus.connectors.kafka.options import KafkaSourceOptions
    from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port

    broker = EmbeddedBroker(Path(tempfile.mkdtemp(prefix="bench-probe-")), port=free_port())
    bootstrap = broker.start()
    broker_pid = int(json.loads(broker.pid_file.read_text())["pid"])
    stop = threading.Event()
    try:
        create_topic(bootstrap, "probe", partitions=4)
        producer = threading.Thread(target=produce, args=(bootstrap, "probe", args.rate, stop))
        producer.start()
        options = KafkaSourceOptions.parse(
            {"kafka.bootstrap.servers": bootstrap, "subscribe": "probe"}
        )
        oracle = OffsetOracle(options)
        tick = os.sysconf("SC_CLK_TCK")
        print(f"{args.rate:,} records/s to 4 partitions of the embedded broker, ", end="")
        print(f"a probe every {args.every:g} s")
        print(
            "| s | records in the topic | partitions ms | ListOffsets x4 ms "
            "| end as of the call ms | broker CPU % of a core |"
        )
        print("|---:|---:|---:|---:|---:|---:|")
        began, ends, ticks = time.monotonic(), None, cpu_ticks(broker_pid)
        while time.monotonic() - began < args.seconds:
            time.sleep(args.every)
            a = time.monotonic()
            tps = oracle.topic_partitions()
            b = time.monotonic()
            oracle.watermarks(tps)
            c = time.monotonic()
            ends = oracle.end_offsets(tps, ends, as_of_call=True)
            d = time.monotonic()
            now_ticks = cpu_ticks(broker_pid)
            cpu = 100 * (now_ticks - ticks) / tick / (d - a + args.every)
            ticks = now_ticks
            print(
                f"| {d - began:.0f} | {sum(ends.values()):,} | {1000 * (b - a):.0f} | "
                f"{1000 * (c - b):.0f} | {1000 * (d - c):.0f} | {cpu:.0f} |",
                flush=True,
            )
        oracle.close()
    finally:
        stop.set()
        broker.stop()


if __name__ == "__main__":
    main()
