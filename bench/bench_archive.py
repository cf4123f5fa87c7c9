"""``kappa archive`` into Hive, Iceberg and Delta side by side in one run: the same topic
archived by each table format, each archive a whole ``kappa archive`` process.

    .venv/bin/python bench/bench_archive.py [--records 300000] [--per-batch 50000]
        [--rounds 2] [--formats hive,iceberg,delta] [--no-docs]

One embedded broker holds one topic (one partition) of ``--records`` small JSON rider
events (~130 bytes, event times over two days). Each round archives it once per format,
the order alternating by round (hive, iceberg, delta, then delta, iceberg, hive...) so
neither format always runs first on a machine warming up or under another's load. Every
run is ``kappa archive TOPIC --trigger available-now --max-offsets-per-trigger N`` in its
own process and its own ``KAPPA_HOME`` (a fresh metastore, catalog and checkpoint): the
wall time includes the process's Spark start-up, alike for all three. Hive writes Parquet
partitions by event ``dt``/``hr`` through Spark; Iceberg (pyiceberg) and Delta (delta-rs)
commit one snapshot/version per micro-batch with the batch's marker.

Every table is read back without Spark (pyarrow over the Hive table's Parquet files,
pyiceberg, delta-rs) and must hold exactly the topic's offsets ``0..records-1``, each once.
Prints records/s per format (median over rounds; of the whole process and of the part from
the query's start) and the ratio to Hive, and rewrites the
``bench_archive`` section of ``docs/benchmarks.md`` (unless ``--no-docs``).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kappaplus.examples.generate import RIDER_EVENT_DDL  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_archive:start -->", "<!-- bench_archive:end -->"
TABLE = "lake.archived"
FIRST = datetime(2024, 3, 1, tzinfo=UTC)


def produce(bootstrap: str, topic: str, records: int) -> float:
    """``records`` rider events as JSON into partition 0 of ``topic``; seconds taken."""
    from confluent_kafka import Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "linger.ms": 50, "batch.num.messages": 10_000}
    )
    kinds = ("request", "match", "pickup", "dropoff", "cancel")
    spread = 2 * 24 * 3600
    started = time.perf_counter()
    for i in range(records):
        at = FIRST + timedelta(seconds=(i * 7919) % spread)
        value = json.dumps(
            {
                "event_id": f"e{i:09d}",
                "rider_id": f"r{i % 5000:05d}",
                "event_type": kinds[i % len(kinds)],
                "area": f"a{i % 40:02d}",
                "event_time": at.isoformat(),
            }
        ).encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=0)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 10_000 == 0:
            producer.poll(0)
    if producer.flush(120) != 0:
        raise SystemExit("the producer could not deliver every record")
    return time.perf_counter() - started


def table_options(table_format: str, home: Path) -> list[str]:
    """``--table`` and the format's options: Hive and Iceberg by name (Iceberg in the
    embedded SQL catalog of ``home``), Delta at a location with its dead letters in Hive."""
    if table_format == "delta":
        location = str(home / "delta" / "archived")
        return ["--table", location, "--dlq-table", f"{TABLE}_dead_letters"]
    return ["--table", TABLE]


QUERY_START = re.compile(
    r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) INFO .*: stream mode, trigger", re.M
)


def archive(
    table_format: str, bootstrap: str, topic: str, home: Path, per_batch: int
) -> tuple[float, float]:
    """One whole ``kappa archive`` process draining the topic: its wall time in seconds, and
    the seconds from its query's start (the run's log line, after Spark's start-up and the
    job's planning) to the process's exit."""
    command = [sys.executable, "-m", "kappaplus", "archive", topic, "--table-format", table_format]
    command += table_options(table_format, home)
    command += ["--event-time", "event_time", "--schema", RIDER_EVENT_DDL]
    command += ["--bootstrap", bootstrap, "--no-progress", "--trigger", "available-now"]
    command += ["--max-offsets-per-trigger", str(per_batch)]
    command += ["--checkpoint", str(home / "checkpoints")]
    env = {**os.environ, "KAPPA_HOME": str(home)}
    started = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    elapsed, ended = time.perf_counter() - started, time.time()
    if done.returncode != 0:
        raise SystemExit(
            f"kappa archive --table-format {table_format} failed:\n"
            f"{(done.stdout + done.stderr)[-3000:]}"
        )
    found = QUERY_START.search((home / "logs" / "kappa.log").read_text())
    if found is None:
        raise SystemExit(f"{table_format}: no query start in {home / 'logs' / 'kappa.log'}")
    # the log's times are local, as datetime's naive timestamp() reads them
    began = datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
    return elapsed, ended - began


def archived_offsets(table_format: str, home: Path) -> list[int]:
    """The Kafka offsets in the archived table, read without Spark."""
    columns = ["kafka_partition", "kafka_offset"]
    if table_format == "hive":
        import pyarrow.dataset as ds

        # the metastore's warehouse: <home>/warehouse/<db>.db/<table>, dt=/hr= partitions
        location = home / "warehouse" / "lake.db" / "archived"
        data = ds.dataset(str(location), format="parquet", partitioning="hive").to_table(
            columns=columns
        )
    elif table_format == "iceberg":
        from kappaplus.connectors.iceberg.catalog import default_catalog, load_catalog

        table = load_catalog(default_catalog(home)).load_table(TABLE)
        data = table.scan(selected_fields=tuple(columns)).to_arrow()
    else:
        from deltalake import DeltaTable

        data = DeltaTable(str(home / "delta" / "archived")).to_pyarrow_table(columns=columns)
    if set(data.column("kafka_partition").to_pylist()) - {0}:
        raise SystemExit(f"{table_format}: a partition other than 0")
    return sorted(data.column("kafka_offset").to_pylist())


def write_section(text: str) -> None:
    """Replace (or append) the ``bench_archive`` section of docs/benchmarks.md."""
    current = DOC.read_text()
    section = f"{START}\n{text.rstrip()}\n{END}"
    if START in current and END in current:
        current = re.sub(
            re.escape(START) + r".*?" + re.escape(END), lambda _: section, current, flags=re.S
        )
    else:
        current = current.rstrip() + "\n\n" + section + "\n"
    DOC.write_text(current)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--per-batch", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--formats", default="hive,iceberg,delta")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    args = parser.parse_args()
    formats = args.formats.split(",")
    from kappaplus.local.broker import EmbeddedBroker, create_topic, free_port

    whole: dict[str, list[float]] = {f: [] for f in formats}
    query: dict[str, list[float]] = {f: [] for f in formats}
    with tempfile.TemporaryDirectory(prefix="bench-archive-") as tmp:
        work = Path(tmp)
        broker = EmbeddedBroker(work, port=free_port())
        bootstrap = broker.start()
        try:
            topic = f"bench-archive-{int(time.time())}"
            create_topic(bootstrap, topic, partitions=1)
            produce_s = produce(bootstrap, topic, args.records)
            print(f"produced {args.records:,} records in {produce_s:.1f} s", flush=True)
            for round_ in range(args.rounds):
                for name in formats if round_ % 2 == 0 else list(reversed(formats)):
                    home = work / f"{name}-{round_}"
                    elapsed, querying = archive(name, bootstrap, topic, home, args.per_batch)
                    offsets = archived_offsets(name, home)
                    if offsets != list(range(args.records)):
                        raise SystemExit(
                            f"{name}: {len(offsets):,} rows, {len(set(offsets)):,} offsets; "
                            f"expected each of 0..{args.records - 1} once"
                        )
                    whole[name].append(elapsed)
                    query[name].append(querying)
                    print(
                        f"round {round_ + 1} {name}: {elapsed:.1f} s whole, {querying:.1f} s "
                        f"from the query's start; {len(offsets):,} rows = the topic, each "
                        "offset once",
                        flush=True,
                    )
        finally:
            broker.stop()
    load = os.getloadavg()[0]
    first = formats[0]
    lines = [
        "## Archive throughput: Hive, Iceberg, Delta (`bench/bench_archive.py`, `make bench`)",
        "",
        f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on "
        f"{platform.machine()} with {os.cpu_count()} CPUs (shared; load {load:.1f} at the end), "
        f"`local[2]`, embedded broker: one topic of {args.records:,} JSON rider events "
        f"(one partition, event times over two days) archived by `kappa archive "
        f"--trigger available-now --max-offsets-per-trigger {args.per_batch:,}` into each "
        f"format, each a whole process with its own `KAPPA_HOME`, {args.rounds} round(s) in "
        "alternating order. Every table, read back without Spark, holds each of the topic's "
        "offsets once. *Whole*: the process's wall time (Spark's start-up included); "
        "*query*: from the run's query start (its log line) to the process's exit.",
        "",
        f"| format | whole s | records/s | whole vs {first} | query s | records/s "
        f"| query vs {first} | all runs whole / query (s) |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    w = {f: statistics.median(whole[f]) for f in formats}
    q = {f: statistics.median(query[f]) for f in formats}
    for name in formats:
        runs = ", ".join(f"{a:.1f}/{b:.1f}" for a, b in zip(whole[name], query[name], strict=True))
        lines.append(
            f"| {name} | {w[name]:.1f} | {args.records / w[name]:,.0f} | "
            f"{w[first] / w[name]:.2f}x | {q[name]:.1f} | {args.records / q[name]:,.0f} | "
            f"{q[first] / q[name]:.2f}x | {runs} |"
        )
    lines += [
        "",
        f"Medians over rounds. Ratio = {first}'s seconds / the format's seconds (above 1: "
        f"faster than {first}).",
    ]
    text = "\n".join(lines)
    print("\n" + text)
    if not args.no_docs:
        write_section(text)
        print(f"\nwrote {DOC}")


if __name__ == "__main__":
    main()
