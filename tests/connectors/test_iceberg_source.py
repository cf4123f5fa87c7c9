"""The Iceberg streaming source (``kappa_iceberg``) against real Spark and tables written
with pyiceberg into a SQL (SQLite) catalog.

Every streaming result is compared with a ground truth computed by pandas from the rows as
written (deletes and renames applied by the test, not by the reader): tumbling, sliding and
session windows, on tables partitioned by day, by a bucket of a key, or not at all, with
files written out of event-time order, a renamed column, rows deleted copy-on-write and by
a position delete file.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from iceberg_tables import (
    catalog_props,
    equality_delete,
    evolve,
    position_delete,
    sessions,
    sliding,
    tumbling,
    write_table,
)
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.iceberg import read_iceberg_stream
from kappaplus.core.errors import DataError

ROWS_TARGET = "400"  # several slices per table
END = "2024-03-06"  # after every row and window: a bounded run emits every window


def run(stream: DataFrame, checkpoint: Path, name: str) -> list[dict]:
    query = (
        stream.writeStream.format("memory")
        .queryName(name)
        .outputMode("append")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    return list(query.recentProgress)


def stream(spark: SparkSession, written: Any, scratch: Path, **options: Any) -> DataFrame:
    df = read_iceberg_stream(
        spark,
        written.name,
        event_time_column="ts",
        catalog=written.props,
        watermark_delay="30 minutes",
        end=END,
        manifest_dir=str(scratch / "manifests"),
        targetRowsPerTrigger=ROWS_TARGET,
        **options,
    )
    if written.value_column != "v":
        df = df.withColumnRenamed(written.value_column, "v")
    return df


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def windows_of(spark: SparkSession, written: Any, scratch: Path, tag: str) -> dict[str, list]:
    """Tumbling (10 min), sliding (1 h every 15 min) and session (20 min gap) windows."""
    results: dict[str, list] = {}
    df = stream(spark, written, scratch / "tumbling", **{})
    tumble = df.groupBy(F.window("ts", "10 minutes")).agg(
        F.count("*").alias("n"), F.sum("v").alias("s")
    )
    progress = run(tumble, scratch / "tumbling" / "cp", f"t_{tag}")
    assert sum(1 for p in progress if p["numInputRows"]) >= 3, "expected several slices"
    results["tumbling"] = sorted(
        (utc(r.window.start), r.n, round(r.s, 6)) for r in spark.table(f"t_{tag}").collect()
    )
    df = stream(spark, written, scratch / "sliding")
    slide = df.groupBy(F.window("ts", "1 hour", "15 minutes")).count()
    run(slide, scratch / "sliding" / "cp", f"s_{tag}")
    results["sliding"] = sorted(
        (utc(r.window.start), r["count"]) for r in spark.table(f"s_{tag}").collect()
    )
    df = stream(spark, written, scratch / "session")
    sess = df.groupBy("key", F.session_window("ts", "20 minutes")).count()
    run(sess, scratch / "session" / "cp", f"w_{tag}")
    results["session"] = sorted(
        (r.key, utc(r.session_window.start), utc(r.session_window.end), r["count"])
        for r in spark.table(f"w_{tag}").collect()
    )
    return results


def assert_windows(spark: SparkSession, written: Any, scratch: Path, tag: str) -> None:
    got = windows_of(spark, written, scratch, tag)
    rows = written.rows
    assert got["tumbling"] == tumbling(rows, 10)
    assert got["sliding"] == sliding(rows, 60, 15)
    assert got["session"] == sessions(rows, 20)


@pytest.mark.parametrize("partitioning", ["day", "bucket", "none"])
def test_windows_equal_ground_truth(spark: SparkSession, scratch: Path, partitioning: str) -> None:
    written = write_table(catalog_props(scratch / "catalog"), f"db.ev_{partitioning}", partitioning)
    assert_windows(spark, written, scratch, partitioning)


def test_renamed_column_and_deleted_rows(spark: SparkSession, scratch: Path) -> None:
    """``v`` renamed ``value`` after the first files, a column added, rows deleted
    copy-on-write and by a position delete file: read right across the old files."""
    written = write_table(catalog_props(scratch / "catalog"), "db.evolved", "none")
    written = position_delete(evolve(written))
    tasks = list(written.table().scan().plan_files())
    assert any(t.delete_files for t in tasks), "the position delete file is live"
    assert_windows(spark, written, scratch, "evolved")


def test_equality_deletes_are_refused_naming_table_snapshot_and_file(
    spark: SparkSession, scratch: Path
) -> None:
    written = write_table(catalog_props(scratch / "catalog"), "db.eqdel", "none", per_day=50)
    path = equality_delete(written)
    snapshot = written.table().current_snapshot().snapshot_id
    df = stream(spark, written, scratch)
    with pytest.raises(Exception) as caught:
        run(df.groupBy(F.window("ts", "10 minutes")).count(), scratch / "cp", "eqdel")
    text = str(caught.value)
    assert "db.eqdel" in text and str(snapshot) in text and path in text


def test_interrupted_run_reruns_the_pinned_snapshot(
    spark: SparkSession, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped after two micro-batches, a snapshot committed (rows inside the delivered
    range and beyond), then rerun on the same checkpoint: the output equals the pinned
    snapshot's ground truth, the new snapshot is counted and logged, nothing duplicated."""
    from iceberg_tables import arrow_rows, make_rows

    written = write_table(catalog_props(scratch / "catalog"), "db.rerun", "none")
    out, cp = scratch / "out", scratch / "cp"

    def query(df: DataFrame) -> Any:
        agg = df.groupBy(F.window("ts", "10 minutes")).agg(
            F.count("*").alias("n"), F.sum("v").alias("s")
        )
        return (
            agg.writeStream.format("parquet")
            .outputMode("append")
            .option("path", str(out))
            .option("checkpointLocation", str(cp))
        )

    first = query(stream(spark, written, scratch)).trigger(processingTime="0 seconds").start()
    try:
        while len([p for p in first.recentProgress if p["numInputRows"]]) < 2:
            first.awaitTermination(0.5)
    finally:
        first.stop()
    extra = make_rows(3, 50, seed=99)
    extra["id"] += 500_000
    written.table().append(arrow_rows(extra))
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.iceberg.catalog"):
        second = query(stream(spark, written, scratch)).trigger(availableNow=True).start()
        second.awaitTermination()
    assert any("1 snapshot(s) committed after the pinned snapshot" in m for m in caplog.messages)
    got = sorted(
        (utc(r.window.start), r.n, round(r.s, 6)) for r in spark.read.parquet(str(out)).collect()
    )
    assert got == tumbling(written.rows, 10)


