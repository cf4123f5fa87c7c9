"""Hive streaming source vs a Spark batch query vs a raw pyarrow scan (same table, one run).

    .venv/bin/python bench/bench_hive.py [--days 2] [--rows-per-day 500000] [--slice "6 hours"]
                                         [--files-per-hour 2] [--master local[2]] [--no-docs]

Writes ``--days`` days of generated events (``id``, ``key``, ``kind``, ``amount``, event time
``ts``) as a parquet Hive table partitioned by ``dt``/``hr``, then computes the same
aggregation (count and sum of ``amount`` per 1-hour window per key) three ways:

- (a) stream: ``read_hive_stream`` with ``Trigger.AvailableNow``, ``maxEventTimePerTrigger``
  = ``--slice``, a watermark and an append-mode windowed aggregation into a memory sink;
  the time is the whole query (start, planning, every micro-batch, end-of-input markers);
- (a0) the source alone: the same slices into the ``noop`` sink, no watermark or aggregation
  (how fast the source delivers rows through Spark, without the stateful operator);
- (b) batch: the same aggregation as one Spark batch query over the table, collected;
- (c) raw: a fresh Python process reads the table's files with pyarrow (the three columns
  the aggregation needs) and aggregates with pyarrow; the time is read + aggregate.

(a) and (b) run once each on a six-hour range as a warm-up first. (a) must equal (b) and
(c) row for row. Peak memory: for (a), (a0) and (b) the largest sum of RSS over the driver JVM
and its child processes (Python workers) sampled from /proc every 0.25 s during the run,
with the value at the start of the run; for (c) ``ru_maxrss`` of the raw-scan process.
Prints the table, the ratios and a per-micro-batch breakdown of the ``durationMs`` of (a)
and (a0), and rewrites the "Hive streaming source" section of ``docs/benchmarks.md`` (other
sections, and the hand-written notes block of this one, are kept).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kappaplus.local.processes import process_tree  # noqa: E402

DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_hive:start -->", "<!-- bench_hive:end -->"
NOTES_START, NOTES_END = "<!-- bench_hive:notes:start -->", "<!-- bench_hive:notes:end -->"
TABLE = "bench_hive_events"
HOUR = 3600
DAY = 86400
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
KEYS = 50
RAW_COLUMNS = ["ts", "key", "amount"]

Row = tuple[int, int, int, int]  # window start (epoch s), key, count, sum(amount)


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- memory ---------------------------------------------------------------------------------

PAGE = os.sysconf("SC_PAGE_SIZE")


def tree_rss(root: int) -> int:
    """Bytes of RSS of ``root`` and all its descendants, from /proc."""
    total = 0
    for pid in process_tree(root):
        try:
            with open(f"/proc/{pid}/statm") as f:
                total += int(f.read().split()[1]) * PAGE
        except (OSError, IndexError, ValueError):
            pass
    return total


class PeakRss:
    """Samples :func:`tree_rss` of ``root`` in a thread while in the ``with`` block."""

    def __init__(self, root: int, interval: float = 0.25) -> None:
        self.root, self.interval = root, interval
        self.start = self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, tree_rss(self.root))
            self._stop.wait(self.interval)

    def __enter__(self) -> PeakRss:
        self.start = self.peak = tree_rss(self.root)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, tree_rss(self.root))


DRIVER_RSS = "driver JVM + Python workers (RSS sum)"


def timed_in_driver(jvm_pid: int, run: Callable[[], Any]) -> tuple[Any, float, float, float]:
    """``run()``'s value, its wall seconds, and the peak and starting RSS (MB) of the
    driver JVM's process tree while it ran."""
    with PeakRss(jvm_pid) as mem:
        t0 = time.perf_counter()
        value = run()
        seconds = time.perf_counter() - t0
    return value, seconds, mem.peak / 2**20, mem.start / 2**20


# -- measurements -----------------------------------------------------------------------------


