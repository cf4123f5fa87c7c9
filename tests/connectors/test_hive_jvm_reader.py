"""The JVM read path of the Hive source (``kappa_hive_jvm``) against the Python one and a
batch ground truth, its fallback rules, and the planner process it talks to.

The JVM reader reads whole files and keeps the rows of the slice; slices that cut through
files with many row groups are where it could deliver a row twice or not at all, so the
tables here have small row groups and slices far shorter than a file's time range.
"""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hive_tables import BASE, DAY, events, iso, write_event_time_table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.hive import resolve_table
from kappaplus.connectors.hive.catalog import hive_stream_options, open_hive_stream
from kappaplus.connectors.hive.files import file_uri
from kappaplus.connectors.lake.jvm_reader import CountDelivered, choose_reader, jvm_reader_loaded
from kappaplus.connectors.lake.options import LakeSourceOptions
from kappaplus.connectors.lake.plan_service import partition_value, serve
from kappaplus.connectors.lake.planner_server import (
    PLANNER_ADDRESS,
    PLANNER_SECRET,
    planner_server,
)
from kappaplus.core.class_archive import java_executable
from kappaplus.core.errors import ConfigError, DataError
from kappaplus.jars import jvm_jar

sys.path.insert(0, str(Path(__file__).parents[1]))
from planner_watch import PlannerWatch  # noqa: E402

HOUR = 3600

# Skipped only on a machine where set-up could not build the jar (no javac, no root to
# install it); in CI set-up installs the JDK, so a missing jar fails these tests there.
pytestmark = pytest.mark.skipif(
    jvm_jar() is None and not os.environ.get("CI"),
    reason="set-up did not build kappaplus-jvm.jar (no javac)",
)


