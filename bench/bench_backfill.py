"""`make bench`: a backfill five ways, each in its own process, side by side in one run.

    .venv/bin/python bench/bench_backfill.py [--days 1,7,30] [--rows-per-day 500000]
        [--session-days 7] [--ways A,F,B,C,D,E] [--files-per-hour 2]
        [--masters local,cluster] [--no-docs]

For each day count a table of ``--rows-per-day`` generated events per day (``id``, ``key``
(50 keys), ``rider`` (20,000 riders), ``amount``, event time ``ts``; parquet, partitioned
by ``dt``/``hr``, ``--files-per-hour`` files per hour, rows out of order inside files) is
written, then the same aggregation (count and sum of ``amount`` per 1-hour window per key)
runs as:

- (A) ``kappa run backfill_jobs:HOURLY --mode backfill`` with the defaults (adaptive
  slices, the JVM reader) into its Hive backfill table; the whole CLI process is timed;
- (A-py) the same with ``reader = "python"`` (the Python data source), for the read-path
  decision;
- (B) one Spark batch query over the table, collected (a whole process: session start
  included, as for A);
- (C) raw pyarrow: read the three columns of the range's files and ``group_by``;
- (D) Spark's own streaming file source, ``readStream.parquet`` with ``maxFilesPerTrigger``
  set so it runs as many data micro-batches as A, the same watermark and aggregation;
- (E) the path Kappa+ replaces: the history produced into a topic of the embedded broker
  (timed apart, as "E produce"), then the same job replayed from it with ``kappa run
  --mode stream --trigger available-now`` (``maxOffsetsPerTrigger`` 2,000,000, the backfill's
  default rows per slice) into its production table. Not run above ``--e-max-days`` (the
  embedded broker keeps topics in memory).

Plus the sessionization job (``backfill_jobs:SESSIONS``, 10-minute gap per rider) at
``--session-days`` with A and B. Every way's result is compared with B (windows ending
at or before the range's end). Peak memory is PSS summed over each way's process tree
(``/proc/<pid>/smaps_rollup``, sampled every 0.5 s): the driver JVM and its Python workers.

``--masters local,cluster`` runs A, B and D a second time on a Spark standalone cluster of
two workers (1 core, ``--executor-memory`` each) that the bench starts on loopback
(``tests/cluster/spark_cluster.py``), with the warehouse, lake and checkpoints on paths
both see; there peak PSS adds the executors' JVMs to the driver's tree. With a cluster, all
processes share one Hive metastore server (``kappaplus.local.metastore``), as ``kappa up``
gives them.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import dataclasses
import json
import math
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from doc_blocks import replace_block  # noqa: E402

from kappaplus.local.processes import parent_pid, process_tree

ROOT = Path(__file__).resolve().parents[1]
BENCH = Path(__file__).resolve().parent
DOC = ROOT / "docs" / "benchmarks.md"
CHART = ROOT / "docs" / "bench_backfill.png"
START, END = "<!-- bench_backfill:start -->", "<!-- bench_backfill:end -->"
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())
DAY = 86400
HOUR = 3600
KEYS = 50
RIDERS = 20_000


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def table_name(days: int) -> str:
    return f"bench_bf_{days}d"


# -- memory: PSS of a process tree --------------------------------------------------------


_LIBC = ctypes.CDLL(None, use_errno=True) if sys.platform == "linux" else None
_SYS_KCMP, _KCMP_VM = 312, 1  # x86_64


def shares_memory(pid: int, other: int) -> bool:
    """Whether ``pid`` runs in ``other``'s address space (``kcmp(2)``, ``KCMP_VM``): a
    child between ``vfork`` and ``exec``, as a JVM's ``posix_spawn`` makes one for every
    process it starts (Hadoop's local file system starts ``chmod`` for each file it
    creates). Its ``smaps_rollup`` is its parent's: counting it counts the JVM twice."""
    if _LIBC is None or platform.machine() != "x86_64":
        return False
    return _LIBC.syscall(_SYS_KCMP, pid, other, _KCMP_VM, 0, 0) == 0


def tree_pss(*roots: int) -> int:
    """Bytes of proportional set size of ``roots`` and their descendants, each process
    once, a child sharing its parent's address space not at all (:func:`shares_memory`)."""
    total = 0
    counted: set[int] = set()
    for pid in (p for root in roots for p in process_tree(root)):
        if pid in counted:
            continue
        parent = parent_pid(pid)
        if parent in counted and shares_memory(pid, parent):
            continue  # checked before reading: a child stops sharing, it never starts
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total += int(line.split()[1]) * 1024
                        break
        except OSError:
            continue
        counted.add(pid)
    return total