@dataclass
class Measure:
    name: str
    seconds: float
    rows_read: int
    peak_mb: float
    start_mb: float | None
    memory_note: str
    result: list[Row] = field(default_factory=list, repr=False)
    files: int = 0  # (c) only: files scanned
    read_seconds: float = 0.0  # (c) only: of ``seconds``, the time spent reading files

    @property
    def rows_per_s(self) -> float:
        return self.rows_read / self.seconds if self.seconds else 0.0


def write_table(spark, days: int, rows_per_day: int, files_per_hour: int) -> int:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    n = days * rows_per_day
    df = spark.range(0, n, numPartitions=max(2, n // 500_000)).select(
        F.col("id"),
        (F.col("id") * 7 % KEYS).cast("int").alias("key"),
        F.element_at(
            F.array(*[F.lit(k) for k in ("open", "search", "request", "pay")]),
            (F.col("id") % 4 + 1).cast("int"),
        ).alias("kind"),
        (F.col("id") * 31 % 1000).alias("amount"),
        (F.lit(BASE) + (F.rand(7) * (days * DAY)).cast("long")).cast("timestamp").alias("ts"),
    )
    spark.sql(f"DROP TABLE IF EXISTS {TABLE}")
    # About files_per_hour files in each hour's directory, rows out of order inside them.
    (
        df.withColumn("dt", F.date_format("ts", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("ts", "HH"))
        .withColumn("part", F.col("id") % files_per_hour)
        .repartition(days * 24 * files_per_hour, "dt", "hr", "part")
        .drop("part")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(TABLE)
    )
    return n


def aggregate(df):  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return df.groupBy(F.window("ts", "1 hour"), "key").agg(
        F.count("*").alias("n"), F.sum("amount").alias("total")
    )


def rows_of(df) -> list[Row]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return sorted(
        (int(r.s), int(r.key), int(r.n), int(r.total))
        for r in df.select(
            F.col("window.start").cast("long").alias("s"), "key", "n", "total"
        ).collect()
    )


def bench_source(spark, start: int, end: int, span: str, work: Path, name: str, **options):  # type: ignore[no-untyped-def]
    """The ``kappa_hive`` stream over the bench table, ``span`` of event time per trigger,
    with its own fresh manifest directory under ``work/name``."""
    from kappaplus.connectors.hive import read_hive_stream

    shutil.rmtree(work / name, ignore_errors=True)
    return read_hive_stream(
        spark,
        TABLE,
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger=span,
        manifestDir=str(work / name / "manifests"),
        **options,
    )


def run_stream(spark, start: int, end: int, span: str, work: Path, name: str, **pruning):  # type: ignore[no-untyped-def]
    """(a): the aggregation over the source; ``columns=...`` prunes columns, as (a1)."""
    stream = bench_source(
        spark, start, end, span, work, name, watermark_delay="10 minutes", **pruning
    )
    query = (
        aggregate(stream)
        .writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def run_read_only(spark, start: int, end: int, span: str, work: Path, name: str):  # type: ignore[no-untyped-def]
    """The source alone: the same slices into the ``noop`` sink, no watermark, no state."""
    stream = bench_source(spark, start, end, span, work, name)
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(work / name / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def run_batch(spark, start: int, end: int) -> list[Row]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    inside = spark.table(TABLE).where(
        (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
        & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
    )
    return rows_of(aggregate(inside))


def raw_scan_child(location: str, start: int, end: int, out: str) -> None:
    """(c), run in its own process: read the files with pyarrow and aggregate."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    began = time.perf_counter()
    root = location.removeprefix("file:")
    paths = sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".parquet") and not f.startswith((".", "_"))
    )
    tables = [pq.read_table(p, columns=RAW_COLUMNS) for p in paths]
    table = pa.concat_tables(tables)
    read_s = time.perf_counter() - began
    micros = pc.cast(pc.cast(table["ts"], pa.timestamp("us", tz="UTC")), pa.int64())
    keep = pc.and_(pc.greater_equal(micros, start * 1_000_000), pc.less(micros, end * 1_000_000))
    hour = pc.multiply(pc.divide(pc.filter(micros, keep), HOUR * 1_000_000), HOUR)
    grouped = (
        pa.table(
            {
                "s": hour,
                "key": pc.filter(table["key"], keep),
                "amount": pc.filter(table["amount"], keep),
            }
        )
        .group_by(["s", "key"])
        .aggregate([("amount", "count"), ("amount", "sum")])
    )
    seconds = time.perf_counter() - began
    rows = sorted(
        zip(
            grouped["s"].to_pylist(),
            grouped["key"].to_pylist(),
            grouped["amount_count"].to_pylist(),
            grouped["amount_sum"].to_pylist(),
            strict=True,
        )
    )
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    Path(out).write_text(
        json.dumps(
            {
                "seconds": seconds,
                "read_seconds": read_s,
                "rows_read": table.num_rows,
                "files": len(paths),
                "peak_kb": peak_kb,
                "rows": rows,
            }
        )
    )


def run_raw(location: str, start: int, end: int, work: Path) -> Measure:
    out = work / "raw.json"
    subprocess.run(
        [sys.executable, __file__, "--raw-scan", location, str(start), str(end), str(out)],
        check=True,
    )
    data = json.loads(out.read_text())
    return Measure(
        "(c) raw pyarrow scan + pyarrow group_by (1 process)",
        data["seconds"],
        data["rows_read"],
        data["peak_kb"] / 1024,
        None,
        "ru_maxrss of the scan process",
        [tuple(r) for r in data["rows"]],  # type: ignore[misc]
        files=data["files"],
        read_seconds=data["read_seconds"],
    )


def breakdown(progress: list[dict]) -> tuple[dict[str, int], list[str]]:
    """Sum of each ``durationMs`` part over the micro-batches, and one line per batch."""
    totals: dict[str, int] = {}
    lines = []
    for p in progress:
        parts = p.get("durationMs", {})
        for k, v in parts.items():
            totals[k] = totals.get(k, 0) + int(v)
        offset = json.loads(p["sources"][0]["endOffset"] or "{}")
        lines.append(
            f"batch {p['batchId']:>3} {offset.get('phase', '?'):>4} rows {p['numInputRows']:>9,} "
            f"files {offset.get('files', 0):>4} | "
            + " ".join(
                f"{k} {parts.get(k, 0)}"
                for k in (
                    "triggerExecution",
                    "latestOffset",
                    "queryPlanning",
                    "addBatch",
                    "walCommit",
                    "commitOffsets",
                )
            )
        )
    return totals, lines


# -- docs -------------------------------------------------------------------------------------


def write_section(text: str) -> None:
    """Replace the Hive section of the benchmarks doc; keep other sections and the
    hand-written notes block of the old Hive section."""
    current = DOC.read_text() if DOC.exists() else "# Benchmarks\n"
    notes = ""
    if NOTES_START in current and NOTES_END in current:
        inner = current.split(NOTES_START, 1)[1].split(NOTES_END, 1)[0]
        notes = f"\n{NOTES_START}{inner}{NOTES_END}\n"
    section = f"{START}\n{text.rstrip()}\n{notes}{END}\n"
    if START in current and END in current:
        head, rest = current.split(START, 1)
        tail = rest.split(END, 1)[1].lstrip("\n")
        updated = head + section + ("\n" + tail if tail else "")
    else:
        updated = current.rstrip() + "\n\n" + section
    DOC.parent.mkdir(parents=True, exist_ok=True)
    DOC.write_text(re.sub(r"\n{3,}", "\n\n", updated))


def verdict(value: float, goal: float, lower_is_better: bool) -> str:
    met = value <= goal if lower_is_better else value >= goal
    return "meets the goal" if met else "misses the goal"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--days", type=int, default=2)
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--slice", default="6 hours", help="maxEventTimePerTrigger of (a)")
    parser.add_argument("--files-per-hour", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--no-docs", action="store_true", help="do not touch docs/benchmarks.md")
    parser.add_argument("--raw-scan", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.raw_scan:
        location, start, end, out = args.raw_scan
        raw_scan_child(location, int(start), int(end), out)
        return

    from kappaplus.connectors.hive import resolve_table
    from kappaplus.session import create_session

    work = Path(tempfile.mkdtemp(prefix="bench-hive-"))
    load_before = os.getloadavg()
    try:
        spark = create_session("bench-hive", master=args.master, home=work / "home")
        jvm_pid = spark.sparkContext._gateway.proc.pid  # type: ignore[union-attr]
        began = time.perf_counter()
        n = write_table(spark, args.days, args.rows_per_day, args.files_per_hour)
        written_s = time.perf_counter() - began
        location = resolve_table(spark, TABLE).location
        print(
            f"table {TABLE}: {n:,} rows, {args.days} days, written in {written_s:.1f} s", flush=True
        )
        start, end = BASE, BASE + args.days * DAY

        # warm-up: JIT, Python workers, the data source's imports
        run_stream(spark, start, start + 6 * HOUR, "3 hours", work, "warmup_stream")
        run_batch(spark, start, start + 6 * HOUR)

        progress, secs, peak, at_start = timed_in_driver(
            jvm_pid, lambda: run_stream(spark, start, end, args.slice, work, "bench_stream")
        )
        read = sum(p["numInputRows"] for p in progress)
        stream = Measure(
            f"(a) kappa_hive AvailableNow, {args.slice} slices -> memory sink",
            secs,
            read,
            peak,
            at_start,
            DRIVER_RSS,
            rows_of(spark.table("bench_stream")),
        )
        pruned_columns = ",".join(RAW_COLUMNS)
        _, secs, peak, at_start = timed_in_driver(
            jvm_pid,
            lambda: run_stream(
                spark, start, end, args.slice, work, "bench_pruned", columns=pruned_columns
            ),
        )
        pruned = Measure(
            f"(a1) = (a) reading only {', '.join(RAW_COLUMNS)} (option `columns`)",
            secs,
            read,
            peak,
            at_start,
            DRIVER_RSS,
            rows_of(spark.table("bench_pruned")),
        )
        read_progress, secs, peak, at_start = timed_in_driver(
            jvm_pid, lambda: run_read_only(spark, start, end, args.slice, work, "bench_read")
        )
        read_only = Measure(
            f"(a0) kappa_hive alone: same {args.slice} slices -> noop sink, no aggregation",
            secs,
            sum(p["numInputRows"] for p in read_progress),
            peak,
            at_start,
            DRIVER_RSS,
        )
        batch_rows, secs, peak, at_start = timed_in_driver(
            jvm_pid, lambda: run_batch(spark, start, end)
        )
        batch = Measure(
            "(b) Spark batch query over the table, collected",
            secs,
            n,
            peak,
            at_start,
            DRIVER_RSS,
            batch_rows,
        )
        spark.stop()
        raw = run_raw(location, start, end, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    load_after = os.getloadavg()

    # The stream reads the table once plus 3 one-row end-of-input markers.
    markers = read - n
    same_ab = stream.result == batch.result and pruned.result == batch.result
    same_bc = batch.result == raw.result
    totals, lines = breakdown(progress)
    read_totals, read_lines = breakdown(read_progress)
    read_batch_s = read_totals.get("triggerExecution", 0) / 1000 / max(1, len(read_progress))
    data_batches = sum(1 for line in lines if " data " in line)

    wall_ratio = stream.seconds / batch.seconds
    pruned_ratio = pruned.seconds / batch.seconds
    rate_ratio = stream.rows_per_s / raw.rows_per_s
    read_ratio = read_only.rows_per_s / raw.rows_per_s
    marker_ms = sorted(
        p["durationMs"].get("triggerExecution", 0)
        for p in progress
        if json.loads(p["sources"][0]["endOffset"] or "{}").get("phase") == "end"
    )
    fixed = f"{marker_ms[len(marker_ms) // 2] / 1000:.2f} s" if marker_ms else "n/a"
    data_ms = [
        p["durationMs"].get("triggerExecution", 0)
        for p in progress
        if json.loads(p["sources"][0]["endOffset"] or "{}").get("phase") == "data"
    ]
    when = datetime.now(tz=UTC).strftime("%Y-%m-%d %H:%M UTC")
    table_rows = "\n".join(
        f"| {m.name} | {m.seconds:.2f} | {m.rows_per_s:,.0f} | {m.peak_mb:,.0f}"
        + (f" (at start {m.start_mb:,.0f})" if m.start_mb is not None else "")
        + f" | {m.memory_note} |"
        for m in (stream, pruned, read_only, batch, raw)
    )
    parts_total = " | ".join(
        f"{k} {v / 1000:.1f} s" for k, v in sorted(totals.items(), key=lambda kv: -kv[1])
    )
    report = f"""## Hive streaming source (`bench/bench_hive.py`)

Measured {when} on {platform.machine()} with {os.cpu_count()} CPUs shared with other work
(load average {load_before[0]:.1f} before, {load_after[0]:.1f} after), Spark master
`{args.master}`, pyspark {__import__("pyspark").__version__}. Table: {n:,} events over
{args.days} days ({args.rows_per_day:,} rows/day), parquet, partitioned by `dt`/`hr`,
{raw.files} files (`--files-per-hour {args.files_per_hour}`); written in {written_s:.0f} s.
Aggregation: count and sum(amount) per 1-hour window per key ({len(batch.result):,} windows).

| run | seconds | rows/s | peak RSS MB | what the memory figure measures |
|---|---:|---:|---:|---|
{table_rows}

Results identical: (a) = (a1) = (b) **{same_ab}**, (b) = (c) **{same_bc}**.
(a) read {read:,} rows ({markers} end-of-input marker rows) in {len(progress)} micro-batches
({data_batches} with data); (c) read its files in {raw.read_seconds:.2f} s of its
{raw.seconds:.2f} s. Each run follows a warm-up on a six-hour range.

Ratios: (a)/(b) wall time **{wall_ratio:.2f}x** (goal <= 1.5x: {verdict(wall_ratio, 1.5, True)});
(a) read rate / (c) read rate **{rate_ratio:.0%}** (goal >= 60%: {verdict(rate_ratio, 0.6, False)}).
With column pruning, (a1)/(b) **{pruned_ratio:.2f}x**.
Read rate of the source alone, (a0) / (c): **{read_ratio:.0%}** ({len(read_progress)}
micro-batches). (c) and (a1) read only the three columns the aggregation needs, (b) lets
Spark prune them, (a) and (a0) read every data column of the table.

Where (a)'s time goes (sum of `durationMs` over its micro-batches): {parts_total}.
A one-row end-of-input marker batch of (a) takes {fixed} (median): the fixed cost of one
stateful micro-batch here; its {data_batches} data batches took
{sum(data_ms) / 1000:.1f} s, {sum(data_ms) / 1000 / max(1, data_batches):.2f} s each on average.
(a0) spent {read_totals.get("triggerExecution", 0) / 1000:.1f} s in its micro-batches
({read_batch_s:.2f} s each; latestOffset {read_totals.get("latestOffset", 0) / 1000:.1f} s,
addBatch {read_totals.get("addBatch", 0) / 1000:.1f} s in all).
"""
    print()
    print(report)
    print("per micro-batch (ms):")
    print("\n".join(lines))
    print("(a0) per micro-batch (ms):")
    print("\n".join(read_lines))
    if not args.no_docs:
        write_section(report)
        print(f"\nwrote the Hive section of {DOC}")
    if not (same_ab and same_bc):
        raise SystemExit("results differ")


if __name__ == "__main__":
    main()
