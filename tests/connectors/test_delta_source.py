"""The Delta streaming source (``kappa_delta``) against real Spark and tables written with
delta-rs.

Every streaming result is compared with a ground truth computed independently over the
pinned version: delta-rs's own reader (``DeltaTable(path, version=v).to_pandas()``) and
pandas windows (tumbling, sliding, session), on tables partitioned by day only and not
partitioned, with files written out of event-time order, rows deleted (delta-rs rewrites
the files), a file without statistics, and a version committed between two runs of one
backfill (not read by the resumed run).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from delta_tables import WrittenDelta, write_delta
from iceberg_tables import make_rows, sessions, sliding, tumbling
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.delta import read_delta_stream
from kappaplus.core.errors import ConfigError, TableError

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


def stream(spark: SparkSession, written: WrittenDelta, scratch: Path, **options: Any) -> DataFrame:
    return read_delta_stream(
        spark,
        written.path,
        event_time_column="ts",
        watermark_delay="30 minutes",
        end=END,
        manifest_dir=str(scratch / "manifests"),
        **{"targetRowsPerTrigger": ROWS_TARGET, **options},
    )


def utc(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def assert_windows(spark: SparkSession, written: WrittenDelta, scratch: Path, tag: str) -> None:
    """Tumbling (10 min, with sums), sliding (1 h every 15 min) and session (20 min gap)
    windows equal pandas over delta-rs's read of the pinned (current) version."""
    truth = written.truth()
    df = stream(spark, written, scratch / "tumbling")
    tumble = df.groupBy(F.window("ts", "10 minutes")).agg(
        F.count("*").alias("n"), F.sum("v").alias("s")
    )
    progress = run(tumble, scratch / "tumbling" / "cp", f"dt_{tag}")
    assert sum(1 for p in progress if p["numInputRows"]) >= 3, "expected several slices"
    got = sorted(
        (utc(r.window.start), r.n, round(r.s, 6)) for r in spark.table(f"dt_{tag}").collect()
    )
    assert got == tumbling(truth, 10)
    df = stream(spark, written, scratch / "sliding")
    run(
        df.groupBy(F.window("ts", "1 hour", "15 minutes")).count(),
        scratch / "s" / "cp",
        f"ds_{tag}",
    )
    got = sorted((utc(r.window.start), r["count"]) for r in spark.table(f"ds_{tag}").collect())
    assert got == sliding(truth, 60, 15)
    df = stream(spark, written, scratch / "session")
    run(
        df.groupBy("key", F.session_window("ts", "20 minutes")).count(),
        scratch / "w" / "cp",
        f"dw_{tag}",
    )
    got = sorted(
        (r.key, utc(r.session_window.start), utc(r.session_window.end), r["count"])
        for r in spark.table(f"dw_{tag}").collect()
    )
    assert got == sessions(truth, 20)


@pytest.mark.parametrize("partitioning", ["day", "none"])
def test_windows_equal_ground_truth(spark: SparkSession, scratch: Path, partitioning: str) -> None:
    written = write_delta(scratch / "lake", partitioning)
    assert len(written.table().file_uris()) == 6, "six files, out of event-time order"
    # no deletion vectors, local files: the JVM reader reads them (the log's partition values)
    plan = stream(spark, written, scratch / "plan")._jdf.queryExecution().analyzed().toString()
    assert "kappa_hive_jvm" in plan
    assert_windows(spark, written, scratch, partitioning)


def test_partition_values_from_the_log_are_delivered(spark: SparkSession, scratch: Path) -> None:
    """The day partition column is not in the files: every row carries its log value."""
    written = write_delta(scratch / "lake", "day", per_day=100)
    df = stream(spark, written, scratch)
    run(df.select("id", "day"), scratch / "cp", "dt_days")
    got = sorted((r.id, r.day) for r in spark.table("dt_days").collect())
    truth = written.truth()
    assert got == sorted(zip(truth["id"].tolist(), truth["day"].tolist(), strict=True))
    assert all(day is not None for _, day in got)


@pytest.mark.parametrize("partitioning", ["day", "none"])
def test_deleted_rows(spark: SparkSession, scratch: Path, partitioning: str) -> None:
    """Rows deleted (delta-rs rewrites the files that held them): the pinned version's rows
    only, as delta-rs reads that version."""
    written = write_delta(scratch / "lake", partitioning)
    before = len(written.truth())
    written.table().delete("id % 7 = 0")
    truth = written.truth()
    assert 0 < len(truth) < before and not (truth["id"] % 7 == 0).any()
    assert_windows(spark, written, scratch, f"del_{partitioning}")