@dataclass
class Timed:
    seconds: float
    peak_pss_mb: float
    first_batch_s: float | None
    returncode: int
    first_batch_query_s: float | None = None
    """(A): from the query's start (its checkpoint's ``metadata``) to batch 0's commit."""


#: Pids outside a way's process tree that count in its memory (a cluster's executors).
EXTRA_PIDS: list[Callable[[], list[int]]] = []


def run_timed(
    cmd: list[str],
    env: dict[str, str],
    watch: tuple[Path, str] | None = None,
    timeout: float | None = None,
) -> Timed:
    """Run ``cmd``; wall seconds, peak PSS of its tree (and of :data:`EXTRA_PIDS`' trees),
    and when a path matching ``watch`` (a directory and a glob pattern under it) first
    existed. After ``timeout`` seconds its tree is killed (status -9)."""
    began = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=sys.stderr, stderr=sys.stderr)
    peak = 0
    first: list[float] = []
    stop = threading.Event()

    def sample() -> None:
        nonlocal peak
        while not stop.is_set():
            extra = [pid for pids in EXTRA_PIDS for pid in pids()]
            peak = max(peak, tree_pss(proc.pid, *extra))
            if watch is not None and not first and any(watch[0].glob(watch[1])):
                first.append(time.perf_counter() - began)
            stop.wait(0.5)

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        code = proc.wait(timeout)
    except subprocess.TimeoutExpired:
        for pid in reversed(process_tree(proc.pid)):
            with contextlib.suppress(OSError):
                os.kill(pid, 9)
        code = proc.wait()
    seconds = time.perf_counter() - began
    stop.set()
    thread.join()
    return Timed(seconds, peak / 2**20, first[0] if first else None, code)


# -- child processes ----------------------------------------------------------------------


def session(name: str):  # type: ignore[no-untyped-def]
    sys.path.insert(0, str(ROOT))
    from kappaplus.session import create_session

    return create_session(name)


def stop(spark) -> None:  # type: ignore[no-untyped-def]
    """Stop the session and wait for its JVM to exit, as ``kappa run`` does: the next way's
    process then finds the embedded metastore free, and every way is timed to the same end."""
    from kappaplus.core.jvm import shutdown_jvm

    spark.stop()
    shutdown_jvm()


