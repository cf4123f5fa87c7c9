"""The state-heavy case: the demo's sessionization job over months of riders, two ways, one
fixed driver memory for both.

    .venv/bin/python bench/bench_state.py [--days 7,30,90,365] [--rows-per-day 200000]
        [--rounds 2] [--rounds-of 365=1] [--driver-memory 1g] [--timeout 1800] [--work DIR]
        [--no-docs]
        [--ways A,B[,D]] [--a2-java-options="-Dspark.sql...=..."] [--a2-hive "key = value"]
        [--memory-profile]

For each day count a Hive table of generated rider app events (the demo's schema,
:data:`kappaplus.examples.generate.RIDER_EVENT_DDL`; partitioned ``dt``/``hr``) is written:
``--rows-per-day / 20`` riders, each opening the app in 4 sessions a day (one per 6-hour
slot, starting anywhere in its first 5 hours) of 2 to 8 events 5 to 239 s apart, so
sessions are always more than the job's 30-minute gap apart and every generated session is
one output session. Then, alternating ``A B A B`` (``--rounds`` pairs, so a drift of the
machine's load hits both alike):

- (A) ``kappa run backfill_jobs:RIDER_SESSIONS --mode backfill`` (the demo's
  :data:`kappaplus.examples.sessionization.JOB`, unchanged) with the project's defaults
  over the range, into its Hive backfill table; the whole CLI process is timed;
- (B) the job's transform as one plain PySpark batch query over the same table and range,
  written to a table (a whole process too, its session built by the same
  :func:`kappaplus.session.create_session`);
- (D, with ``--ways A,B,D``) the same job as Spark's own streaming query over the table's
  files: ``readStream.parquet`` with as many files a micro-batch as hold (A)'s 500,000-row
  slice (the files' modification times set in event-time order first, since that source
  reads the oldest first), the state store ``kappa run`` gives, a parquet file sink,
  ``availableNow``. What a streaming query costs without kappaplus: no exactly-once Hive
  sink, no audit, and no end-of-input micro-batch, so the sessions still open at its end
  are missing from its output (reported as different).

Both run with ``KAPPA_DRIVER_MEMORY=--driver-memory`` (``spark.driver.memory`` on
``local[2]``, the project's default master); a way that fails or passes ``--timeout`` is
reported as not finished. Per way: wall seconds, peak PSS over its process tree (sampled
every 0.5 s: the driver JVM, its RocksDB and Python workers), and from the Spark event log
(``spark.eventLog.*`` given as JVM system properties through ``KAPPA_DRIVER_JAVA_OPTIONS``)
the tasks' ``memoryBytesSpilled`` / ``diskBytesSpilled``, the largest task's peak execution
memory, the driver JVM's peak heap, and for (A) its micro-batches, state rows and where each
micro-batch's time went (``durationMs``). Every finished way's output is compared with the
first finished B's (both directions of ``exceptAll``), and with what the generator wrote
(sessions count, events count). ``--ways A,A2`` measures a setting against the defaults: A2 is
A with ``--a2-java-options`` added to the driver's JVM options (``-Dspark.sql...`` settings
reach the session as Spark reads ``spark.*`` system properties) and ``--a2-hive`` lines added
to its Hive input binding (``evictBetweenSlices = false``). ``--memory-profile`` samples
A's driver JVM and Python every 2 s (:mod:`memory_profile`): PSS and the JVM's compiled code,
class metadata, thread stacks and heap at fixed seconds of the run, so runs of different
lengths compare at the same second.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench_backfill import BASE, DAY, ROOT, child, child_may_fail, iso, run_timed, session, stop
from doc_blocks import replace_block
from memory_profile import NMT_OPTION, TABLE_HEAD, MemoryProfile

from kappaplus.examples.sessionization import SESSION_COLUMNS

BENCH = Path(__file__).resolve().parent
DOC = ROOT / "docs" / "benchmarks.md"
START, END = "<!-- bench_state:start -->", "<!-- bench_state:end -->"
SLOTS = 4
"""Sessions per rider per day, one per slot of 24 / SLOTS hours."""
SLOT_S = DAY // SLOTS
MEAN_EVENTS = 5
"""Events per session: 2 to 8, uniform."""
AREAS = ("downtown", "airport", "mission", "soma", "marina", "sunset")
LATER_TYPES = ("search", "view_price", "request_trip", "cancel_trip")
OUTPUT_COLUMNS = SESSION_COLUMNS  # the example's own


def table_name(days: int, rows_per_day: int) -> str:
    return f"bench_riders_{days}d_{rows_per_day}"


def riders_of(rows_per_day: int) -> int:
    return max(1, rows_per_day // (SLOTS * MEAN_EVENTS))


# -- child processes ----------------------------------------------------------------------


def child_generate(args: argparse.Namespace) -> None:
    """Write the rider events table of ``--days`` (see the module docstring)."""
    from pyspark.sql import functions as F

    spark = session("bench-state-generate")
    riders = riders_of(args.rows_per_day)
    sessions = args.days * riders * SLOTS
    sid = F.col("id")
    day, rest = F.floor(sid / (riders * SLOTS)), sid % (riders * SLOTS)
    start = (
        F.lit(BASE)
        + day * DAY
        + (rest % SLOTS) * SLOT_S
        + F.pmod(F.xxhash64(sid, F.lit(1)), F.lit(SLOT_S - 3600))
    )
    events = (
        spark.range(0, sessions, numPartitions=max(2, sessions // 200_000))
        .select(
            sid,
            F.format_string("rider-%07d", F.floor(rest / SLOTS).cast("int")).alias("rider_id"),
            start.alias("start"),
            F.element_at(
                F.array(*map(F.lit, AREAS)), (F.pmod(F.xxhash64(sid, F.lit(4)), 6) + 1).cast("int")
            ).alias("area"),
            F.posexplode(F.sequence(F.lit(0), F.pmod(F.xxhash64(sid, F.lit(0)), 7) + 1)),
        )
        .select(
            F.format_string("e%d-%d", sid, F.col("pos")).alias("event_id"),
            "rider_id",
            F.when(F.col("pos") == 0, F.lit("app_open"))
            .otherwise(
                F.element_at(
                    F.array(*map(F.lit, LATER_TYPES)),
                    (F.pmod(F.xxhash64(sid, F.col("pos"), F.lit(3)), 4) + 1).cast("int"),
                )
            )
            .alias("event_type"),
            "area",
            F.timestamp_seconds(
                F.col("start")
                + F.col("pos") * 122
                + F.pmod(F.xxhash64(sid, F.col("pos"), F.lit(2)), F.lit(118))
            ).alias("event_time"),
        )
    )
    table = table_name(args.days, args.rows_per_day)
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    (
        events.withColumn("dt", F.date_format("event_time", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("event_time", "HH"))
        .repartition(args.days * 24, "dt", "hr")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )
    rows = spark.table(table).count()
    Path(args.out).write_text(json.dumps({"rows": rows, "sessions": sessions, "riders": riders}))
    stop(spark)


def child_batch(args: argparse.Namespace) -> None:
    """(B): the job's transform as one batch query over ``[start, end)``, into a table."""
    from pyspark.sql import functions as F

    from kappaplus.examples.sessionization import JOB, sessionize

    spark = session("bench-state-batch")
    end = BASE + args.days * DAY
    events = spark.table(table_name(args.days, args.rows_per_day)).where(
        (F.col("event_time") >= F.lit(iso(BASE)).cast("timestamp"))
        & (F.col("event_time") < F.lit(iso(end)).cast("timestamp"))
    )
    found = sessionize({"rider_events": events}, JOB.make_params())["sessions"]
    spark.sql(f"DROP TABLE IF EXISTS {args.table}")
    found.write.format("parquet").saveAsTable(args.table)
    Path(args.out).write_text(json.dumps({"table": args.table}))
    stop(spark)


