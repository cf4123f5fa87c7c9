"""The audit's observation reads a bucket column computed below it (compiled with the
stage), not an expression Spark would evaluate row by row; the counts themselves are
checked end to end in ``test_audit.py``."""

from __future__ import annotations

from pyspark.sql import functions as F

from kappaplus.audit.counts import observe_buckets, observe_rows


def collect_metrics(df) -> str:  # type: ignore[no-untyped-def]
    """The CollectMetrics node of ``df``'s analyzed plan, as Spark prints it."""
    lines = df._jdf.queryExecution().analyzed().toString().splitlines()
    found = [line for line in lines if "CollectMetrics" in line]
    assert len(found) == 1, lines
    return found[0]


def test_the_histogram_reads_a_projected_bucket_column(spark) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame([(1, "2024-03-01 00:05:00"), (2, None)], "id int, ts string").select(
        "id", F.col("ts").cast("timestamp").alias("ts")
    )
    observed = observe_rows(df, "lake", "events", "delivered", "ts", where=F.col("id") > 0)
    node = collect_metrics(observed)
    assert "histogram_numeric(__kappa_bucket_0#" in node, node
    assert "floor" not in node.lower() and "coalesce" not in node.lower(), node
    assert observed.columns == ["id", "ts"]  # the bucket column is dropped above it
    assert sorted(observed.collect()) == sorted(df.collect())


def test_bucket_columns_never_shadow_the_frames_own(spark) -> None:  # type: ignore[no-untyped-def]
    df = spark.createDataFrame([(7, 1)], "__kappa_bucket_0 bigint, x int")
    observed = observe_buckets(df, "kappa_audit.kafka.t", {"read": F.col("x").cast("bigint")})
    assert "histogram_numeric(___kappa_bucket_0#" in collect_metrics(observed)
    assert observed.columns == ["__kappa_bucket_0", "x"]
    assert observed.collect()[0]["__kappa_bucket_0"] == 7