def test_missing_statistics_are_said_once_and_the_file_read_whole(
    spark: SparkSession, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A table written without column metrics: every file is read in every slice with the
    slice's filter, and the output is still the ground truth."""
    props = catalog_props(scratch / "catalog")
    written = write_table(props, "db.nostats", "none", per_day=150, files=3)
    table = written.table()
    with table.transaction() as tx:
        tx.set_properties({"write.metadata.metrics.default": "none"})
    from iceberg_tables import arrow_rows, make_rows

    extra = make_rows(3, 20, seed=5)
    extra["id"] += 900_000
    written.table().append(arrow_rows(extra))
    import pandas as pd

    written.rows = pd.concat([written.rows, extra], ignore_index=True)
    bare = [t for t in written.table().scan().plan_files() if not t.file.lower_bounds]
    assert len(bare) == 1, "the last append was written without column metrics"
    # the planner runs in a Python worker: its log is checked on the lister, in process
    from kappaplus.connectors.iceberg.catalog import iceberg_lake_options
    from kappaplus.connectors.iceberg.lister import IcebergFileLister
    from kappaplus.connectors.iceberg.options import IcebergSourceOptions

    df = stream(spark, written, scratch)
    resolved = iceberg_lake_options(
        written.name, props, None, event_time_column="ts", manifestDir=str(scratch / "pin")
    )
    lister = IcebergFileLister(IcebergSourceOptions.parse(resolved))
    with caplog.at_level(logging.INFO, logger="kappaplus.connectors.iceberg.lister"):
        for _ in range(2):
            stats = [lister.stats(f)[0] for f in lister.files()]
    assert sum(1 for g in stats if g.ts_min is None) == 1
    said = [m for m in caplog.messages if "has no event-time bounds" in m]
    assert len(said) == 1 and bare[0].file.file_path in said[0], said
    run(df.groupBy(F.window("ts", "10 minutes")).count(), scratch / "cp", "nostats")
    got = sorted((utc(r.window.start), r["count"]) for r in spark.table("nostats").collect())
    assert got == [(t, n) for t, n, _ in tumbling(written.rows, 10)]


def test_unknown_table_is_one_line(spark: SparkSession, scratch: Path) -> None:
    from kappaplus.core.errors import TableError

    props = catalog_props(scratch / "catalog")
    with pytest.raises(TableError, match="db.nothing"):
        read_iceberg_stream(spark, "db.nothing", event_time_column="ts", catalog=props)
    assert DataError  # the error tree the reader uses


@pytest.fixture(scope="module")
def object_store(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``moto_server`` on loopback (:class:`~kappaplus.local.s3.ObjectStore`): an
    S3-compatible store the tables are written to."""
    from kappaplus.local.processes import free_port
    from kappaplus.local.s3 import ObjectStore

    store = ObjectStore(tmp_path_factory.mktemp("s3"), free_port())
    store.start()
    yield store
    store.stop()


def s3_catalog(store: Any, root: Path, prefix: str) -> dict[str, str]:
    """The store's catalog properties (its ``s3.*`` FileIO settings), with the SQL catalog
    under ``root`` and the warehouse at ``s3://BUCKET/prefix``."""
    props = store.iceberg_catalog(store.endpoint())
    props.update(catalog_props(root, warehouse=f"s3://{store.bucket}/{prefix}"))
    return props


@pytest.mark.parametrize(
    "shape",
    [
        "none",
        pytest.param("day", marks=pytest.mark.slow),
        pytest.param("bucket", marks=pytest.mark.slow),
        pytest.param("evolved", marks=pytest.mark.slow),
    ],
)
def test_tables_on_an_object_store(
    spark: SparkSession, scratch: Path, object_store: Any, shape: str
) -> None:
    """The same tables with their data and metadata on the embedded S3-compatible store
    (pyiceberg's FileIO with the catalog's ``s3.*`` settings, on the planner and on the
    readers); Spark's checkpoints and the source's manifests stay on the local disk."""
    props = s3_catalog(object_store, scratch / "catalog", f"wh-{shape}")
    if shape == "evolved":
        written = evolve(write_table(props, "db.s3_evolved", "none"))
    else:
        written = write_table(props, f"db.s3_{shape}", shape)
    assert written.table().location().startswith("s3://")
    assert_windows(spark, written, scratch, f"s3_{shape}")


@pytest.mark.slow  # two Spark processes of its own: ~3 minutes on a loaded 2-core machine
def test_kill_9_mid_backfill_and_rerun(spark: SparkSession, scratch: Path) -> None:
    """A backfill process killed with SIGKILL after two committed micro-batches, a snapshot
    committed meanwhile, and the run started again on the same checkpoint: the output equals
    the pinned snapshot's ground truth, nothing lost or duplicated."""
    import json
    import os
    import signal
    import subprocess
    import sys
    import time

    from iceberg_tables import arrow_rows, make_rows

    written = write_table(catalog_props(scratch / "catalog"), "db.killed", "none")
    child = Path(__file__).parents[1] / "iceberg_stream_child.py"
    work = scratch / "work"
    cmd = [sys.executable, str(child), json.dumps(written.props), written.name, str(work)]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    first = subprocess.Popen(
        [*cmd, "processing"], env=env, start_new_session=True, stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 600
    try:
        while not (work / "out" / "_spark_metadata" / "1").exists():
            assert first.poll() is None, "the first run ended before it was killed"
            assert time.monotonic() < deadline, "no second batch within 10 minutes"
            time.sleep(0.2)
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()

    def committed() -> int:
        return sum(1 for p in (work / "out" / "_spark_metadata").iterdir() if p.name.isdigit())

    killed_at = committed()
    extra = make_rows(3, 50, seed=98)
    extra["id"] += 700_000
    written.table().append(arrow_rows(extra))
    again = subprocess.run([*cmd, "available-now"], env=env, timeout=900, check=False)
    assert again.returncode == 0
    assert committed() > killed_at, "the rerun delivered the rest"
    got = sorted(
        (utc(r.window.start), r.n, round(r.s, 6))
        for r in spark.read.parquet(str(work / "out")).collect()
    )
    assert len(got) == len(set(got)), "no window written twice"
    assert got == tumbling(written.rows, 10)
