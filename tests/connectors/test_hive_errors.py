"""Bad input to the Hive streaming source: each case names the table, option, value or file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hive_tables import BASE, events, iso, write_event_time_table
from pyspark.errors import StreamingQueryException
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from kappaplus.connectors.hive import read_hive_stream, resolve_table
from kappaplus.core.errors import ConfigError, TableError


@pytest.fixture(scope="module")
def small_table(spark: SparkSession) -> str:
    write_event_time_table(spark, "hive_err_events", events(spark, 400, 0.25, seed=5), 1)
    return "hive_err_events"


def run(spark: SparkSession, table: str, scratch: Path, **options: object) -> None:
    stream = read_hive_stream(
        spark, table, event_time_column="ts", manifestDir=str(scratch / "m"), **options
    )
    query = (
        stream.writeStream.format("noop")
        .option("checkpointLocation", str(scratch / "ck"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()


def test_missing_table(spark: SparkSession):
    with pytest.raises(TableError, match="'no_such_table' not found"):
        read_hive_stream(spark, "no_such_table", event_time_column="ts")


def test_unknown_event_time_column(spark: SparkSession, small_table: str):
    with pytest.raises(ConfigError, match="'eventTimeColumn' = 'when'.*no such column"):
        read_hive_stream(spark, small_table, event_time_column="when")


def test_event_time_column_not_a_timestamp(spark: SparkSession, small_table: str):
    with pytest.raises(ConfigError, match="'eventTimeColumn' = 'kind'.*string, not a timestamp"):
        read_hive_stream(spark, small_table, event_time_column="kind")


def test_start_not_before_end(spark: SparkSession, small_table: str):
    with pytest.raises(ConfigError, match="'startingTimestamp'.*before endingTimestamp"):
        read_hive_stream(
            spark,
            small_table,
            event_time_column="ts",
            start="2024-03-02T00:00:00Z",
            end="2024-03-01T00:00:00Z",
        )


def test_bad_duration_option(spark: SparkSession, small_table: str):
    with pytest.raises(ConfigError, match="'maxEventTimePerTrigger' = 'soon'"):
        read_hive_stream(
            spark, small_table, event_time_column="ts", max_event_time_per_trigger="soon"
        )


def test_unsupported_format(spark: SparkSession):
    spark.sql("DROP TABLE IF EXISTS hive_err_json")
    spark.range(3).select(F.current_timestamp().alias("ts")).write.format("json").saveAsTable(
        "hive_err_json"
    )
    with pytest.raises(TableError, match="'hive_err_json' is stored as 'json'"):
        read_hive_stream(spark, "hive_err_json", event_time_column="ts")


def test_unparseable_partition_value(spark: SparkSession, scratch: Path):
    spark.sql("DROP TABLE IF EXISTS hive_err_dates")
    events(spark, 50, 0.1, seed=6).withColumn("dt", F.lit("yesterday")).write.partitionBy(
        "dt"
    ).format("parquet").saveAsTable("hive_err_dates")
    with pytest.raises(StreamingQueryException, match="dt=yesterday.*partitionTimeFormat"):
        run(spark, "hive_err_dates", scratch)


def test_unreadable_file(spark: SparkSession, small_table: str, scratch: Path):
    spark.sql("DROP TABLE IF EXISTS hive_err_corrupt")
    events(spark, 50, 0.1, seed=7).write.format("parquet").saveAsTable("hive_err_corrupt")
    location = resolve_table(spark, "hive_err_corrupt").location.replace("file:", "")
    (Path(location) / "part-99999-corrupt.parquet").write_bytes(b"this is not parquet" * 10)
    with pytest.raises(StreamingQueryException, match="part-99999-corrupt.parquet"):
        run(spark, "hive_err_corrupt", scratch)


def test_null_event_time_fails_by_default_naming_the_file(spark: SparkSession, scratch: Path):
    spark.sql("DROP TABLE IF EXISTS hive_err_nulls")
    rows = events(spark, 100, 0.1, seed=8).withColumn(
        "ts", F.when(F.col("id") % 10 == 3, None).otherwise(F.col("ts"))
    )
    rows.coalesce(1).write.format("parquet").saveAsTable("hive_err_nulls")
    with pytest.raises(StreamingQueryException, match=r"10 rows of file .*part-.*null.*deadLetter"):
        run(spark, "hive_err_nulls", scratch, end=iso(BASE + 86400))

    run(
        spark,
        "hive_err_nulls",
        scratch / "again",
        end=iso(BASE + 86400),
        nullEventTimePolicy="deadLetter",
        deadLetterPath=str(scratch / "dead"),
    )
    dead = spark.read.parquet(str(scratch / "dead"))
    ids = sorted(json.loads(r.value)["id"] for r in dead.select("value").collect())
    assert ids == list(range(3, 100, 10))
    reasons = {r.reason for r in dead.select("reason").collect()}
    assert {r.split(" (table ")[0] for r in reasons} == {"event time is null"}
    assert all("hive_err_nulls" in r and ".parquet" in r for r in reasons), reasons


def test_dead_letter_policy_needs_a_path(spark: SparkSession, small_table: str):
    with pytest.raises(ConfigError, match="'deadLetterPath'"):
        read_hive_stream(
            spark, small_table, event_time_column="ts", nullEventTimePolicy="deadLetter"
        )
