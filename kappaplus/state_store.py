"""The state store ``kappa run`` gives its queries, and whether it counts its rows.

Kept apart from :mod:`kappaplus.session` (which applies :data:`STATE_STORE_SETTINGS` as
defaults): the runtime's progress and metrics ask :func:`state_rows_counted` of a session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
TRACK_STATE_ROWS = "spark.sql.streaming.stateStore.rocksdb.trackTotalNumberOfRows"
STATE_STORE_SETTINGS: dict[str, str] = {
    # RocksDB keeps state off the JVM heap (the default store holds every key of every
    # retained version in executor memory) and is what transformWithState requires.
    "spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER,
    # Each commit writes a changelog of the batch's changes instead of uploading a snapshot
    # of the store's files: a shorter state commit per stateful micro-batch
    # (docs/benchmarks.md). Spark moves an existing checkpoint between the two either way.
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    # Without the row count RocksDB does not read a key before each put and delete only to
    # keep its total: a 30-day sessionization backfill took 0.81x and 0.94x of the time
    # (two alternating pairs; task CPU 0.74x and 0.89x; docs/benchmarks.md, issue 51). The
    # state figure of the progress and metrics is then absent (:func:`state_rows_counted`).
    TRACK_STATE_ROWS: "false",
}
"""The state store ``kappa run`` gives its queries where neither ``spark-defaults.conf``
nor the caller chose one (:func:`create_session` ``defaults``). Spark records the provider
in a query's checkpoint at its first run; a later run of that checkpoint keeps it."""


def state_rows_counted(spark: SparkSession) -> bool:
    """Whether the session's state stores count their rows (``numRowsTotal``): not with
    RocksDB and ``trackTotalNumberOfRows=false`` (:data:`STATE_STORE_SETTINGS`), which then
    reports 0 rows."""
    provider = spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") or ""
    if "RocksDB" not in provider:
        return True
    return (spark.conf.get(TRACK_STATE_ROWS, "true") or "true").strip().lower() != "false"
