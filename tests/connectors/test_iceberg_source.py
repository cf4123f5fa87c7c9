"""The Iceberg streaming source (``kappa_iceberg``) against real Spark and tables written
with pyiceberg into a SQL (SQLite) catalog.

Every streaming result is compared with a ground truth computed by pandas from the rows as
written (deletes and renames applied by the test, not by the reader): tumbling, sliding and
session windows, on tables partitioned by day, by a bucket of a key, or not at all, with
files written out of event-time order, a renamed column, rows deleted copy-on-write, by
position delete files and by equality delete files (global and partition-scoped, on one
column and on two with nulls).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from iceberg_tables import (
    arrow_rows,
    catalog_props,
    data_files,
    equality_delete,
    evolve,
    make_rows,
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
    # no delete file, no rename, local files: the JVM reader reads them (columns by name)
    plan = stream(spark, written, scratch / "plan")._jdf.queryExecution().analyzed().toString()
    assert "kappa_hive_jvm" in plan
    assert_windows(spark, written, scratch, partitioning)


def test_renamed_column_and_deleted_rows(spark: SparkSession, scratch: Path) -> None:
    """``v`` renamed ``value`` after the first files, a column added, rows deleted
    copy-on-write and by a position delete file: read right across the old files."""
    written = write_table(catalog_props(scratch / "catalog"), "db.evolved", "none")
    written = position_delete(evolve(written))
    tasks = list(written.table().scan().plan_files())
    assert any(t.delete_files for t in tasks), "the position delete file is live"
    assert_windows(spark, written, scratch, "evolved")


def appended(written: Any, rows: pd.DataFrame) -> Any:
    """``rows`` appended (a new snapshot, newer than every delete so far) and in the truth."""
    written.table().append(arrow_rows(rows))
    written.rows = pd.concat([written.rows, rows], ignore_index=True)
    return written


def new_rows(seed: int, first_id: int, per_day: int = 30) -> pd.DataFrame:
    rows = make_rows(3, per_day, seed)
    rows["id"] += first_id
    rows["key"] = rows["key"].astype("Int64")
    return rows


def with_equality_deletes(scratch: Path) -> Any:
    """An unpartitioned table with position deletes and three (global) equality delete
    files, rows appended between and after them; its truth computed by pandas."""
    written = write_table(catalog_props(scratch / "catalog"), "db.eqdel", "none", per_day=200)
    written.rows["key"] = written.rows["key"].astype("Int64")
    written = position_delete(written)
    # 1: by id; ids 10..39 gone
    written, _ = equality_delete(written, {"id": list(range(10, 40))}, name="eq-id.parquet")
    # rows after it: id 10..14 re-added (the same rows as written first), some null keys
    first = make_rows(3, 200, 1)
    first["key"] = first["key"].astype("Int64")
    later = new_rows(11, 200_000)
    later.loc[later.index[:6], "key"] = pd.NA
    written = appended(written, pd.concat([first[first["id"].between(10, 14)], later]))
    # 2: by key; every row with key 4 written so far gone
    written, _ = equality_delete(written, {"key": [4]}, name="eq-key.parquet")
    # 3: by (key, id), null equal to null: a null-key row's pair and an old key-3 row's pair
    null_id = int(later["id"].iloc[0])
    old_id = int(written.rows[written.rows["key"] == 3]["id"].iloc[0])
    written, _ = equality_delete(
        written, {"key": [None, 3, 2], "id": [null_id, old_id, null_id]}, name="eq-pair.parquet"
    )
    # rows after every delete stay: key 4, the two deleted pairs' rows re-added
    after = new_rows(12, 300_000, per_day=10)
    after = pd.concat([after, later.iloc[:1], first[first["id"] == old_id]], ignore_index=True)
    after.loc[after.index[:4], "key"] = 4
    return appended(written, after)


def test_equality_and_position_deletes_are_applied(spark: SparkSession, scratch: Path) -> None:
    """Equality deletes on a key, on an id and on two columns with a null, each applying only
    to the files older than it, with a position delete in the same table: the backfill's
    tumbling counts and sums equal the truth, every row read once (none lost or doubled),
    rows re-added after a delete kept."""
    written = with_equality_deletes(scratch)
    truth = written.rows
    assert truth["id"].is_unique
    assert {10, 11, 12, 13, 14} & set(truth["id"]), "re-added after the id delete"
    assert (truth["key"] == 4).sum() >= 4, "key 4 rows written after the key delete"
    assert truth["key"].isna().sum() == 6, "null keys: one deleted by its pair, re-added"
    written_rows = 600 + 5 + 90 + 30 + 2
    assert len(truth) < written_rows - 15 - 30 - 100, "the deletes removed rows"
    summary = written.table().current_snapshot().summary
    assert summary["total-equality-deletes"] == "34"  # 30 ids + 1 key + 3 pairs
    assert summary["total-position-deletes"] == "15"
    df = stream(spark, written, scratch / "t")
    tumble = df.groupBy(F.window("ts", "10 minutes")).agg(
        F.count("*").alias("n"), F.sum("v").alias("s")
    )
    progress = run(tumble, scratch / "t" / "cp", "eq_t")
    assert sum(1 for p in progress if p["numInputRows"]) >= 3, "expected several slices"
    got = sorted((utc(r.window.start), r.n, round(r.s, 6)) for r in spark.table("eq_t").collect())
    assert got == tumbling(truth, 10)
    run(stream(spark, written, scratch / "r").select("id"), scratch / "r" / "cp", "eq_ids")
    ids = [r.id for r in spark.table("eq_ids").collect()]
    assert len(ids) == len(set(ids)) == len(truth)
    assert sorted(ids) == sorted(truth["id"])


def test_equality_deletes_in_a_partition_apply_to_its_older_files_only(scratch: Path) -> None:
    """A table partitioned by a bucket of ``key``: an equality delete on ``id`` scoped to one
    partition removes matching rows of that partition's older files only (not the same ids
    elsewhere, not a row appended after); read file by file as the executors read."""
    props = catalog_props(scratch / "catalog")
    written = write_table(props, "db.eqpart", "bucket", per_day=100)
    home = data_files(written.table())[0].file_path
    written, path = equality_delete(
        written, {"id": list(range(0, 300, 2))}, partition_of=home, name="eq-part.parquet"
    )
    assert 0 < 300 - len(written.rows) < 150, "some matching ids are in other partitions"
    gone = set(range(0, 300, 2)) - set(written.rows["id"])
    readd = make_rows(3, 100, 1)
    readd["key"] = readd["key"].astype("Int64")
    written = appended(written, readd[readd["id"].isin(gone)])
    ids = read_all_ids(written, props, scratch)
    assert len(ids) == len(set(ids)) and sorted(ids) == sorted(written.rows["id"])


def read_all_ids(written: Any, props: dict[str, str], scratch: Path) -> list[int]:
    """Every row's id, read by :func:`read_task` file by file (what the executors do)."""
    from kappaplus.connectors.iceberg.catalog import iceberg_lake_options
    from kappaplus.connectors.iceberg.lister import IcebergFileLister, read_task
    from kappaplus.connectors.iceberg.options import IcebergSourceOptions

    resolved = iceberg_lake_options(
        written.name, props, None, event_time_column="ts", manifestDir=str(scratch / "pin")
    )
    options = IcebergSourceOptions.parse(resolved)
    ids: list[int] = []
    for f in IcebergFileLister(options).files():
        for batch in read_task(options, f.path, ["ts", "v"], None, None):
            assert batch.schema.names == ["ts", "v"]  # the equality column read, then dropped
        for batch in read_task(options, f.path, ["id"], None, None):
            ids += batch.column("id").to_pylist()
    return ids


