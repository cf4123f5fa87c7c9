"""Catching up on a backlog: one partition against several, partitions aligned or not.

    .venv/bin/python bench/bench_catchup.py [--days 3] [--limit 600] [--docs]

The same flights (one origin per partition, the first origin three times as dense as the
others; most arrive within two minutes of their event, 2% six to nine hours late) are
produced, with their arrival time as the Kafka record timestamp, to topics of 1, 3 and 4
partitions on the embedded broker. Each topic is then read by the same stream job
(10-minute counts per origin, 10-minute watermark, late rows kept in a table,
``maxOffsetsPerTrigger = --limit``, ``--trigger available-now``) twice: with
``alignPartitions`` on (the default) and off (the even split Spark's Kafka source makes).
Every run's late rows and output are compared with the ground truth computed by hand:
read as one arrival order, exactly the flights that arrived hours late are late.

Prints (and with ``--docs`` writes into ``docs/benchmarks.md``) per run: wall seconds of
the run, rows/s, late rows, windows equal to the truth. All runs share one Spark session and
one broker, in one process, one after another (the first also pays the session's warm-up).
"""

from __future__ import annotations

import argparse
import json
import random
import re
import shutil
import sys
import tempfile
import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

START = datetime(2024, 5, 1, tzinfo=UTC)
ORIGINS = ("JFK", "SFO", "ORD", "SEA")
WINDOW = 600


def flights(days: int, per_day: int, seed: int = 3) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    dense = per_day / 2  # the first origin has half the flights: 3x each of the others
    rates = [dense] + [dense / 3] * (len(ORIGINS) - 1)
    out = []
    for origin, rate in zip(ORIGINS, rates, strict=True):
        every = 86_400 / rate
        t = 0.0
        while t < days * 86_400:
            t += rng.expovariate(1 / every)
            late = t < days * 86_400 - 12 * 3600 and rng.random() < 0.02
            delay = rng.uniform(6 * 3600, 9 * 3600) if late else rng.uniform(0, 120)
            event = START + timedelta(seconds=t)
            out.append(
                {
                    "flight_id": f"{origin}-{len(out)}",
                    "origin": origin,
                    "event_time": event,
                    "arrival": event + timedelta(seconds=delay),
                    "late": late,
                }
            )
    return out


