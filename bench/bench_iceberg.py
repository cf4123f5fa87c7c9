"""Backfill from an Iceberg table vs a one-shot Spark batch over the same data files vs
pyarrow over pyiceberg's scan (the truth), each in its own process, side by side in one run.

    .venv/bin/python bench/bench_iceberg.py [--days 7] [--rows-per-day 500000]
        [--layouts none,day,hour] [--files 14] [--no-docs]

For each layout (``none``: unpartitioned; ``day`` / ``hour``: partitioned by ``day(ts)`` /
``hour(ts)``) a table of ``--rows-per-day`` events per day (``key`` (50 keys), ``amount``,
event time ``ts``) is written with pyiceberg into an embedded SQL catalog, in ``--files``
appends whose rows are shuffled across the whole range (every file spans every day: the
files are out of event-time order). Then the same aggregation (count and sum of ``amount``
per 1-hour window per key) runs as:

- (A) ``read_iceberg_stream`` with the defaults (adaptive slices planned from manifest
  bounds; ``reader = auto``, which takes the JVM reader for these tables: no delete files,
  no renamed column, local files), the watermark, AvailableNow;
- (A-py) the same with ``reader = "python"`` (pyiceberg's Arrow scan in Python workers);
- (B) one Spark batch query over the snapshot's data files (the paths pyiceberg plans),
  collected;
- (C) pyarrow: pyiceberg's ``scan().to_arrow()`` and ``group_by`` (the truth).

Each way's wall time is its whole process (session start included); peak memory is PSS over
its process tree. Every result is compared with (C).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from bench_backfill import ROOT, Timed, run_timed, session, stop  # noqa: E402
from lake_ways import HEADER, RULE, compare_ways  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_iceberg:start -->", "<!-- bench_iceberg:end -->"
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
DAY, HOUR, KEYS = 86400, 3600, 50


def props(work: Path) -> dict[str, str]:
    return {
        "type": "sql",
        "uri": f"sqlite:///{work / 'catalog.db'}",
        "warehouse": f"file://{work / 'warehouse'}",
    }


def child_generate(args: argparse.Namespace) -> None:
    import numpy as np
    import pyarrow as pa
    from pyiceberg.catalog import load_catalog
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.schema import Schema
    from pyiceberg.transforms import DayTransform, HourTransform
    from pyiceberg.types import LongType, NestedField, TimestamptzType

    catalog = load_catalog("kappa", **json.loads(args.catalog))
    catalog.create_namespace_if_not_exists("bench")
    schema = Schema(
        NestedField(1, "key", LongType(), required=False),
        NestedField(2, "amount", LongType(), required=False),
        NestedField(3, "ts", TimestamptzType(), required=False),
    )
    spec = PartitionSpec()
    if args.layout == "day":
        spec = PartitionSpec(PartitionField(3, 1000, DayTransform(), "ts_day"))
    elif args.layout == "hour":
        spec = PartitionSpec(PartitionField(3, 1000, HourTransform(), "ts_hour"))
    name = f"bench.events_{args.layout}"
    if catalog.table_exists(name):
        catalog.drop_table(name)
    table = catalog.create_table(name, schema=schema, partition_spec=spec)
    rng = np.random.default_rng(7)
    n = args.days * args.rows_per_day
    seconds = rng.integers(0, args.days * DAY * 1_000_000, n) + BASE * 1_000_000
    keys = rng.integers(0, KEYS, n)
    amounts = rng.integers(1, 100, n)
    order = rng.permutation(n)  # files out of event-time order: each spans the whole range
    for chunk in np.array_split(order, args.files):
        table.append(
            pa.table(
                {
                    "key": pa.array(keys[chunk], pa.int64()),
                    "amount": pa.array(amounts[chunk], pa.int64()),
                    "ts": pa.array(seconds[chunk], pa.int64()).cast(pa.timestamp("us", tz="UTC")),
                }
            )
        )
    Path(args.out).write_text(json.dumps({"rows": int(n), "name": name}))


def hourly(df: Any) -> Any:
    from pyspark.sql import functions as F

    return df.groupBy(F.window("ts", "1 hour"), "key").agg(
        F.count("*").alias("n"), F.sum("amount").alias("s")
    )


def spark_rows(rows: list) -> list[list[int]]:
    return sorted([int(r.window.start.timestamp()), int(r.key), int(r.n), int(r.s)] for r in rows)


def child_stream(args: argparse.Namespace) -> None:
    """(A): the Iceberg source with the defaults; (A-py) with the Python reader."""
    spark = session("bench-iceberg-a")
    from kappaplus.connectors.iceberg import read_iceberg_stream

    end = datetime.fromtimestamp(BASE + args.days * DAY, tz=UTC).isoformat()
    df = read_iceberg_stream(
        spark,
        args.name,
        event_time_column="ts",
        catalog=json.loads(args.catalog),
        end=end,
        watermark_delay="10 minutes",
        manifest_dir=args.checkpoint + "-manifests",
        reader=args.reader,
    )
    jvm = "kappa_hive_jvm" in df._jdf.queryExecution().analyzed().toString()
    query = (
        hourly(df)
        .writeStream.format("memory")
        .queryName("a_out")
        .outputMode("append")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
    rows = spark_rows(spark.table("a_out").collect())
    out = {"rows": rows, "batches": batches, "reader": "jvm" if jvm else "python"}
    Path(args.out).write_text(json.dumps(out))
    stop(spark)


def child_batch(args: argparse.Namespace) -> None:
    """(B): one Spark batch over the snapshot's data files."""
    from pyiceberg.catalog import load_catalog

    table = load_catalog("kappa", **json.loads(args.catalog)).load_table(args.name)
    paths = [t.file.file_path for t in table.scan().plan_files()]
    spark = session("bench-iceberg-b")
    rows = spark_rows(hourly(spark.read.parquet(*paths)).collect())
    Path(args.out).write_text(json.dumps({"rows": rows, "files": len(paths)}))
    stop(spark)


