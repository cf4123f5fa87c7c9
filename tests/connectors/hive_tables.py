"""Building Hive tables of generated events for the Hive streaming source tests."""

from __future__ import annotations

from datetime import UTC, datetime

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

DAY = 86400
HOUR_S = 3600
BASE = int(datetime(2024, 3, 1, tzinfo=UTC).timestamp())


def events(spark: SparkSession, n: int, days: float, seed: int, base: int = BASE) -> DataFrame:
    """``n`` events over ``days`` days: id, key (13 keys), kind, event time ``ts``.

    Event times are random, so every file is out of order internally.
    """
    seconds = int(days * DAY)
    return spark.range(0, n).select(
        F.col("id"),
        (F.col("id") * 7 % 13).cast("int").alias("key"),
        F.element_at(
            F.array(*[F.lit(k) for k in ("open", "search", "request", "pay")]),
            (F.col("id") % 4 + 1).cast("int"),
        ).alias("kind"),
        (F.lit(base) + (F.rand(seed) * seconds).cast("long")).cast("timestamp").alias("ts"),
    )


def write_event_time_table(
    spark: SparkSession, table: str, df: DataFrame, files_per_partition: int = 3
) -> None:
    """A table partitioned by the event time's date and hour (``dt=.../hr=...``)."""
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    (
        df.withColumn("dt", F.date_format("ts", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("ts", "HH"))
        .repartition(files_per_partition, "dt", "hr", "key")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )


def write_arrival_time_table(
    spark: SparkSession, table: str, df: DataFrame, max_delay_seconds: int, seed: int
) -> DataFrame:
    """A table partitioned by *arrival* hour: each event arrives up to ``max_delay_seconds``
    after its event time. Returns the events with their ``arrival`` time."""
    spark.sql(f"DROP TABLE IF EXISTS {table}")
    arrived = df.withColumn(
        "arrival",
        (F.col("ts").cast("long") + (F.rand(seed) * max_delay_seconds).cast("long")).cast(
            "timestamp"
        ),
    )
    (
        arrived.withColumn("dt", F.date_format("arrival", "yyyy-MM-dd"))
        .withColumn("hr", F.date_format("arrival", "HH"))
        .drop("arrival")
        .repartition(2, "dt", "hr")
        .write.partitionBy("dt", "hr")
        .format("parquet")
        .saveAsTable(table)
    )
    return arrived


def iso(seconds: int) -> str:
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