def test_a_version_committed_between_runs_is_not_read_by_the_resumed_run(
    spark: SparkSession, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Stopped after two micro-batches, a version committed (rows inside the delivered range
    and beyond), then rerun on the same checkpoint: the output equals the pinned version's
    ground truth, the new version is counted and logged, nothing duplicated."""
    written = write_delta(scratch / "lake", "none")
    pinned = written.version()
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
    written.append(extra)
    assert written.version() == pinned + 1
    with caplog.at_level(logging.WARNING, logger="kappaplus.connectors.delta.table"):
        second = query(stream(spark, written, scratch)).trigger(availableNow=True).start()
        second.awaitTermination()
    assert any("1 version(s) committed after the pinned version" in m for m in caplog.messages)
    got = sorted(
        (utc(r.window.start), r.n, round(r.s, 6)) for r in spark.read.parquet(str(out)).collect()
    )
    assert got == tumbling(written.truth(pinned), 10)
    assert got != tumbling(written.truth(), 10)


def test_a_file_without_statistics_is_said_once_and_read_whole(
    spark: SparkSession, scratch: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A file whose add action has no statistics: said once, read in every slice with
    the slice's filter (its row count from its footer); the output is the ground truth."""
    from delta_tables import add_file_without_statistics

    from kappaplus.connectors.delta.lister import DeltaFileLister
    from kappaplus.connectors.delta.options import DeltaSourceOptions
    from kappaplus.connectors.delta.table import delta_lake_options

    written = write_delta(scratch / "lake", "none", per_day=150, files=3)
    extra = make_rows(3, 20, seed=5)
    extra["id"] += 900_000
    bare = add_file_without_statistics(written, extra)
    resolved = delta_lake_options(
        written.path, None, None, event_time_column="ts", manifestDir=str(scratch / "pin")
    )
    lister = DeltaFileLister(DeltaSourceOptions.parse(resolved))
    with caplog.at_level(logging.INFO, logger="kappaplus.connectors.delta.lister"):
        for _ in range(2):
            stats = [lister.stats(f)[0] for f in lister.files()]
    assert sum(1 for g in stats if g.ts_min is None) == 1, stats
    assert sum(g.num_rows for g in stats) == len(written.truth())
    said = [m for m in caplog.messages if "has no statistics" in m]
    assert len(said) == 1 and bare in said[0], said
    df = stream(spark, written, scratch)
    run(df.groupBy(F.window("ts", "10 minutes")).count(), scratch / "cp", "dt_nostats")
    got = sorted((utc(r.window.start), r["count"]) for r in spark.table("dt_nostats").collect())
    assert got == [(t, n) for t, n, _ in tumbling(written.truth(), 10)]


def test_statistics_truncated_to_milliseconds_lose_no_row(
    spark: SparkSession, scratch: Path
) -> None:
    """Delta keeps timestamp statistics in milliseconds: a file's last row at .999999 s is
    above its recorded maximum; slices cut at that maximum still deliver it."""
    from kappaplus.connectors.delta.lister import DeltaFileLister
    from kappaplus.connectors.delta.options import DeltaSourceOptions
    from kappaplus.connectors.delta.table import delta_lake_options

    written = write_delta(scratch / "lake", "none", per_day=200, files=4)
    resolved = delta_lake_options(
        written.path, None, None, event_time_column="ts", manifestDir=str(scratch / "pin")
    )
    lister = DeltaFileLister(DeltaSourceOptions.parse(resolved))
    truth = written.truth()
    top = int(truth["ts"].max().value // 1000)
    recorded = max(lister.stats(f)[0].ts_max for f in lister.files())
    assert recorded >= top  # widened past the truncated maximum
    df = stream(spark, written, scratch, targetRowsPerTrigger="97")
    run(df.select("id"), scratch / "cp", "dt_ms")
    got = sorted(r.id for r in spark.table("dt_ms").collect())
    assert got == sorted(truth["id"].tolist())


@pytest.mark.parametrize("partitioning", ["day", "none"])
def test_deletion_vectors_are_applied(
    spark: SparkSession, scratch: Path, partitioning: str
) -> None:
    """A file with a deletion vector (rows 0 and 3 deleted without rewriting the file): the
    source drops exactly those rows; the ground truth is delta-rs's DataFusion reader of the
    version, checked against the rows as written minus the deleted positions."""
    import pyarrow.parquet as pq
    from delta_tables import add_deletion_vector

    written = write_delta(
        scratch / "lake",
        partitioning,
        per_day=60,
        files=2,
        configuration={"delta.enableDeletionVectors": "true"},
    )
    before = written.truth()
    data_file = add_deletion_vector(written, (0, 3))
    stored = pq.read_table(Path(written.path) / data_file, columns=["id"]).column("id")
    deleted = {stored[0].as_py(), stored[3].as_py()}
    truth = written.truth()
    assert sorted(truth["id"]) == sorted(set(before["id"]) - deleted)
    with pytest.raises(ConfigError, match="the table has deletion vectors"):
        stream(spark, written, scratch / "jvm", reader="jvm")  # the JVM reader would keep them
    df = stream(spark, written, scratch)
    assert "kappa_hive_jvm" not in df._jdf.queryExecution().analyzed().toString()
    run(df.select("id", "ts", "v"), scratch / "cp", f"dt_dv_{partitioning}")
    got = sorted(r.id for r in spark.table(f"dt_dv_{partitioning}").collect())
    assert got == sorted(truth["id"].tolist())


def test_column_mapping_is_refused_naming_table_version_and_file(scratch: Path) -> None:
    """Column mapping (files keep physical column names): refused in one line naming the
    table, the version and a data file, before Spark reads anything."""
    from delta_tables import enable_column_mapping

    from kappaplus.connectors.delta.table import delta_lake_options
    from kappaplus.core.errors import DataError

    written = write_delta(scratch / "lake", "none", per_day=10, files=1)
    enable_column_mapping(written)
    with pytest.raises(DataError) as caught:
        delta_lake_options(
            written.path, None, None, event_time_column="ts", manifestDir=str(scratch / "m")
        )
    text = str(caught.value)
    data_file = Path(written.table().file_uris()[0]).name
    assert written.path in text and f"version {written.version()}" in text
    assert data_file in text and "column mapping mode 'name'" in text


def test_unknown_table_is_one_line(spark: SparkSession, scratch: Path) -> None:
    with pytest.raises(TableError, match="no Delta table at"):
        read_delta_stream(spark, str(scratch / "nothing"), event_time_column="ts")


def test_hybrid_options_take_a_delta_lake(spark: SparkSession, scratch: Path) -> None:
    """A bootstrap's hybrid source takes the Delta table's pinned version as its lake; its
    default dead-letter path is under the state directory, never inside the table."""
    from pyspark.sql.types import (
        DoubleType,
        LongType,
        StringType,
        StructField,
        StructType,
        TimestampType,
    )

    from kappaplus.codecs import DecoderSpec
    from kappaplus.connectors.delta.options import DeltaSourceOptions
    from kappaplus.connectors.hybrid.options import HybridSourceOptions
    from kappaplus.connectors.hybrid.source import hybrid_stream_options

    written = write_delta(scratch / "lake", "day", per_day=10, files=1)
    fields = [("id", LongType()), ("key", LongType()), ("ts", TimestampType())]
    decoder = DecoderSpec(
        format="json",
        schema=StructType(
            [StructField(n, t) for n, t in [*fields, ("v", DoubleType()), ("day", StringType())]]
        ),
        event_time="ts",
    )
    resolved = hybrid_stream_options(
        spark,
        table=written.path,
        event_time_column="ts",
        cutoff="2024-03-03",
        decoder=decoder,
        delta={"storage_options": None, "version": None},
        bootstrap="127.0.0.1:1",
        subscribe="t",
        manifestDir=str(scratch / "manifests"),
    )
    options = HybridSourceOptions.parse(resolved)
    assert isinstance(options.lake, DeltaSourceOptions)
    assert options.lake.delta_version == written.version()
    assert options.lake.partition_columns == ("day",)
    assert not resolved["deadLetterPath"].startswith(written.path)


def test_what_sends_a_delta_table_to_the_python_reader(scratch: Path) -> None:
    """Type widening, a file system the JVM lacks, dead letters: each named (deletion
    vectors: :func:`test_deletion_vectors_are_applied`)."""
    from kappaplus.connectors.delta.jvm_path import jvm_unsupported_delta
    from kappaplus.connectors.delta.options import DeltaSourceOptions
    from kappaplus.connectors.delta.table import delta_lake_options
    from kappaplus.connectors.lake.jvm_reader import lake_file_uri as delta_file_uri

    written = write_delta(scratch / "lake", "day", per_day=20)

    def why(features: set[str], reachable: Any = lambda s: s == "file", **extra: Any) -> Any:
        resolved = delta_lake_options(
            written.path,
            None,
            None,
            event_time_column="ts",
            manifestDir=str(scratch / "m"),
            **extra,
        )
        return jvm_unsupported_delta(DeltaSourceOptions.parse(resolved), features, reachable)

    assert why(set()) is None
    assert why({"typeWidening"}) == (
        "the table allows type widening; the Python reader casts older files"
    )
    assert "no file system for file://" in why(set(), lambda s: False)
    dead = why(set(), nullEventTimePolicy="deadLetter", deadLetterPath=str(scratch / "dlq"))
    assert dead == "unplaceable rows go to dead letters, which only the Python reader writes"
    assert delta_file_uri("/lake/t/day=2024-03-01/a.parquet") == (
        "file:///lake/t/day=2024-03-01/a.parquet"
    )
    assert delta_file_uri("s3://b/t/a.parquet") == "s3://b/t/a.parquet"