def child_truth(args: argparse.Namespace) -> None:
    """(C): pyarrow over pyiceberg's scan."""
    import pyarrow as pa
    import pyarrow.compute as pc
    from pyiceberg.catalog import load_catalog

    table = load_catalog("kappa", **json.loads(args.catalog)).load_table(args.name)
    data = table.scan(selected_fields=("ts", "key", "amount")).to_arrow()
    micros = pc.cast(data["ts"], pa.int64())
    hour = pc.multiply(pc.divide(micros, HOUR * 1_000_000), HOUR)
    grouped = (
        pa.table({"h": hour, "key": data["key"], "amount": data["amount"]})
        .group_by(["h", "key"])
        .aggregate([("amount", "count"), ("amount", "sum")])
    )
    rows = sorted(
        [int(h), int(k), int(n), int(s)]
        for h, k, n, s in zip(
            grouped["h"].to_pylist(),
            grouped["key"].to_pylist(),
            grouped["amount_count"].to_pylist(),
            grouped["amount_sum"].to_pylist(),
            strict=True,
        )
    )
    Path(args.out).write_text(json.dumps({"rows": rows}))


CHILDREN = {
    "generate": child_generate,
    "stream": child_stream,
    "batch": child_batch,
    "truth": child_truth,
}


def child(role: str, work: Path, **options: Any) -> tuple[Timed, dict]:
    import os

    out = work / f"{role}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, __file__, "--child", role, "--out", str(out)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    env = dict(os.environ)
    env["KAPPA_HOME"] = str(work / "home")
    timed = run_timed(cmd, env)
    if timed.returncode != 0:
        raise SystemExit(f"bench child {role} failed with status {timed.returncode}")
    return timed, json.loads(out.read_text())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child")
    parser.add_argument("--out")
    parser.add_argument("--catalog")
    parser.add_argument("--name")
    parser.add_argument("--layout")
    parser.add_argument("--checkpoint")
    parser.add_argument("--reader", default="auto")
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--files", type=int, default=14)
    parser.add_argument("--layouts", default="none,day,hour")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--no-docs", action="store_true")
    args = parser.parse_args()
    if args.child:
        CHILDREN[args.child](args)
        return
    work = Path(tempfile.mkdtemp(prefix="bench-iceberg-"))
    catalog = json.dumps(props(work))
    lines = []
    for layout in args.layouts.split(","):
        _, made = child(
            "generate",
            work,
            catalog=catalog,
            layout=layout,
            days=args.days,
            rows_per_day=args.rows_per_day,
            files=args.files,
        )
        name, rows = made["name"], made["rows"]
        line = compare_ways(
            child,
            work,
            days=args.days,
            layout=layout,
            rows=rows,
            rounds=args.rounds,
            catalog=catalog,
            name=name,
        )
        print(line, flush=True)
        lines.append(line)
    header = [
        f"Measured {datetime.now(tz=UTC).strftime('%Y-%m-%d %H:%M')} UTC, "
        f"{args.rows_per_day:,} rows/day, {args.files} appends of rows shuffled over the "
        "whole range (files out of event-time order); seconds per way's whole process "
        f"(peak PSS of its tree); medians of {args.rounds} rounds of B, A, A-py.",
        "",
        HEADER.format(kind="Iceberg", truth="pyarrow over pyiceberg scan"),
        RULE,
    ]
    table = "\n".join(header + lines)
    print(table)
    if not args.no_docs and DOC.exists():
        text = DOC.read_text()
        block = f"{START}\n{table}\n{END}"
        if START in text:
            text = text.split(START)[0] + block + text.split(END, 1)[1]
        else:
            text += f"\n## Iceberg backfill (bench/bench_iceberg.py)\n\n{block}\n"
        DOC.write_text(text)


if __name__ == "__main__":
    main()