def produce(bootstrap: str, topic: str, rows: list[dict[str, Any]], partitions: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50, "log_level": 0})
    ordered = sorted(rows, key=lambda r: (r["arrival"], r["flight_id"]))
    last = ordered[-1]["arrival"]
    flush = [
        {"flight_id": f"flush-{i}", "origin": ORIGINS[i % 4], "event_time": t, "arrival": t}
        for i in range(4_000)
        for t in [last + timedelta(days=1, seconds=i)]
    ]
    for row in ordered + flush:
        value = {k: row[k] for k in ("flight_id", "origin")}
        value["event_time"] = row["event_time"].isoformat()
        partition = ORIGINS.index(row["origin"]) % partitions
        producer.produce(
            topic,
            value=json.dumps(value).encode(),
            partition=partition,
            timestamp=int(row["arrival"].timestamp() * 1000),
        )
        producer.poll(0)
    assert producer.flush(120) == 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=3)
    parser.add_argument("--per-day", type=int, default=6_000)
    parser.add_argument("--limit", type=int, default=600)
    parser.add_argument("--partitions", default="1,3,4")
    parser.add_argument("--docs", action="store_true")
    args = parser.parse_args()

    from pyspark.sql import functions as F

    from kappaplus.config import config_from_dict
    from kappaplus.jobs import InputSpec, Job, OutputSpec
    from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port
    from kappaplus.runtime.options import RunOptions
    from kappaplus.runtime.runner import run_job
    from kappaplus.session import create_session, stop_session

    def counts(inputs: dict[str, Any], params: Any) -> dict[str, Any]:
        per = inputs["flights"].groupBy(F.window("event_time", "10 minutes"), "origin").count()
        return {"counts": per.select(F.col("window.start").alias("start"), "origin", "count")}

    job = Job(
        name="bench-catchup",
        inputs=[
            InputSpec(
                "flights", "flight_id string, origin string, event_time timestamp", "event_time"
            )
        ],
        outputs=[OutputSpec("counts", event_time_column="start", late_by="window:window")],
        transform=counts,
        watermark_delay="10 minutes",
        params={"window": "10 minutes"},
        window_params=["window"],
    )
    rows = flights(args.days, args.per_day)
    late_truth = {r["flight_id"] for r in rows if r["late"]}
    truth: Counter[tuple[int, str]] = Counter()
    for r in rows:
        if not r["late"]:
            s = int(r["event_time"].timestamp())
            truth[(s - s % WINDOW, r["origin"])] += 1

    work = Path(tempfile.mkdtemp(prefix="bench-catchup-"))
    broker = EmbeddedBroker(work / "broker", port=free_port())
    bootstrap = broker.start()
    spark = create_session("bench-catchup", home=work / "home")
    results = []
    try:
        for partitions in [int(p) for p in args.partitions.split(",")]:
            topic = f"flights-{partitions}"
            create_topic(bootstrap, topic, partitions)
            produce(bootstrap, topic, rows, partitions)
            for align in (True, False) if partitions > 1 else (True,):
                name = f"p{partitions}_{'aligned' if align else 'even'}"
                config = config_from_dict(
                    {
                        "job": "bench:JOB",
                        "checkpoint_dir": str(work / "checkpoints" / name),
                        "inputs": {
                            "flights": {
                                "kafka": {
                                    "topic": topic,
                                    "bootstrap_servers": bootstrap,
                                    "starting_offsets": "earliest",
                                    "maxOffsetsPerTrigger": args.limit,
                                    "alignPartitions": align,
                                }
                            }
                        },
                        "outputs": {
                            "counts": {
                                "hive": {"table": f"counts_{name}"},
                                "late": {"table": f"late_{name}"},
                            }
                        },
                    }
                )
                started = time.monotonic()
                result = run_job(spark, job, config, RunOptions("stream", trigger="available-now"))
                seconds = time.monotonic() - started
                assert result.status == "finished", result.status
                edge = START + timedelta(days=args.days + 1)
                out = spark.table(f"counts_{name}").where(F.col("start") < F.lit(edge)).collect()
                produced = Counter({(int(r.start.timestamp()), r.origin): r["count"] for r in out})
                late = {r.flight_id for r in spark.table(f"late_{name}").collect()}
                windows_equal = sum(1 for k, v in truth.items() if produced.get(k) == v)
                results.append(
                    {
                        "run": name,
                        "partitions": partitions,
                        "aligned": align,
                        "seconds": seconds,
                        "rows_per_s": len(rows) / seconds,
                        "late": len(late),
                        "late_exact": late == late_truth,
                        "windows_equal": windows_equal,
                        "windows": len(truth),
                    }
                )
                print(json.dumps(results[-1]), flush=True)
    finally:
        stop_session(spark)
        broker.stop()
        shutil.rmtree(work, ignore_errors=True)

    table = render(args, len(rows), len(late_truth), results)
    print(table)
    if args.docs:
        docs = ROOT / "docs" / "benchmarks.md"
        text = docs.read_text()
        block = f"<!-- bench_catchup:start -->\n{table}<!-- bench_catchup:end -->"
        pattern = re.compile(r"<!-- bench_catchup:start -->.*?<!-- bench_catchup:end -->", re.S)
        text = pattern.sub(block, text) if pattern.search(text) else text + "\n" + block + "\n"
        docs.write_text(text)


def render(args: argparse.Namespace, rows: int, late: int, results: list[dict[str, Any]]) -> str:
    import os

    load = os.getloadavg()[0]
    lines = [
        "## Catching up on several partitions (`bench/bench_catchup.py`)",
        "",
        f"Measured {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} CPUs (load average "
        f"{load:.1f} at the end), `local[2]`, embedded broker: {rows:,} flights over "
        f"{args.days} days, one origin per partition (one origin 3x as dense), {late:,} "
        f"arriving 6-9 hours late (the truth's late rows); `maxOffsetsPerTrigger = "
        f"{args.limit}`, stream `--trigger available-now`, 10-minute windows and watermark.",
        "",
        "| partitions | batches cut | seconds | rows/s | late rows | late rows = truth | "
        "windows equal to truth |",
        "|---:|---|---:|---:|---:|---|---|",
    ]
    for r in results:
        lines.append(
            f"| {r['partitions']} | {'one record time (aligned)' if r['aligned'] else 'even split'}"
            f" | {r['seconds']:.1f} | {r['rows_per_s']:,.0f} | {r['late']:,} | "
            f"{r['late_exact']} | {r['windows_equal']:,} of {r['windows']:,} |"
        )
    lines.append("")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main()