@pytest.fixture(scope="module")
def jvm_table(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> str:
    """Two days of events in dt/hr partitions, each file with many small row groups."""
    table = "hive_jvm_events"
    write_event_time_table(spark, table, events(spark, 9_000, 2, seed=5), files_per_partition=2)
    location = resolve_table(spark, table).location.removeprefix("file:")
    for path in Path(location).rglob("*.parquet"):
        data = pq.read_table(path)
        pq.write_table(data, path, row_group_size=20)  # many row groups per file
        path.with_name(f".{path.name}.crc").unlink(
            missing_ok=True
        )  # Hadoop's checksum of the old file
    spark.catalog.refreshTable(table)
    return table


def opened(spark: SparkSession, table: str, reader: str, scratch: Path, **options: object):  # type: ignore[no-untyped-def]
    """``open_hive_stream`` of ``table`` by ``ts`` with ``reader``, its state in ``scratch``."""
    return open_hive_stream(
        spark,
        table,
        event_time_column="ts",
        manifestDir=str(scratch / reader / "manifests"),
        reader=reader,
        **options,  # type: ignore[arg-type]
    )


def read(
    spark: SparkSession, table: str, reader: str, scratch: Path, **options: object
) -> DataFrame:
    return opened(spark, table, reader, scratch, **options).df


def run_to_table(stream: DataFrame, checkpoint: Path, name: str) -> list[dict]:
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def rows_of(df: DataFrame) -> list[tuple]:
    return sorted(map(tuple, df.collect()))


def test_the_session_loads_the_jvm_reader(spark: SparkSession) -> None:
    assert jvm_reader_loaded(spark)


def test_jvm_and_python_readers_deliver_the_same_rows_as_a_batch_query(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    start, end = BASE + 1800, BASE + DAY + 7 * HOUR
    results = {}
    for reader in ("jvm", "python"):
        stream = read(
            spark,
            jvm_table,
            reader,
            tmp_path,
            start=iso(start),
            end=iso(end),
            max_event_time_per_trigger="45 minutes",  # slices cut through the files
        )
        progress = run_to_table(stream, tmp_path / reader / "ck", f"jvm_eq_{reader}")
        batches = [p for p in progress if p["numInputRows"] > 0]
        assert len(batches) > 30
        on_jvm = progress[0]["sources"][0]["description"].startswith("kappa_hive_jvm")
        assert on_jvm == (reader == "jvm"), progress[0]["sources"][0]["description"]
        results[reader] = rows_of(spark.table(f"jvm_eq_{reader}"))
    truth = rows_of(
        spark.table(jvm_table).where(
            (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
            & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        )
    )
    assert len(truth) > 5000
    assert results["jvm"] == truth  # every column, partition columns dt/hr included
    assert results["python"] == truth
    ids = [r[0] for r in results["jvm"]]
    assert len(ids) == len(set(ids)), "no row delivered twice"


def test_jvm_reader_with_pruned_columns_and_the_end_of_input_flush(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    start, end = BASE, BASE + DAY
    stream = read(
        spark,
        jvm_table,
        "jvm",
        tmp_path,
        start=iso(start),
        end=iso(end),
        watermark_delay="10 minutes",
        columns="key",
    )
    assert stream.columns == ["key", "ts"]
    counts = stream.groupBy(F.window("ts", "1 hour"), "key").count()
    run_to_table(
        counts.select(F.col("window.start").cast("long").alias("s"), "key", "count"),
        tmp_path / "ck",
        "jvm_flush",
    )
    truth = rows_of(
        spark.table(jvm_table)
        .where(
            (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
            & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        )
        .groupBy(F.window("ts", "1 hour"), "key")
        .count()
        .select(F.col("window.start").cast("long").alias("s"), "key", "count")
    )
    got = rows_of(spark.table("jvm_flush"))
    assert len(truth) == 24 * 13
    assert got == truth, "every window up to the end, the last hour's included"


def slice_truth(spark: SparkSession, table: str, start: int, end: int) -> list[tuple]:
    return rows_of(
        spark.table(table).where(
            (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
            & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        )
    )


def test_the_planner_is_served_in_process_and_without_its_options_spawned(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    """The JVM reader asks this (the driver's) Python process for its slices: no planner
    process is started, one connection per query, closed when the query stops. The same
    source without the address option (a driver that did not set it) starts the planner
    process as before. Both deliver the batch query's rows."""
    start, end = BASE + 3 * HOUR, BASE + 9 * HOUR
    truth = slice_truth(spark, jvm_table, start, end)
    assert len(truth) > 500
    with PlannerWatch() as watch:
        stream = read(
            spark, jvm_table, "jvm", tmp_path / "in", start=iso(start), end=iso(end),
            max_event_time_per_trigger="1 hour",
        )  # fmt: skip
        progress = run_to_table(stream, tmp_path / "in" / "ck", "jvm_in_process")
    assert progress[0]["sources"][0]["description"].startswith("kappa_hive_jvm")
    assert sum(p["numInputRows"] > 0 for p in progress) == 6
    assert watch.children == set(), "no planner process started"
    assert watch.served == 1, "one in-process planner connection for the query"
    assert PlannerWatch.wait_idle() == 0, "the connection closes when the query stops"
    assert rows_of(spark.table("jvm_in_process")) == truth

    resolved = hive_stream_options(
        resolve_table(spark, jvm_table),
        event_time_column="ts",
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="1 hour",
        manifest_dir=str(tmp_path / "spawn" / "manifests"),
    )
    source, extra, _ = choose_reader(spark, LakeSourceOptions.parse(resolved), "jvm")
    assert source == "kappa_hive_jvm" and {PLANNER_ADDRESS, PLANNER_SECRET} <= extra.keys()
    without = {k: v for k, v in extra.items() if k not in (PLANNER_ADDRESS, PLANNER_SECRET)}
    with PlannerWatch() as watch:
        stream = spark.readStream.format(source).options(**resolved, **without).load()
        run_to_table(stream, tmp_path / "spawn" / "ck", "jvm_spawned")
    assert watch.served == 0 and len(watch.children) == 1, "the planner process, as before"
    assert rows_of(spark.table("jvm_spawned")) == truth

    # an address nothing answers at (a warning in the driver log): the planner process too
    with socket.create_server(("127.0.0.1", 0)) as closed:
        dead = f"127.0.0.1:{closed.getsockname()[1]}"
    short = hive_stream_options(
        resolve_table(spark, jvm_table),
        event_time_column="ts",
        start=iso(start),
        end=iso(start + 2 * HOUR),
        max_event_time_per_trigger="1 hour",
        manifest_dir=str(tmp_path / "dead" / "manifests"),
    )
    with PlannerWatch() as watch:
        stream = (
            spark.readStream.format(source)
            .options(**short, **{**extra, PLANNER_ADDRESS: dead})
            .load()
        )
        run_to_table(stream, tmp_path / "dead" / "ck", "jvm_unreachable")
    assert watch.served == 0 and len(watch.children) == 1
    assert rows_of(spark.table("jvm_unreachable")) == slice_truth(
        spark, jvm_table, start, start + 2 * HOUR
    )


def test_a_query_failing_while_spark_plans_it_closes_its_planner(
    spark: SparkSession, tmp_path: Path
) -> None:
    """A planner error raised while Spark sets the query up (here the bad partition value,
    met in ``prepareForTriggerAvailableNow``) comes before Spark knows the source, so Spark
    never stops it: the source closes its planner connection, or ends its planner process,
    itself. Otherwise each such failure left one open for the life of the driver."""
    spark.sql("DROP TABLE IF EXISTS jvm_bad_dates")
    events(spark, 50, 0.1, seed=6).withColumn("dt", F.lit("yesterday")).write.partitionBy(
        "dt"
    ).format("parquet").saveAsTable("jvm_bad_dates")
    before = planner_server().active
    with PlannerWatch() as watch, pytest.raises(Exception, match="dt=yesterday"):
        run_to_table(read(spark, "jvm_bad_dates", "jvm", tmp_path), tmp_path / "ck", "jvm_bad")
    assert watch.served == 1
    assert PlannerWatch.wait_idle() == before == 0, "the failed query's connection is closed"

    resolved = hive_stream_options(
        resolve_table(spark, "jvm_bad_dates"),
        event_time_column="ts",
        manifest_dir=str(tmp_path / "spawn" / "manifests"),
    )
    source, extra, _ = choose_reader(spark, LakeSourceOptions.parse(resolved), "jvm")
    without = {k: v for k, v in extra.items() if k not in (PLANNER_ADDRESS, PLANNER_SECRET)}
    with PlannerWatch() as watch, pytest.raises(Exception, match="dt=yesterday"):
        stream = spark.readStream.format(source).options(**resolved, **without).load()
        run_to_table(stream, tmp_path / "spawn" / "ck", "jvm_bad_spawned")
    assert len(watch.children) == 1, "the planner process ran"
    assert PlannerWatch.wait_children() == [], "and ended with the failed query"


def test_the_in_process_planner_wants_the_secret_first() -> None:
    """A connection that does not start with the secret gets no answer; one that does is
    answered with the planner's protocol (here: the error for options it cannot use)."""
    server = planner_server()
    host, port = server.address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as intruder:
        intruder.sendall(b"guess\n")
        assert intruder.makefile("rb").read() == b"", "closed without an answer"
    with socket.create_connection((host, int(port)), timeout=30) as client:
        client.sendall(f"{server.secret}\n".encode() + b'{"format": "csv"}\n{"op": "x"}\n')
        answer = json.loads(client.makefile("rb").readline())
    assert answer["error"]["type"] == "kappaplus.core.errors.ConfigError", answer


def test_reader_choice_falls_back_or_names_the_option(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    table = resolve_table(spark, jvm_table)
    options = LakeSourceOptions.parse(
        hive_stream_options(table, event_time_column="ts", manifest_dir=str(tmp_path))
    )
    assert choose_reader(spark, options, "auto")[0] == "kappa_hive_jvm"
    assert choose_reader(spark, options, "python")[0] == "kappa_hive"
    dead_letters = LakeSourceOptions.parse(
        hive_stream_options(
            table,
            event_time_column="ts",
            manifest_dir=str(tmp_path),
            nullEventTimePolicy="deadLetter",
            deadLetterPath=str(tmp_path / "dlq"),
        )
    )
    source, _, why = choose_reader(spark, dead_letters, "auto")
    assert source == "kappa_hive" and why is not None and "dead letters" in why
    with pytest.raises(ConfigError, match="option 'reader' = 'jvm': the JVM reader cannot read"):
        choose_reader(spark, dead_letters, "jvm")
    with pytest.raises(ConfigError, match="option 'reader' = 'rust'"):
        choose_reader(spark, options, "rust")


def test_the_planner_process_answers_like_the_python_source(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    """The line protocol of ``plan_service``: offsets as the Python source's JSON text, a
    slice's files once each with their partition values, errors as kappaplus errors."""
    table = resolve_table(spark, jvm_table)
    resolved = hive_stream_options(
        table,
        event_time_column="ts",
        start=iso(BASE),
        end=iso(BASE + 2 * HOUR),
        manifest_dir=str(tmp_path / "m"),
        watermarkDelay="1 minute",
    )
    requests = [
        json.dumps(resolved),
        json.dumps({"op": "initialOffset"}),
        json.dumps({"op": "prepareForTriggerAvailableNow"}),
    ]
    answers = io.StringIO()
    serve(io.StringIO("\n".join(requests) + "\n"), answers)
    initial = json.loads(answers.getvalue().splitlines()[0])["ok"]
    assert isinstance(initial, str) and json.loads(initial)["phase"] == "data"
    follow = [
        json.dumps(resolved),
        json.dumps({"op": "latestOffset", "start": initial}),
    ]
    answers = io.StringIO()
    serve(io.StringIO("\n".join(follow) + "\n"), answers)
    end = json.loads(answers.getvalue().splitlines()[0])["ok"]
    plan_requests = [
        json.dumps(resolved),
        json.dumps({"op": "partitions", "start": initial, "end": end}),
        json.dumps({"op": "no-such-op"}),
    ]
    answers = io.StringIO()
    serve(io.StringIO("\n".join(plan_requests) + "\n"), answers)
    plan_answer, error = (json.loads(line) for line in answers.getvalue().splitlines())
    plan = plan_answer["ok"]
    paths = [f["path"] for f in plan["files"]]
    assert paths and len(paths) == len(set(paths)), "each file once"
    assert all(f["uri"].startswith("file:///") for f in plan["files"])
    assert all(
        f["partitionValues"] == [p.split("dt=")[1][:10], p.split("hr=")[1][:2]]
        for f, p in zip(plan["files"], paths, strict=True)
    )
    assert plan["markers"] == [BASE * 1_000_000 + 2 * HOUR * 1_000_000 + 60_000_000]
    assert "unknown planner request" in error["error"]["message"]
    answers = io.StringIO()
    serve(io.StringIO(json.dumps({**resolved, "format": "csv"}) + "\n{}\n"), answers)
    failure = json.loads(answers.getvalue())["error"]
    assert (
        failure["type"] == "kappaplus.core.errors.ConfigError" and "'format'" in failure["message"]
    )


def test_file_uris_and_partition_values() -> None:
    assert file_uri("file:/w/t", "/w/t/dt=1/a.parquet") == "file:///w/t/dt=1/a.parquet"
    assert file_uri("/w/t", "/w/t/a.parquet") == "file:///w/t/a.parquet"
    assert file_uri("hdfs://nn:8020/w/t", "/w/t/a.parquet") == "hdfs://nn:8020/w/t/a.parquet"
    assert file_uri("s3a://bucket/w/t", "bucket/w/t/a.parquet") == "s3a://bucket/w/t/a.parquet"
    assert partition_value("2024-03-01", pa.date32(), "p", "dt") == 19783
    assert partition_value("07", pa.int32(), "p", "hr") == 7
    assert partition_value("__HIVE_DEFAULT_PARTITION__", pa.int32(), "p", "hr") is None
    assert partition_value("1.50", pa.decimal128(5, 2), "p", "x") == "1.50"
    with pytest.raises(DataError, match="partition value hr='x7' of file 'p' is not a valid"):
        partition_value("x7", pa.int32(), "p", "hr")


def counted_stream(spark: SparkSession, table: str, reader: str, scratch: Path, **options):  # type: ignore[no-untyped-def]
    """:func:`opened`, asking its reader to count as ``kappa_audit.lake.ev``."""
    counting = CountDelivered("kappa_audit.lake.ev", 600)
    return opened(spark, table, reader, scratch, count_delivered=counting, **options)


def reported_per_batch(progress: list[dict]) -> list[dict[int, int]]:
    """The lake counts the source reported, per batch that read rows (empty: none)."""
    from kappaplus.audit.counts import reported_counts

    out = []
    for entry in progress:
        if entry["numInputRows"] == 0:
            continue
        counts = [c for c in reported_counts(entry["sources"]) if c.name == "ev"]
        assert all((c.stage, c.io, c.exact) == ("lake", "delivered", True) for c in counts)
        out.append({b: n for c in counts for b, n in c.rows.items()})
    return out


def bucket_truth(df: DataFrame) -> dict[int, int]:
    buckets = df.groupBy(F.floor(F.unix_seconds("ts") / 600).alias("b")).count().collect()
    return {int(r.b): int(r["count"]) for r in buckets}


def summed(per_batch: list[dict[int, int]]) -> dict[int, int]:
    total: dict[int, int] = {}
    for counts in per_batch:
        for bucket, n in counts.items():
            total[bucket] = total.get(bucket, 0) + n
    return total


def test_the_jvm_reader_counts_the_rows_it_delivers_per_audit_bucket(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    start, end = BASE + 1800, BASE + DAY + 7 * HOUR
    stream = counted_stream(
        spark,
        jvm_table,
        "jvm",
        tmp_path,
        start=iso(start),
        end=iso(end),
        max_event_time_per_trigger="45 minutes",  # slices cut through the files
    )
    assert stream.counts_delivered
    progress = run_to_table(stream.df, tmp_path / "ck", "jvm_counted")
    per_batch = reported_per_batch(progress)
    truth = bucket_truth(
        spark.table(jvm_table).where(
            (F.col("ts") >= F.lit(iso(start)).cast("timestamp"))
            & (F.col("ts") < F.lit(iso(end)).cast("timestamp"))
        )
    )
    assert sum(truth.values()) > 5000
    assert summed(per_batch) == truth, "every delivered row counted once, in its bucket"
    # each batch reports its own rows (no watermark here, so no end-of-input marker)
    assert len(per_batch) > 30
    assert [sum(c.values()) for c in per_batch] == [
        p["numInputRows"] for p in progress if p["numInputRows"] > 0
    ]

    # the Python reader cannot count: its caller observes instead
    assert not counted_stream(spark, jvm_table, "python", tmp_path).counts_delivered


def test_counts_of_buckets_far_apart_in_one_file(spark: SparkSession, tmp_path: Path) -> None:
    """One file whose event times go forward, back before the first, then years on: the
    reader's counts grow both ways and then leave the dense array; each row counted once."""
    table = "hive_jvm_spread"
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    seconds = [BASE + 300, BASE + 900, BASE + 901, BASE - 7 * DAY, BASE + 730 * DAY, BASE + 300]
    df = spark.createDataFrame([(i, s) for i, s in enumerate(seconds)], "id long, s long")
    (
        df.select("id", F.timestamp_seconds("s").alias("ts"))
        .coalesce(1)
        .write.format("parquet")
        .saveAsTable(table)
    )
    stream = counted_stream(spark, table, "jvm", tmp_path)
    progress = run_to_table(stream.df, tmp_path / "ck", "jvm_spread")
    assert summed(reported_per_batch(progress)) == bucket_truth(spark.table(table))


def _live_instances(spark: SparkSession, class_name: str) -> int:
    """Live instances of ``class_name`` in this session's JVM (``jcmd GC.class_histogram``,
    which collects garbage first)."""
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    pid = jvm.java.lang.ProcessHandle.current().pid()
    java = java_executable()  # the JDK Spark runs on; jcmd is beside its java
    assert java is not None
    histogram = subprocess.run(
        [str(java.resolve().with_name("jcmd")), str(pid), "GC.class_histogram"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    return sum(
        int(line.split()[1])
        for line in histogram.splitlines()
        if line.rstrip().endswith(f" {class_name}") or f" {class_name} (" in line
    )


def test_a_task_keeps_no_reader_of_the_files_it_is_done_with(
    spark: SparkSession, jvm_table: str, tmp_path: Path
) -> None:
    """Spark builds each file's Parquet reader through the task's
    ``createResourceUninterruptibly``, whose completion listener keeps the reader until the
    task ends: a task reading a slice of 100 files held 100 readers (~1 MB each with their
    configuration copies). Mid-task, after a task has read the files of 10 hours, no more
    readers may be alive than tasks run at once."""
    gate = tmp_path / "gate"
    gate.mkdir()
    hours_to_see = 10

    def hold(hour):  # type: ignore[no-untyped-def]  # no hints: pyspark would infer a pandas UDF
        # a Python UDF downstream of the reader: once its task has delivered rows of
        # `hours_to_see` hours (each hour its own files), it stops taking rows until the
        # test has counted the JVM's readers, so the task is in the middle of its slice
        seen = globals().setdefault("_kappa_hours_seen", set())
        seen.add(hour)
        if len(seen) >= hours_to_see and not (gate / "go").exists():
            (gate / f"arrived-{os.getpid()}").touch()
            deadline = time.monotonic() + 120
            while not (gate / "go").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        return hour

    held = F.udf(hold, "string")
    stream = read(spark, jvm_table, "jvm", tmp_path, start=iso(BASE), end=iso(BASE + 2 * DAY))
    query = (
        stream.select(held(F.date_format("ts", "yyyy-MM-dd HH")).alias("h"))
        .writeStream.format("noop")
        .option("checkpointLocation", str(tmp_path / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        waited = time.monotonic()
        while not list(gate.glob("arrived-*")) and time.monotonic() - waited < 120:
            assert query.isActive or list(gate.glob("arrived-*")), query.exception()
            time.sleep(0.1)
        assert list(gate.glob("arrived-*")), "no task delivered rows of 10 hours"
        readers = _live_instances(
            spark,
            "org.apache.spark.sql.execution.datasources.parquet.VectorizedParquetRecordReader",
        )
    finally:
        (gate / "go").touch()
        query.awaitTermination(120)
    # each task has one file open; a task that kept every reader would show >= 10 (its
    # 10 hours' files), the tasks together many more
    assert readers <= 4, f"{readers} Parquet readers alive in the middle of a slice"