def test_equality_deletes_the_reader_cannot_compare_are_refused(
    spark: SparkSession, scratch: Path
) -> None:
    """An equality delete on a double column (NaN and -0.0 make equality ambiguous) fails
    the run in one line naming the table, the snapshot and the delete file (the choice of
    the reader plans the snapshot in the caller: refused before the query starts)."""
    written = write_table(catalog_props(scratch / "catalog"), "db.eqdbl", "none", per_day=50)
    written, path = equality_delete(written, {"v": [1.0]}, name="eq-double.parquet")
    snapshot = written.table().current_snapshot().snapshot_id
    with pytest.raises(DataError) as caught:
        df = stream(spark, written, scratch)
        run(df.groupBy(F.window("ts", "10 minutes")).count(), scratch / "cp", "eqdbl")
    text = str(caught.value)
    assert "db.eqdbl" in text and str(snapshot) in text and path in text
    assert "'v' of type double" in text


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


def test_equality_deletes_on_an_object_store(scratch: Path, object_store: Any) -> None:
    """An equality delete file on the S3-compatible store is read through the table's FileIO
    (the catalog's ``s3.*`` settings) by the readers: the rows read equal the truth."""
    props = s3_catalog(object_store, scratch / "catalog", "wh-eqdel")
    written = write_table(props, "db.s3_eqdel", "none", per_day=100)
    written, path = equality_delete(written, {"id": list(range(0, 300, 3))}, name="eq.parquet")
    assert path.startswith("s3://") and len(written.rows) == 200
    readd = make_rows(3, 100, 1)
    readd["key"] = readd["key"].astype("Int64")
    written = appended(written, readd[readd["id"].isin([0, 3, 6])])
    ids = read_all_ids(written, props, scratch)
    assert len(ids) == len(set(ids)) == 203 and sorted(ids) == sorted(written.rows["id"])


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