def child_filestream(args: argparse.Namespace) -> None:
    """(D): the same job as Spark's own streaming query over the table's files
    (``readStream.parquet``, ``maxFilesPerTrigger`` files a micro-batch, the files ordered by
    their event time beforehand), with the state store ``kappa run`` gives (RocksDB), into a
    parquet file sink, ``availableNow``. No end-of-input micro-batch: its last sessions stay
    open in the state, so its output lacks them."""
    from kappaplus.examples.sessionization import JOB, sessionize
    from kappaplus.session import create_session
    from kappaplus.state_store import STATE_STORE_SETTINGS

    spark = create_session("bench-state-filestream", defaults=STATE_STORE_SETTINGS)
    name = table_name(args.days, args.rows_per_day)
    schema = spark.table(name).schema
    stream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .parquet(args.location)
        .withWatermark("event_time", JOB.watermark_delay)
    )
    found = sessionize({"rider_events": stream}, JOB.make_params())["sessions"]
    output = Path(args.checkpoint).parent / f"{args.table}-files"
    for fresh in (output, Path(args.checkpoint)):  # a run of its own, not a resumed one
        shutil.rmtree(fresh, ignore_errors=True)
    query = (
        found.writeStream.format("parquet")
        .option("path", str(output))
        .option("checkpointLocation", args.checkpoint)
        .outputMode("append")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.sql(f"DROP TABLE IF EXISTS {args.table}")
    spark.sql(f"CREATE TABLE {args.table} USING parquet LOCATION '{output}'")
    Path(args.out).write_text(json.dumps({"table": args.table}))
    stop(spark)


def files_in_event_time_order(location: str) -> int:
    """Give the data files under ``location`` modification times one second apart in the
    order of their ``dt=``/``hr=`` directories (zero-padded: the text order is the time
    order), so Spark's file stream source, which reads files oldest first, reads them in
    event-time order as (A) does; the number of files. Within the last hour, so the
    source's ``maxFileAge`` (7 days) drops none."""
    files = sorted(
        path
        for path in Path(location).rglob("*.parquet")
        if not any(part.startswith((".", "_")) for part in path.parts)
    )
    first = time.time() - len(files)
    for i, path in enumerate(files):
        os.utime(path, (first + i, first + i))
    return len(files)


def child_compare(args: argparse.Namespace) -> None:
    """Not timed: each of ``--tables`` (comma separated) against the first, both ways of
    ``exceptAll``, and each one's sessions and events against what was generated."""
    from pyspark.sql import functions as F

    spark = session("bench-state-compare")
    tables = args.table.split(",")
    frames = {t: spark.table(t).select(*OUTPUT_COLUMNS) for t in tables}
    truth = frames[tables[0]]
    out: dict[str, Any] = {}
    for name, frame in frames.items():
        totals = frame.agg(F.count("*").alias("n"), F.sum("event_count").alias("e")).first()
        out[name] = {
            "sessions": int(totals.n),
            "events": int(totals.e or 0),
            "missing": frame is truth and 0 or truth.exceptAll(frame).count(),
            "extra": frame is truth and 0 or frame.exceptAll(truth).count(),
        }
    Path(args.out).write_text(json.dumps(out))
    stop(spark)


# -- what Spark's event log says ----------------------------------------------------------


@dataclass
class SparkSide:
    """Totals of one application's event log."""

    memory_spilled: int = 0
    disk_spilled: int = 0
    peak_task_execution: int = 0
    peak_heap: int = 0
    batches: int = 0
    input_rows: int = 0
    state_rows: int = 0
    state_memory: int = 0
    task_cpu_ms: float = 0.0
    task_gc_ms: int = 0
    state_updates_ms: int = 0
    state_removals_ms: int = 0
    phases_ms: dict[str, int] = field(default_factory=dict)


def spark_side(directory: Path) -> SparkSide:
    got = SparkSide()
    for path in sorted(directory.rglob("*")):
        # Spark writes an application's log as eventlog_v2_<app>/events_<n>_<app> (rolling)
        # or as one file named after the application
        if not path.is_file() or path.name.startswith((".", "appstatus")):
            continue
        with open(path) as lines:
            for line in lines:
                event = json.loads(line)
                kind = event.get("Event", "")
                if kind == "SparkListenerTaskEnd":
                    metrics = event.get("Task Metrics") or {}
                    got.memory_spilled += metrics.get("Memory Bytes Spilled", 0)
                    got.disk_spilled += metrics.get("Disk Bytes Spilled", 0)
                    got.task_cpu_ms += metrics.get("Executor CPU Time", 0) / 1e6
                    got.task_gc_ms += metrics.get("JVM GC Time", 0)
                    got.peak_task_execution = max(
                        got.peak_task_execution, metrics.get("Peak Execution Memory", 0)
                    )
                elif kind == "SparkListenerStageExecutorMetrics":
                    peaks = event.get("Executor Metrics") or {}
                    got.peak_heap = max(got.peak_heap, peaks.get("JVMHeapMemory", 0))
                elif kind.endswith("QueryProgressEvent"):
                    progress = event["progress"]
                    got.batches += 1  # the end-of-input marker batch included
                    got.input_rows += sum(
                        s.get("numInputRows", 0) for s in progress.get("sources") or []
                    )
                    for phase, ms in (progress.get("durationMs") or {}).items():
                        got.phases_ms[phase] = got.phases_ms.get(phase, 0) + ms
                    for op in progress.get("stateOperators") or []:
                        got.state_rows = max(got.state_rows, op.get("numRowsTotal", 0))
                        got.state_memory = max(got.state_memory, op.get("memoryUsedBytes", 0))
                        got.state_updates_ms += op.get("allUpdatesTimeMs", 0)
                        got.state_removals_ms += op.get("allRemovalsTimeMs", 0)
    return got


def capped_env(env: dict[str, str], args: argparse.Namespace, events: Path) -> dict[str, str]:
    """``env`` with the memory cap and an event log into ``events``."""
    events.mkdir(parents=True, exist_ok=True)
    logging = (
        f"-Dspark.eventLog.enabled=true -Dspark.eventLog.dir={events.as_uri()} "
        "-Dspark.eventLog.compress=false -Dspark.eventLog.logStageExecutorMetrics=true"
    )
    java = f"{env.get('KAPPA_DRIVER_JAVA_OPTIONS', '')} {logging}".strip()
    return {**env, "KAPPA_DRIVER_MEMORY": args.driver_memory, "KAPPA_DRIVER_JAVA_OPTIONS": java}


# -- the ways -----------------------------------------------------------------------------


@dataclass
class Way:
    days: int
    way: str
    round: int
    seconds: float
    peak_pss_mb: float
    status: int
    table: str
    spark: SparkSide
    timed_out: bool = False
    load: str = ""
    compared: dict = field(default_factory=dict)

    @property
    def finished(self) -> bool:
        return self.status == 0 and not self.timed_out


def run_a(
    args: argparse.Namespace, work: Path, env: dict[str, str], days: int, r: int, way: str = "A"
) -> Way:
    """(A): ``kappa run`` of the demo's job in its own process, defaults but the cap; (A2)
    the same with ``--a2-java-options`` added to the driver's options (a setting to try)."""
    tag = f"{days}d_r{r}{'_a2' if way == 'A2' else ''}{RUN_TAG[0]}"
    config = work / f"sessions-{tag}.toml"
    config.write_text(
        'job = "backfill_jobs:RIDER_SESSIONS"\n\n'
        "[inputs.rider_events.hive]\n"
        f'table = "{table_name(days, args.rows_per_day)}"\n'
        'event_time_column = "event_time"\n'
        + (f"{args.a2_hive}\n" if way == "A2" and args.a2_hive else "")
        + "\n[outputs.sessions.hive]\n"
        f'table = "bench_state_a_{tag}"\n'
    )
    events = work / "events" / f"A-{tag}"
    cmd = [
        str(Path(sys.executable).parent / "kappa"),
        *args.kappa_arg,
        "run",
        "backfill_jobs:RIDER_SESSIONS",
        "--mode",
        "backfill",
        "-c",
        str(config),
        "--start",
        iso(BASE),
        "--end",
        iso(BASE + days * DAY),
        "--checkpoint",
        str(work / "checkpoints" / tag),
        "--fresh",
        "--no-progress",
        *args.run_arg,
    ]
    capped = capped_env(env, args, events)
    if way == "A2":
        java = f"{capped['KAPPA_DRIVER_JAVA_OPTIONS']} {args.a2_java_options}"
        capped["KAPPA_DRIVER_JAVA_OPTIONS"] = java
    profile = None
    if args.memory_profile:
        capped["KAPPA_DRIVER_JAVA_OPTIONS"] += f" {NMT_OPTION}"
        profile = MemoryProfile(str(events))
        profile.start()
    timed = run_timed(cmd, capped, timeout=args.timeout)
    if profile is not None:
        profile.stop()
        PROFILES.extend(profile.table(f"{days} d {way} r{r}"))
    return Way(
        days,
        way,
        r,
        timed.seconds,
        timed.peak_pss_mb,
        timed.returncode,
        f"bench_state_a_{tag}_backfill",
        spark_side(events),
        timed_out=timed.seconds >= args.timeout,
    )


def run_b(args: argparse.Namespace, work: Path, env: dict[str, str], days: int, r: int) -> Way:
    return run_child_way(args, work, env, days, r, "B", "batch")


def run_d(
    args: argparse.Namespace, work: Path, env: dict[str, str], days: int, r: int, info: dict
) -> Way:
    location = work / "home" / "warehouse" / table_name(days, args.rows_per_day)
    files = files_in_event_time_order(str(location))
    return run_child_way(
        args,
        work,
        env,
        days,
        r,
        "D",
        "filestream",
        location=location,
        files_per_trigger=max(1, -(-files * D_SLICE_ROWS // max(1, info["rows"]))),
        checkpoint=work / "checkpoints" / f"D-{days}d_r{r}{RUN_TAG[0]}",
    )


def run_child_way(
    args: argparse.Namespace,
    work: Path,
    env: dict[str, str],
    days: int,
    r: int,
    way: str,
    role: str,
    **options: Any,
) -> Way:
    """(B) or (D): the bench's own child ``role`` in a process of its own, under the cap and
    with its event log, writing table ``bench_state_<way>_<days>d_r<round>``."""
    tag = f"{days}d_r{r}{RUN_TAG[0]}"
    events = work / "events" / f"{way}-{tag}"
    table = f"bench_state_{way.lower()}_{tag}"
    timed, _ = child_may_fail(
        role,
        work,
        capped_env(env, args, events),
        __file__,
        days=days,
        rows_per_day=args.rows_per_day,
        timeout=args.timeout,
        table=table,
        **options,
    )
    return Way(
        days,
        way,
        r,
        timed.seconds,
        timed.peak_pss_mb,
        timed.returncode,
        table,
        spark_side(events),
        timed_out=timed.seconds >= args.timeout,
    )


D_SLICE_ROWS = 500_000
"""(D) reads as many files a micro-batch as hold about this many rows: (A)'s slice."""


#: A suffix of the output tables: with ``--work`` each run writes new ones.
RUN_TAG = [""]

PROFILES: list[str] = []
"""``--memory-profile`` rows of every A run (:mod:`memory_profile`)."""


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def rounds_of(args: argparse.Namespace, days: int) -> int:
    """The rounds of ``days``: ``--rounds-of`` (``365=1,90=2``), else ``--rounds``."""
    for item in filter(None, args.rounds_of.split(",")):
        size, _, count = item.partition("=")
        if int(size) == days:
            return int(count)
    return int(args.rounds)


def bench_days(args: argparse.Namespace, work: Path, env: dict[str, str], days: int) -> list[Way]:
    kept = work / f"riders-{days}d-{args.rows_per_day}.json"
    if args.work and kept.exists():
        info = json.loads(kept.read_text())
    else:
        gen, info = child(
            "generate", work, env, __file__, days=days, rows_per_day=args.rows_per_day
        )
        info["seconds"] = gen.seconds
        kept.write_text(json.dumps(info))
        print(f"{days} days: {info} ({gen.seconds:.0f} s)", file=sys.stderr)
    ways: list[Way] = []
    for r in range(rounds_of(args, days)):
        before = load()
        pair = [
            run_b(args, work, env, days, r)
            if way == "B"
            else run_d(args, work, env, days, r, info)
            if way == "D"
            else run_a(args, work, env, days, r, way)
            for way in args.ways.split(",")
        ]
        after = load()
        for w in pair:
            w.load = f"{before} -> {after}"
            print(f"{w}", file=sys.stderr)
        ways += pair
    done = [w for w in ways if w.finished]
    order = sorted(done, key=lambda w: w.way != "B")  # a B first: the reference
    if order:
        _, compared = child("compare", work, env, __file__, table=",".join(w.table for w in order))
        for w in order:
            w.compared = compared[w.table]
            w.compared["reference"] = order[0].way  # "A": no B finished
    for w in ways:
        w.compared["expected_sessions"] = info["sessions"]
        w.compared["expected_events"] = info["rows"]
    return ways


# -- the report ---------------------------------------------------------------------------


def mb(n: int) -> str:
    return f"{n / 2**20:,.0f}"


def verdict(w: Way) -> str:
    if not w.finished:
        return "did not finish" + (f" (killed at {w.seconds:.0f} s)" if w.timed_out else "")
    c = w.compared
    own = c["sessions"] == c["expected_sessions"] and c["events"] == c["expected_events"]
    same = c["missing"] == 0 and c["extra"] == 0
    differs = f"DIFFERENT ({c['missing']} missing, {c['extra']} extra)"
    generated = "as generated" if own else "NOT as generated"
    if c["reference"] != "B":
        return f"compared with the first A (no B); {c['sessions']:,} sessions {generated}"
    return f"{'equal' if same else differs}; {c['sessions']:,} sessions {generated}"


def render(ways: list[Way], args: argparse.Namespace, info: str) -> str:
    lines = [
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC, {info}; "
        f"`KAPPA_DRIVER_MEMORY={args.driver_memory}` (`spark.driver.memory`) on `local[2]` for "
        f"both ways, {args.rows_per_day:,} rows/day ({riders_of(args.rows_per_day):,} riders), "
        f"timeout {args.timeout:.0f} s. Load averages (1/5/15 min) before -> after each pair.",
        "",
        "| days | rows | way | round | status | seconds | peak PSS MB | spilled memory / "
        "disk MB | peak task exec. MB | peak heap MB | task CPU / GC s | micro-batches "
        "| max state rows | result vs first B | load |",
        "|---:|---:|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for w in ways:
        s = w.spark
        status = "ok" if w.finished else ("timeout" if w.timed_out else f"exit {w.status}")
        lines.append(
            f"| {w.days} | {w.compared.get('expected_events', 0):,} | {w.way} | {w.round + 1} "
            f"| {status} | {w.seconds:.1f} | {w.peak_pss_mb:,.0f} | {mb(s.memory_spilled)} / "
            f"{mb(s.disk_spilled)} | {mb(s.peak_task_execution)} | {mb(s.peak_heap)} "
            f"| {s.task_cpu_ms / 1000:.1f} / {s.task_gc_ms / 1000:.1f} | {s.batches or '-'} "
            f"| {s.state_rows:,} | {verdict(w)} | {w.load} |"
        )
    with_d = any(w.way == "D" for w in ways)
    lines += [
        "",
        "| days | A/B time (median of pairs) | A/B peak PSS | A peak PSS / smallest size's "
        "| B finished |" + (" D/B time | A/D time |" if with_d else ""),
        "|---:|---:|---:|---:|---|" + ("---:|---:|" if with_d else ""),
    ]
    a_base = None
    for days in sorted({w.days for w in ways}):
        a, b, d = ([w for w in ways if w.days == days and w.way == x] for x in ("A", "B", "D"))
        ratio = median_ratio(a, b, "seconds")
        pss = median_ratio(a, b, "peak_pss_mb")
        a_pss = statistics.median([w.peak_pss_mb for w in a if w.finished] or [0])
        a_base = a_base or a_pss
        lines.append(
            f"| {days} | {f'**{ratio:.2f}x**' if ratio else '-'} | "
            f"{f'{pss:.2f}x' if pss else '-'} | {f'{a_pss / a_base:.2f}x' if a_base else '-'} | "
            f"{sum(w.finished for w in b)} of {len(b)} |"
            + (
                "".join(
                    f" {f'{r:.2f}x' if r else '-'} |"
                    for r in (median_ratio(d, b, "seconds"), median_ratio(a, d, "seconds"))
                )
                if with_d
                else ""
            )
        )
    lines += ["", "Where (A)'s micro-batch time went (`durationMs` summed, s; first round):", ""]
    lines += [
        "| days | batches | "
        + " | ".join(PHASES)
        + " | state puts (task s) | state removals (task s) |"
    ]
    lines += ["|---:|---:|" + "---:|" * (len(PHASES) + 2)]
    for w in ways:
        if w.way in ("A", "A2") and w.round == 0:
            s = w.spark
            cells = " | ".join(f"{s.phases_ms.get(p, 0) / 1000:.1f}" for p in PHASES)
            lines.append(
                f"| {w.days} {w.way} | {s.batches} | {cells} | {s.state_updates_ms / 1000:.1f} "
                f"| {s.state_removals_ms / 1000:.1f} |"
            )
    return "\n".join(lines)


def median_ratio(tops: list[Way], bottoms: list[Way], figure: str) -> float | None:
    """The median over the rounds of ``figure`` of a way in ``tops`` over the same round's
    way in ``bottoms``, where both finished; None without such a round."""
    pairs = [(x, y) for x, y in zip(tops, bottoms, strict=False) if x.finished and y.finished]
    if not pairs:
        return None
    return statistics.median(getattr(x, figure) / getattr(y, figure) for x, y in pairs)


PHASES = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "addBatch",
    "walCommit",
    "commitOffsets",
)


def write_doc(text: str) -> None:
    replace_block(DOC, START, END, text)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", default="7,30,90,365")
    parser.add_argument("--rows-per-day", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--rounds-of",
        default="",
        help="rounds per size where they differ from --rounds, e.g. 365=1",
    )
    parser.add_argument("--driver-memory", default="1g")
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument("--work", help="keep tables and logs here and reuse its tables")
    parser.add_argument("--kappa-arg", action="append", default=[], help="a `kappa` option of A")
    parser.add_argument(
        "--run-arg",
        action="append",
        default=[],
        help="a `kappa run` option of A and A2, e.g. --run-arg='--trigger=1 second'",
    )
    parser.add_argument(
        "--ways",
        default="A,B",
        help="A, A2, B and D (Spark's own file stream source), in each round's order",
    )
    parser.add_argument(
        "--a2-java-options",
        default="",
        help="A2: A with these driver JVM options (-Dspark...)",
    )
    parser.add_argument(
        "--a2-hive", default="", help="A2: A with these TOML lines in its Hive input binding"
    )
    parser.add_argument(
        "--memory-profile",
        action="store_true",
        help="sample A's driver JVM (PSS, Native Memory Tracking) and its Python every 2 s",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--location", help=argparse.SUPPRESS)
    parser.add_argument("--files-per-trigger", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.days = int(args.days) if str(args.days).isdigit() else args.days
        {
            "generate": child_generate,
            "batch": child_batch,
            "filestream": child_filestream,
            "compare": child_compare,
        }[args.child](args)
        return
    if args.work:
        RUN_TAG[0] = f"_{int(datetime.now(tz=UTC).timestamp())}"
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-state-"))
    env = dict(os.environ)
    env["KAPPA_HOME"] = str(work / "home")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    info = f"{os.cpu_count()} CPUs shared with other work"
    ways: list[Way] = []
    try:
        for days in [int(d) for d in args.days.split(",")]:
            ways += bench_days(args, work, env, days)
            print(render(ways, args, info), file=sys.stderr)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = render(ways, args, info)
    print(text)
    if PROFILES:
        title = "Memory of (A) over its run (--memory-profile):"
        print("\n".join(["", title, "", *TABLE_HEAD, *PROFILES]))
    if not args.no_docs:
        write_doc(text)


if __name__ == "__main__":
    main()