def child_generate(args: argparse.Namespace) -> None:
    from pyspark.sql import functions as F

    spark = session("bench-generate")
    n = args.days * args.rows_per_day
    df = spark.range(0, n, numPartitions=max(2, n // 500_000)).select(
        F.col("id"),
        (F.col("id") * 7 % KEYS).cast("int").alias("key"),
        (F.col("id") * 13 % RIDERS).cast("int").alias("rider"),
        (F.col("id") * 31 % 1000).alias("amount"),
        (F.lit(BASE) + (F.rand(7) * (args.days * DAY)).cast("long")).cast("timestamp").alias("ts"),
    )
    table = table_name(args.days)
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    (
        df.withColumn("dt", F.date_format("ts", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("ts", "HH"))
        .withColumn("part", F.col("id") % args.files_per_hour)
        .repartition(args.days * 24 * args.files_per_hour, "dt", "hr", "part")
        .drop("part")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )
    location = spark.sql(f"DESCRIBE FORMATTED {table}").where("col_name = 'Location'").first()
    Path(args.out).write_text(json.dumps({"rows": n, "location": location.data_type}))
    stop(spark)


def hourly_rows(df) -> list[list[int]]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return sorted(
        [int(r.s), int(r.key), int(r.n), int(r.total)]
        for r in df.select(
            F.col("window_start").cast("long").alias("s"), "key", "n", "total"
        ).collect()
    )


def session_rows(df) -> list[list[int]]:  # type: ignore[no-untyped-def]
    from pyspark.sql import functions as F

    return sorted(
        [int(r.s), int(r.e), int(r.rider), int(r.n), int(r.total)]
        for r in df.select(
            F.col("session_start").cast("long").alias("s"),
            F.col("session_end").cast("long").alias("e"),
            "rider",
            "n",
            "total",
        ).collect()
    )


def child_batch(args: argparse.Namespace) -> None:
    """(B): the job's transform as one batch query over ``[start, end)``."""
    sys.path.insert(0, str(BENCH))
    from backfill_jobs import hourly, sessions
    from pyspark.sql import functions as F

    spark = session("bench-batch")
    end = BASE + args.days * DAY
    events = spark.table(table_name(args.days)).where(
        (F.col("ts") >= F.lit(iso(BASE)).cast("timestamp"))
        & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
    )
    if args.kind == "hourly":
        rows = hourly_rows(hourly({"events": events}, None)["counts"])  # type: ignore[arg-type]
    else:
        found = sessions({"events": events}, None)["sessions"]  # type: ignore[arg-type]
        rows = [r for r in session_rows(found) if r[1] <= end]
    Path(args.out).write_text(json.dumps({"rows": rows}))
    stop(spark)


def child_filestream(args: argparse.Namespace) -> None:
    """(D): ``readStream.parquet`` with ``maxFilesPerTrigger``, same watermark and job."""
    sys.path.insert(0, str(BENCH))
    from backfill_jobs import HOURLY, hourly

    spark = session("bench-filestream")
    schema = spark.table(table_name(args.days)).schema
    stream = (
        spark.readStream.schema(schema)
        .option("maxFilesPerTrigger", args.files_per_trigger)
        .parquet(args.location)
        .withWatermark("ts", HOURLY.watermark_delay)
    )
    query = (
        hourly({"events": stream}, None)["counts"]  # type: ignore[arg-type]
        .writeStream.format("memory")
        .queryName("d_out")
        .outputMode("append")
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    batches = len([p for p in query.recentProgress if p["numInputRows"] > 0])
    rows = hourly_rows(spark.table("d_out"))
    Path(args.out).write_text(json.dumps({"rows": rows, "batches": batches}))
    stop(spark)


def child_read_output(args: argparse.Namespace) -> None:
    """Read what (A) wrote (not timed)."""
    spark = session("bench-verify")
    df = spark.table(args.table)
    rows = hourly_rows(df) if args.kind == "hourly" else session_rows(df)
    Path(args.out).write_text(json.dumps({"rows": rows}))
    stop(spark)


def child_raw(args: argparse.Namespace) -> None:
    """(C): pyarrow reads the range's files (three columns) and groups."""
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    began = time.perf_counter()
    root = args.location.removeprefix("file:")
    paths = sorted(
        os.path.join(d, f)
        for d, _, files in os.walk(root)
        for f in files
        if f.endswith(".parquet") and not f.startswith((".", "_"))
    )
    table = pa.concat_tables(pq.read_table(p, columns=["ts", "key", "amount"]) for p in paths)
    read_s = time.perf_counter() - began
    micros = pc.cast(pc.cast(table["ts"], pa.timestamp("us", tz="UTC")), pa.int64())
    hour = pc.multiply(pc.divide(micros, HOUR * 1_000_000), HOUR)
    grouped = (
        pa.table({"s": hour, "key": table["key"], "amount": table["amount"]})
        .group_by(["s", "key"])
        .aggregate([("amount", "count"), ("amount", "sum")])
    )
    rows = sorted(
        [int(s), int(k), int(n), int(t)]
        for s, k, n, t in zip(
            grouped["s"].to_pylist(),
            grouped["key"].to_pylist(),
            grouped["amount_count"].to_pylist(),
            grouped["amount_sum"].to_pylist(),
            strict=True,
        )
    )
    out = {"rows": rows, "read_seconds": read_s, "rows_read": table.num_rows}
    out["seconds"] = time.perf_counter() - began
    Path(args.out).write_text(json.dumps(out))


# -- the driver ---------------------------------------------------------------------------


@dataclass
class Result:
    days: int
    job: str
    way: str
    seconds: float
    rows: int
    peak_pss_mb: float
    batches: str
    correct: str
    first_batch_s: float | None = None
    note: str = ""
    master: str = "local"
    first_batch_query_s: float | None = None

    @property
    def rows_per_s(self) -> float:
        return self.rows / self.seconds if self.seconds else 0.0


def child(
    role: str, work: Path, env: dict[str, str], script: str = __file__, **options: Any
) -> tuple[Timed, dict]:
    """Run ``script --child role`` (this file's by default) timed; its JSON answer."""
    timed, answer = child_may_fail(role, work, env, script, **options)
    if answer is None:
        raise SystemExit(f"bench child {role} failed with status {timed.returncode}")
    return timed, answer


def child_may_fail(
    role: str,
    work: Path,
    env: dict[str, str],
    script: str = __file__,
    timeout: float | None = None,
    **options: Any,
) -> tuple[Timed, dict | None]:
    """:func:`child`, but a child that fails (or is killed after ``timeout`` seconds)
    answers None; its status is in the timing."""
    out = work / f"{role}-{time.monotonic_ns()}.json"
    cmd = [sys.executable, script, "--child", role, "--out", str(out)]
    for key, value in options.items():
        cmd += [f"--{key.replace('_', '-')}", str(value)]
    timed = run_timed(cmd, env, timeout=timeout)
    if timed.returncode != 0 or not out.exists():
        return timed, None
    return timed, json.loads(out.read_text())


def table_suffix(reader: str = "auto", master: str = "local") -> str:
    """What (A)'s output table names add for a non-default reader or master."""
    return ("" if reader == "auto" else f"_{reader}") + ("" if master == "local" else f"_{master}")


def job_config(
    work: Path, job: str, days: int, reader: str = "auto", master: str = "local"
) -> Path:
    output = "counts" if job == "HOURLY" else "sessions"
    suffix = table_suffix(reader, master)
    path = work / f"{job.lower()}-{days}d{suffix}.toml"
    path.write_text(
        f'job = "backfill_jobs:{job}"\n'
        'watermark_delay = "2 minutes"\n\n'
        "[inputs.events.hive]\n"
        f'table = "{table_name(days)}"\n'
        'event_time_column = "ts"\n'
        f'reader = "{reader}"\n'
        + "".join(f"{key} = {value}\n" for key, value in INPUT_OPTIONS.items())
        + "\n"
        f"[outputs.{output}.hive]\n"
        f'table = "bench_{job.lower()}_{days}d{suffix}{RUN_TAG[0]}"\n'
    )
    return path


#: A suffix of (A)'s output tables: with ``--work`` each run writes new ones (a backfill
#: refuses a table another run's rows are in).
RUN_TAG = [""]
#: Extra ``[inputs.events.hive]`` settings of (A) (``--input-option``, TOML values).
INPUT_OPTIONS: dict[str, str] = {}
#: Extra ``kappa`` options of (A), before ``run`` (``--kappa-arg``, e.g. ``-v``).
KAPPA_ARGS: list[str] = []

E_TOPIC = "bench-history"
E_BATCH = 2_000_000


def child_produce(args: argparse.Namespace) -> None:
    """(E), first half: produce every row of the range's files to the topic, as JSON."""
    import pyarrow.parquet as pq
    from confluent_kafka import Producer

    root = args.location.removeprefix("file:")
    producer = Producer(
        {
            "bootstrap.servers": args.table,
            "linger.ms": 50,
            "batch.num.messages": 10000,
            "compression.type": "lz4",
            "log_level": 0,
        }
    )
    sent = 0
    for directory, _, files in sorted(os.walk(root)):
        for name in sorted(files):
            if not name.endswith(".parquet") or name.startswith((".", "_")):
                continue
            table = pq.read_table(
                os.path.join(directory, name), columns=["id", "key", "rider", "amount", "ts"]
            )
            for row in table.to_pylist():
                row["ts"] = row["ts"].strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                while True:
                    try:
                        producer.produce(E_TOPIC, value=json.dumps(row).encode())
                        break
                    except BufferError:
                        producer.poll(0.1)
                sent += 1
            producer.poll(0)
    if producer.flush(300) != 0:
        raise SystemExit("producing the history did not finish")
    Path(args.out).write_text(json.dumps({"rows": sent}))


def e_config(work: Path, days: int, bootstrap: str) -> Path:
    path = work / f"hourly-{days}d-stream.toml"
    path.write_text(
        'job = "backfill_jobs:HOURLY"\n'
        'watermark_delay = "2 minutes"\n\n'
        "[inputs.events.kafka]\n"
        f'topic = "{E_TOPIC}"\n'
        f'bootstrap_servers = "{bootstrap}"\n'
        'starting_offsets = "earliest"\n'
        f"maxOffsetsPerTrigger = {E_BATCH}\n\n"
        "[outputs.counts.hive]\n"
        f'table = "bench_hourly_{days}d{RUN_TAG[0]}_stream"\n'
    )
    return path


def run_stream(work: Path, env: dict[str, str], days: int, location: str) -> tuple[Timed, Timed]:
    """(E): produce the history into a fresh embedded broker, then ``kappa run --mode
    stream`` over it; (produce timing, stream timing)."""
    from kappaplus.local.broker import EmbeddedBroker, create_topic
    from kappaplus.local.processes import free_port

    broker = EmbeddedBroker(work / f"broker-{days}", port=free_port())
    bootstrap = broker.start()
    try:
        create_topic(bootstrap, E_TOPIC, partitions=1)
        produced, _ = child("produce", work, env, location=location, table=bootstrap)
        checkpoints = work / "checkpoints" / f"E-{days}{RUN_TAG[0]}"
        cmd = [
            str(Path(sys.executable).parent / "kappa"),
            "run",
            "backfill_jobs:HOURLY",
            "--mode",
            "stream",
            "-c",
            str(e_config(work, days, bootstrap)),
            "--trigger",
            "available-now",
            "--checkpoint",
            str(checkpoints),
            "--no-progress",
        ]
        timed = run_timed(cmd, env, watch=(checkpoints, "**/counts/commits/0"))
        if timed.returncode != 0:
            raise SystemExit(f"kappa run --mode stream failed with status {timed.returncode}")
        return produced, timed
    finally:
        broker.stop()


def run_kappa(
    work: Path,
    env: dict[str, str],
    job: str,
    days: int,
    reader: str = "auto",
    master: str = "local",
) -> tuple[Timed, int, int]:
    """(A): ``kappa run`` in its own process; (timing, data batches, marker batches)."""
    config = job_config(work, job, days, reader, master)
    checkpoints = work / "checkpoints" / f"{job}-{days}-{reader}{RUN_TAG[0]}"
    output = "counts" if job == "HOURLY" else "sessions"
    cmd = [
        str(Path(sys.executable).parent / "kappa"),
        *KAPPA_ARGS,
        "run",
        f"backfill_jobs:{job}",
        "--mode",
        "backfill",
        "-c",
        str(config),
        "--start",
        iso(BASE),
        "--end",
        iso(BASE + days * DAY),
        "--checkpoint",
        str(checkpoints),
        "--fresh",
        "--no-progress",
    ]
    slug = f"bench-{job.lower()}"
    # <root>/<job>/<mode>/<run identity>/<output>: one identity per config
    runs = checkpoints / slug / "backfill"
    timed = run_timed(cmd, env, watch=(runs, f"*/{output}/commits/0"))
    if timed.returncode != 0:
        raise SystemExit(f"kappa run {job} failed with status {timed.returncode}")
    started = sorted(runs.glob(f"*/{output}/metadata"))
    committed = sorted(runs.glob(f"*/{output}/commits/0"))
    if started and committed:
        query_s = committed[0].stat().st_mtime - started[0].stat().st_mtime
        timed = dataclasses.replace(timed, first_batch_query_s=query_s)
    data = markers = 0
    for offsets in runs.glob(f"*/{output}/offsets/[0-9]*"):
        last = offsets.read_text().strip().splitlines()[-1]
        phase = json.loads(last).get("phase")
        data += phase == "data"
        markers += phase == "end"
    return timed, data, markers


def count_files(location: str) -> int:
    root = location.removeprefix("file:")
    return sum(
        1
        for _, _, files in os.walk(root)
        for f in files
        if f.endswith(".parquet") and not f.startswith((".", "_"))
    )


def generate(args: argparse.Namespace, work: Path, env: dict[str, str], days: int) -> dict:
    """Write the table of ``days`` (on the local master); its row count and location. With
    ``--work``, a table written there before at the same size is reused."""
    kept = work / f"table-{days}d-{args.rows_per_day}-{args.files_per_hour}.json"
    if args.work and kept.exists():
        return json.loads(kept.read_text())
    gen, info = child(
        "generate",
        work,
        env,
        days=days,
        rows_per_day=args.rows_per_day,
        files_per_hour=args.files_per_hour,
    )
    print(f"{days} days: {info['rows']:,} rows written in {gen.seconds:.0f} s", file=sys.stderr)
    if args.work:
        kept.write_text(json.dumps(info))
    return info


#: The ways a cluster run measures (C reads files in-process, E needs the local broker).
CLUSTER_WAYS = {"A", "B", "D"}


def bench_days(
    args: argparse.Namespace,
    work: Path,
    env: dict[str, str],
    days: int,
    info: dict,
    master: str = "local",
) -> list[Result]:
    results: list[Result] = []
    ways = set(args.ways.split(","))
    if master != "local":
        ways &= CLUSTER_WAYS
        work = work / master
        work.mkdir(exist_ok=True)
    rows, location = info["rows"], info["location"]
    timed_b, truth = child("batch", work, env, days=days, kind="hourly")
    expected = truth["rows"]
    results.append(
        Result(days, "hourly", "B", timed_b.seconds, rows, timed_b.peak_pss_mb, "1 query", "truth")
    )
    a_batches = 1
    for way, reader in (("A", "auto"), ("F", "python")):  # F: A with the Python reader
        if way not in ways:
            continue
        timed, data, markers = run_kappa(work, env, "HOURLY", days, reader, master)
        if way == "A":
            a_batches = max(1, data)
        suffix = table_suffix(reader, master)
        _, got = child(
            "read_output",
            work,
            env,
            kind="hourly",
            table=f"bench_hourly_{days}d{suffix}{RUN_TAG[0]}_backfill",
        )
        results.append(
            Result(
                days,
                "hourly",
                way,
                timed.seconds,
                rows,
                timed.peak_pss_mb,
                f"{data} + {markers} markers",
                str(got["rows"] == expected),
                timed.first_batch_s,
                first_batch_query_s=timed.first_batch_query_s,
            )
        )
    if "C" in ways:
        timed_c, raw = child("raw", work, env, location=location)
        results.append(
            Result(
                days,
                "hourly",
                "C",
                timed_c.seconds,
                raw["rows_read"],
                timed_c.peak_pss_mb,
                "-",
                str(raw["rows"] == expected),
                note=f"read {raw['read_seconds']:.1f} s of {raw['seconds']:.1f} s in-process",
            )
        )
    if "D" in ways:
        per = max(1, math.ceil(count_files(location) / a_batches))
        timed_d, dres = child(
            "filestream",
            work,
            env,
            days=days,
            location=location,
            files_per_trigger=per,
            checkpoint=work / f"d-{days}-{master}{RUN_TAG[0]}",
        )
        got_d = dres["rows"]
        missing = len({tuple(r) for r in expected} - {tuple(r) for r in got_d})
        results.append(
            Result(
                days,
                "hourly",
                "D",
                timed_d.seconds,
                rows,
                timed_d.peak_pss_mb,
                str(dres["batches"]),
                str(got_d == expected)
                + (f" ({missing} windows missing or wrong)" if missing else ""),
                note=f"maxFilesPerTrigger={per}",
            )
        )
    if "E" in ways and days <= args.e_max_days:
        produced, timed_e = run_stream(work, env, days, location)
        _, got_e = child(
            "read_output",
            work,
            env,
            kind="hourly",
            table=f"bench_hourly_{days}d{RUN_TAG[0]}_stream",
        )
        missing = len({tuple(r) for r in expected} - {tuple(r) for r in got_e["rows"]})
        results.append(
            Result(days, "hourly", "P", produced.seconds, rows, produced.peak_pss_mb, "-", "-")
        )
        results.append(
            Result(
                days,
                "hourly",
                "E",
                timed_e.seconds,
                rows,
                timed_e.peak_pss_mb,
                f"{max(1, math.ceil(rows / E_BATCH))}",
                str(got_e["rows"] == expected)
                + (f" ({missing} windows missing or wrong)" if missing else ""),
                timed_e.first_batch_s,
            )
        )
    if days == args.session_days:
        timed_sb, struth = child("batch", work, env, days=days, kind="sessions")
        results.append(
            Result(
                days,
                "sessions",
                "B",
                timed_sb.seconds,
                rows,
                timed_sb.peak_pss_mb,
                "1 query",
                "truth",
            )
        )
        if "A" in ways:
            timed_sa, data, markers = run_kappa(work, env, "SESSIONS", days, master=master)
            suffix = table_suffix(master=master)
            _, got = child(
                "read_output",
                work,
                env,
                kind="sessions",
                table=f"bench_sessions_{days}d{suffix}{RUN_TAG[0]}_backfill",
            )
            results.append(
                Result(
                    days,
                    "sessions",
                    "A",
                    timed_sa.seconds,
                    rows,
                    timed_sa.peak_pss_mb,
                    f"{data} + {markers} markers",
                    str(got["rows"] == struth["rows"]),
                    timed_sa.first_batch_s,
                    first_batch_query_s=timed_sa.first_batch_query_s,
                )
            )
    for r in results:
        r.master = master
    return results


def render(results: list[Result], args: argparse.Namespace, load: tuple[str, str]) -> str:
    names = {
        "A": "(A) `kappa run --mode backfill`, defaults",
        "F": '(A-py) = A with `reader = "python"` (the Python data source)',
        "B": "(B) one Spark batch query",
        "C": "(C) raw pyarrow read + group_by",
        "D": "(D) `readStream.parquet`, maxFilesPerTrigger",
        "P": "(E produce) the history into Kafka (confluent-kafka producer)",
        "E": "(E) `kappa run --mode stream` over the Kafka history",
    }
    lines = [
        f"Measured {datetime.now(tz=UTC):%Y-%m-%d %H:%M} UTC on {platform.machine()} with "
        f"{os.cpu_count()} CPUs shared with other work (load average {load[0]} before, "
        f"{load[1]} after); days {args.days}, {args.rows_per_day:,} rows/day, "
        f"{args.files_per_hour} files per hour. Each way is a whole process (session start "
        "included); peak PSS over its process tree.",
        "",
        "| days | master | job | way | seconds | rows/s | peak PSS MB | micro-batches "
        "| first batch s (after query start) | equal to B | ratio to B | PSS ratio to B |",
        "|---:|---|---|---|---:|---:|---:|---|---:|---|---:|---:|",
    ]
    for r in results:
        base = next(
            (
                b
                for b in results
                if (b.days, b.job, b.master, b.way) == (r.days, r.job, r.master, "B")
            ),
            None,
        )
        ratio = f"{r.seconds / base.seconds:.2f}x" if base else "-"
        pss = f"{r.peak_pss_mb / base.peak_pss_mb:.2f}x" if base and base.peak_pss_mb else "-"
        first = f"{r.first_batch_s:.0f}" if r.first_batch_s is not None else "-"
        if r.first_batch_query_s is not None:
            first += f" ({r.first_batch_query_s:.1f})"
        note = f" ({r.note})" if r.note else ""
        lines.append(
            f"| {r.days} | {r.master} | {r.job} | {names[r.way]}{note} | {r.seconds:.1f} "
            f"| {r.rows_per_s:,.0f} | {r.peak_pss_mb:,.0f} | {r.batches} | {first} "
            f"| {r.correct} | {ratio} | {pss} |"
        )
    measured_e = {r.days for r in results if r.way == "E"}
    for days in sorted({r.days for r in results if r.master == "local"} - measured_e):
        lines.append(
            f"| {days} | local | hourly | (E) Kafka history + `--mode stream` | not measured "
            "| | | | | | | |"
        )
    return "\n".join(lines)


def chart(results: list[Result]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for master in sorted({r.master for r in results}, key=lambda m: m != "local"):
        for way in "ABCDEF":
            points = sorted(
                (r.days, r)
                for r in results
                if r.way == way and r.job == "hourly" and r.master == master
            )
            if not points:
                continue
            days = [d for d, _ in points]
            label = ("A-py" if way == "F" else way) + ("" if master == "local" else f" ({master})")
            style = "-" if master == "local" else "--"
            left.plot(days, [r.seconds for _, r in points], style, marker="o", label=label)
            right.plot(days, [r.peak_pss_mb for _, r in points], style, marker="o", label=label)
    left.set(xlabel="days", ylabel="wall seconds", title="wall time (hourly counts)")
    left.set_xscale("log")
    right.set_xscale("log")
    right.set(xlabel="days", ylabel="peak PSS MB", title="peak memory")
    for ax in (left, right):
        ax.legend()
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(CHART, dpi=90)


def write_doc(text: str) -> None:
    body = (
        f"## Backfill five ways (`bench/bench_backfill.py`, `make bench`)\n\n{text}\n\n"
        f"![wall time and peak PSS against days]({CHART.name})"
    )
    replace_block(DOC, START, END, body)


@contextlib.contextmanager
def cluster_envs(
    args: argparse.Namespace, work: Path, env: dict[str, str]
) -> Iterator[dict[str, dict[str, str]]]:
    """A metastore server and a two-worker standalone cluster for the run; the environment
    of the local ways and of the cluster ways (both share the metastore and warehouse)."""
    sys.path.insert(0, str(ROOT / "tests" / "cluster"))
    from spark_cluster import standalone_cluster  # the cluster tests' own

    from kappaplus.jars import jvm_jar
    from kappaplus.local.metastore import MetastoreServer
    from kappaplus.local.processes import free_port

    home = Path(env["KAPPA_HOME"])
    warehouse = home / "warehouse"
    warehouse.mkdir(parents=True, exist_ok=True)
    server = MetastoreServer(home, free_port())
    uri = server.start()
    try:
        shutil.rmtree(work / "spark", ignore_errors=True)  # an earlier run's under --work
        with standalone_cluster(work / "spark", 2, [], memory=args.executor_memory) as cluster:
            conf = work / "spark-conf"
            conf.mkdir(exist_ok=True)
            settings = {
                "spark.driver.host": "127.0.0.1",
                "spark.driver.bindAddress": "127.0.0.1",
                "spark.driver.memory": "2g",
                "spark.executor.memory": args.executor_memory,
                "spark.executor.cores": "1",
                "spark.cores.max": "2",
                "spark.sql.shuffle.partitions": "2",
                "spark.pyspark.python": sys.executable,
                "spark.ui.enabled": "false",
                "spark.ui.showConsoleProgress": "false",
                "spark.sql.warehouse.dir": warehouse.as_uri(),
            }
            jar = jvm_jar()
            if jar is not None:
                settings["spark.jars"] = str(jar)
            (conf / "spark-defaults.conf").write_text(
                "".join(f"{k} {v}\n" for k, v in settings.items())
            )
            local = {**env, "KAPPA_METASTORE_URI": uri}
            on_cluster = {
                **local,
                "KAPPA_SPARK_MASTER": cluster.url,
                "SPARK_CONF_DIR": str(conf),
                "SPARK_LOCAL_IP": "127.0.0.1",
            }
            EXTRA_PIDS.append(cluster.executors)
            yield {"local": local, "cluster": on_cluster}
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--days", default="1,7,30")
    parser.add_argument("--rows-per-day", type=int, default=500_000)
    parser.add_argument("--session-days", type=int, default=7)
    parser.add_argument("--ways", default="A,F,B,C,D,E")
    parser.add_argument(
        "--e-max-days", type=int, default=7, help="run (E) up to this many days (in-memory broker)"
    )
    parser.add_argument("--files-per-hour", type=int, default=2)
    parser.add_argument(
        "--masters",
        default="local",
        help="local, cluster (a 2-worker standalone cluster started here), or both",
    )
    parser.add_argument(
        "--executor-memory", default="1g", help="each cluster executor's memory (--masters)"
    )
    parser.add_argument("--no-docs", action="store_true")
    parser.add_argument(
        "--work",
        help="keep the tables, checkpoints and logs in this directory and reuse its tables "
        "(profiling); default a temporary directory removed at the end",
    )
    parser.add_argument(
        "--input-option",
        action="append",
        default=[],
        metavar="KEY=TOML",
        help="an extra [inputs.events.hive] setting of (A), e.g. target_rows_per_trigger=4000000",
    )
    parser.add_argument(
        "--kappa-arg",
        action="append",
        default=[],
        help="an extra `kappa` option of (A), before `run` (-v: debug log)",
    )
    # child processes
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--kind", help=argparse.SUPPRESS)
    parser.add_argument("--table", help=argparse.SUPPRESS)
    parser.add_argument("--location", help=argparse.SUPPRESS)
    parser.add_argument("--files-per-trigger", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--checkpoint", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        if str(args.days).isdigit():
            args.days = int(args.days)
        {
            "generate": child_generate,
            "batch": child_batch,
            "filestream": child_filestream,
            "read_output": child_read_output,
            "raw": child_raw,
            "produce": child_produce,
        }[args.child](args)
        return

    for setting in args.input_option:
        key, _, value = setting.partition("=")
        INPUT_OPTIONS[key.strip()] = value.strip()
    KAPPA_ARGS.extend(args.kappa_arg)
    if args.work:
        RUN_TAG[0] = f"_r{int(time.time())}"
        work = Path(args.work).resolve()
        work.mkdir(parents=True, exist_ok=True)
    else:
        work = Path(tempfile.mkdtemp(prefix="bench-backfill-"))
    env = dict(os.environ)
    env["KAPPA_HOME"] = str(work / "home")
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(BENCH), str(ROOT), env.get("PYTHONPATH", "")) if p
    )
    masters = args.masters.split(",")
    load_before = f"{os.getloadavg()[0]:.1f}"
    results: list[Result] = []
    try:
        with contextlib.ExitStack() as stack:
            envs = {"local": env}
            if "cluster" in masters:
                envs = stack.enter_context(cluster_envs(args, work, env))
            for days in [int(d) for d in args.days.split(",")]:
                info = generate(args, work, envs["local"], days)
                for master in masters:
                    results += bench_days(args, work, envs[master], days, info, master)
                    print(render(results, args, (load_before, "...")), file=sys.stderr)
    finally:
        if not args.work:
            shutil.rmtree(work, ignore_errors=True)
    text = render(results, args, (load_before, f"{os.getloadavg()[0]:.1f}"))
    print(text)
    if not args.no_docs:
        chart(results)
        write_doc(text)


if __name__ == "__main__":
    main()
