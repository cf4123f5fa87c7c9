"""The Hive source's in-batch read rate, JVM reader against Python reader against raw pyarrow.

    .venv/bin/python bench/bench_read_path.py [--days 7] [--rows-per-day 500000] [--rounds 3]

One Spark session (``local[2]``) writes the table of ``bench_hive.py`` (``--days`` of
``--rows-per-day`` rows, ``dt``/``hr`` partitions, 2 files per hour), then alternates, for
``--rounds`` rounds:

- (jvm) ``read_hive_stream(..., reader="jvm", columns="ts,key,amount")`` into the ``noop``
  sink, AvailableNow, adaptive slices (the backfill default);
- (python) the same with ``reader="python"`` (the Python data source ``kappa_hive``);
- (spark) Spark's own batch scan of the same columns into ``noop`` (no slicing, no filter);
- (c) raw pyarrow: ``pq.read_table`` of the same files and columns, in this process.

The in-batch read rate of a stream is its rows over the ``addBatch`` time of its data
micro-batches (Spark's ``durationMs``: the read of the slice, excluding query start,
planning and commits); (spark) and (c) are timed whole. Medians over the rounds; the
ratio to (c) is the issue's "in-batch read rate against a raw pyarrow scan of the same files
and columns". Prints a Markdown section; ``--docs`` writes it into ``docs/benchmarks.md``.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_hive import BASE, DAY, RAW_COLUMNS, TABLE, iso, write_table  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
START, END = "<!-- bench_read_path:start -->", "<!-- bench_read_path:end -->"


def stream_rate(spark, reader: str, start: int, end: int, work: Path) -> tuple[float, int, int]:  # type: ignore[no-untyped-def]
    """(rows, addBatch seconds of the data batches, data batches) of one AvailableNow run."""
    from kappaplus.connectors.hive import read_hive_stream

    name = f"{reader}-{time.monotonic_ns()}"
    stream = read_hive_stream(
        spark,
        TABLE,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        columns=",".join(RAW_COLUMNS),
        manifestDir=str(work / name / "manifests"),
        reader=reader,
    )
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    data = [p for p in query.recentProgress if p["numInputRows"] > 0]
    rows = sum(p["numInputRows"] for p in data)
    seconds = sum(p["durationMs"].get("addBatch", 0) for p in data) / 1000
    shutil.rmtree(work / name, ignore_errors=True)
    return seconds, rows, len(data)


def spark_scan(spark, location: str) -> tuple[float, int]:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    df = spark.read.parquet(location).select(*RAW_COLUMNS)
    df.write.format("noop").mode("overwrite").save()
    return time.perf_counter() - began, spark.read.parquet(location).count()


def raw_scan(location: str) -> tuple[float, int]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    began = time.perf_counter()
    root = location.removeprefix("file:")
    paths = sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".parquet") and not f.startswith((".", "_"))
    )
    table = pa.concat_tables(pq.read_table(p, columns=RAW_COLUMNS) for p in paths)
    return time.perf_counter() - began, table.num_rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", type=int, default=7)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--docs", action="store_true", help="write docs/benchmarks.md")
    args = parser.parse_args()

    from kappaplus.connectors.hive import resolve_table
    from kappaplus.session import create_session

    work = Path(tempfile.mkdtemp(prefix="bench-read-"))
    load = [os.getloadavg()[0]]
    try:
        spark = create_session("bench-read-path", master="local[2]", home=work / "home")
        n = write_table(spark, args.days, args.rows_per_day, 2)
        location = resolve_table(spark, TABLE).location
        start, end = BASE, BASE + args.days * DAY
        stream_rate(spark, "jvm", start, start + DAY // 4, work)  # warm-up
        stream_rate(spark, "python", start, start + DAY // 4, work)
        spark_scan(spark, location)
        raw_scan(location)
        runs: dict[str, list[float]] = {"jvm": [], "python": [], "spark": [], "c": []}
        batches: dict[str, int] = {}
        for _ in range(args.rounds):
            for reader in ("jvm", "python"):
                seconds, rows, count = stream_rate(spark, reader, start, end, work)
                assert rows == n, f"{reader} read {rows} rows of {n}"
                runs[reader].append(rows / seconds)
                batches[reader] = count
            seconds, rows = spark_scan(spark, location)
            runs["spark"].append(rows / seconds)
            seconds, rows = raw_scan(location)
            runs["c"].append(rows / seconds)
        load.append(os.getloadavg()[0])
        spark.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in runs.items()}
    text = render(args, n, med, runs, batches, load)
    print(text)
    if args.docs:
        doc = DOC.read_text()
        block = f"{START}\n{text}\n{END}"
        if START in doc:
            doc = doc[: doc.index(START)] + block + doc[doc.index(END) + len(END) :]
        else:
            doc = doc.rstrip() + "\n\n" + block + "\n"
        DOC.write_text(doc)


def render(args, n, med, runs, batches, load) -> str:  # type: ignore[no-untyped-def]
    names = {
        "jvm": 'kappa_hive_jvm (`reader = "jvm"`): in-batch rate (addBatch of data batches)',
        "python": 'kappa_hive (`reader = "python"`): in-batch rate (addBatch of data batches)',
        "spark": "Spark's own batch scan of the same files and columns -> noop (whole job)",
        "c": "(C) raw pyarrow `pq.read_table` of the same files and columns (in process)",
    }
    lines = [
        "## The read path: JVM reader, Python reader, raw pyarrow (`bench/bench_read_path.py`)",
        "",
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()} with "
        f"{os.cpu_count()} CPUs (load average {load[0]:.1f} before, {load[-1]:.1f} after), "
        f"`local[2]`: {n:,} rows over {args.days} days, columns {', '.join(RAW_COLUMNS)}, "
        f"adaptive slices ({batches.get('jvm', '?')} data micro-batches). Medians of "
        f"{args.rounds} alternating rounds after a warm-up.",
        "",
        "| read path | rows/s (median) | all rounds | vs (C) |",
        "|---|---:|---|---:|",
    ]
    for key in ("jvm", "python", "spark", "c"):
        rounds = ", ".join(f"{r:,.0f}" for r in runs[key])
        lines.append(f"| {names[key]} | {med[key]:,.0f} | {rounds} | {med[key] / med['c']:.0%} |")
    lines += [
        "",
        f"JVM reader / Python reader: **{med['jvm'] / med['python']:.1f}x**; JVM reader / raw "
        f"pyarrow: **{med['jvm'] / med['c']:.0%}** (goal >= 60%).",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
