"""Resolving a Hive table through Spark's catalog and opening it as an event-time stream.

The data source's own methods run in Python workers without a SparkSession, so
everything that needs the catalog (location, format, schema, partition columns) is
resolved here, in the caller's process, and handed to the source as options.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.errors import AnalysisException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from kappaplus.connectors.hive.datasource import HiveStreamDataSource
from kappaplus.connectors.hive.layout import infer_layout
from kappaplus.connectors.lake.jvm_reader import LakeStream, jvm_unsupported
from kappaplus.connectors.lake.options import LakeSourceOptions, range_options
from kappaplus.connectors.lake.stream import LakeFormat, open_lake_stream
from kappaplus.core.errors import TableError, TableNotFound
from kappaplus.core.settings import state_dir
from kappaplus.core.table.catalogs import described


@dataclass(frozen=True)
class HiveTable:
    """What the catalog knows about a table that the source needs."""

    name: str
    location: str
    format: str
    schema: StructType
    partition_columns: tuple[str, ...]

    def partition_types(self) -> list[tuple[str, str]]:
        return [(c, self.schema[c].dataType.simpleString()) for c in self.partition_columns]


T = TypeVar("T")

_RESOLVED: ContextVar[dict[tuple[Any, ...], Any] | None] = ContextVar(
    "kappa_resolved_hive_tables", default=None
)


@contextlib.contextmanager
def resolution_scope() -> Iterator[None]:
    """Within this block :func:`resolve_table` asks the catalog once per table and session.

    Binding a job's Hive input resolves its table three times (the job's mapping, the files'
    schemas, the source's options), and ``kappa run`` binds twice when the slice size
    follows the job's plan: each catalog answer is a metastore round trip before the first
    micro-batch. The scope lasts one run's preparation, so a later run (or a long-lived
    session) sees the table as it is then. Failures are not kept.
    """
    token = _RESOLVED.set({})
    try:
        yield
    finally:
        _RESOLVED.reset(token)


def within_scope(key: tuple[Any, ...], compute: Callable[[], T]) -> T:
    """``compute()`` once per ``key`` within :func:`resolution_scope` (every time outside
    one): what a binding learns from the catalog and the files, such as the check of every
    data file's schema, is the same when ``kappa run`` binds a second time."""
    kept = _RESOLVED.get()
    if kept is None:
        return compute()
    if key not in kept:
        kept[key] = compute()
    return kept[key]


def resolve_table(spark: SparkSession, table: str) -> HiveTable:
    """Look ``table`` up in the catalog; :class:`TableError` if it is missing or unreadable.

    Two catalog calls (location, format and partition columns:
    :func:`~kappaplus.core.table.catalogs.described`; then the table's schema): each is a
    metastore round trip, paid before a run's first micro-batch (once per table within
    :func:`resolution_scope`).
    """
    return within_scope((id(spark), table), lambda: _lookup_table(spark, table))


def _lookup_table(spark: SparkSession, table: str) -> HiveTable:
    try:
        partition_columns, details = described(spark, table)
    except AnalysisException as exc:
        if "TABLE_OR_VIEW_NOT_FOUND" not in str(exc):
            raise
        from kappaplus.core.table.catalogs import elsewhere

        database = spark.catalog.currentDatabase()
        hint = elsewhere(spark, table)  # e.g. registered in the other catalog
        raise TableNotFound(
            f"table {table!r} not found in the catalog (current database {database!r})"
            + (
                f"; {hint}"
                if hint
                else ": check the name, or register its files with 'kappa table register'"
            )
        ) from None
    if details.get("Type", "").upper() == "VIEW":
        raise TableError(f"{table!r} is a view; the Hive streaming source reads tables")
    provider = details.get("Provider", "").lower()
    if provider == "hive":
        input_format = details.get("InputFormat", "").lower()
        provider = next((f for f in ("parquet", "orc") if f in input_format), input_format)
    if provider not in ("parquet", "orc"):
        raise TableError(
            f"table {table!r} is stored as {provider or 'an unknown format'!r}; the Hive "
            "streaming source reads parquet and orc tables"
        )
    location = details.get("Location")
    if not location:
        raise TableError(f"table {table!r} has no location in the catalog")
    return HiveTable(table, location, provider, spark.table(table).schema, tuple(partition_columns))


def hive_stream_options(
    table: HiveTable,
    *,
    event_time_column: str,
    start: Any = None,
    end: Any = None,
    max_event_time_per_trigger: str | None = None,
    watermark_delay: str | None = None,
    manifest_dir: str | None = None,
    **options: Any,
) -> dict[str, str]:
    """The string options for ``format("kappa_hive")``, validated (errors name the option)."""
    resolved: dict[str, str] = {
        "table": table.name,
        "location": table.location,
        "format": table.format,
        "schema": json.dumps(table.schema.jsonValue()),
        "partitionColumns": ",".join(table.partition_columns),
        "eventTimeColumn": event_time_column,
        "manifestDir": manifest_dir or str(state_dir() / "hive-source" / "manifests"),
    }
    resolved.update(range_options(start, end, max_event_time_per_trigger, watermark_delay))
    layout = options.pop("partitionTimeFormat", None) or infer_layout(table.partition_types())
    if layout:
        resolved["partitionTimeFormat"] = layout
    resolved.update({k: str(v) for k, v in options.items() if v is not None})
    LakeSourceOptions.parse(resolved)  # fail here, in the caller, with a clear message
    return resolved


def read_hive_stream(
    spark: SparkSession,
    table: str,
    *,
    event_time_column: str,
    start: Any = None,
    end: Any = None,
    max_event_time_per_trigger: str | None = None,
    watermark_delay: str | None = None,
    **options: Any,
) -> DataFrame:
    """Open a Hive table as a streaming DataFrame, one event-time slice per micro-batch.

    With ``watermark_delay`` the watermark is applied here and a bounded run (``end`` or
    ``Trigger.AvailableNow``) finishes with every window ending at or before its end
    emitted; the returned DataFrame has exactly the table's columns (or ``columns``) either
    way.

    >>> rides = read_hive_stream(spark, "lake.rides", event_time_column="event_time",
    ...                          start="2024-01-01", end="2024-01-08",
    ...                          max_event_time_per_trigger="2 hours",
    ...                          watermark_delay="10 minutes")        # doctest: +SKIP

    Further options (camelCase, as the data source takes them): ``maxRowsPerTrigger``,
    ``maxBytesPerTrigger``, ``partitionTimeFormat``, ``partitionTimeKind`` (event |
    arrival), ``maxLateness``, ``maxEarliness`` (clock skew), ``completenessDelay``,
    ``nullEventTimePolicy`` (fail |
    deadLetter), ``deadLetterPath``, ``manifestDir``, ``rowsPerPartition``, ``columns``
    (comma-separated: read and deliver only these columns and the event-time column;
    dead-lettered rows keep all of theirs).
    """
    return open_hive_stream(
        spark,
        table,
        event_time_column=event_time_column,
        start=start,
        end=end,
        max_event_time_per_trigger=max_event_time_per_trigger,
        watermark_delay=watermark_delay,
        **options,
    ).df


def _resolve(
    spark: SparkSession, table: str, *, event_time_column: str, **options: Any
) -> dict[str, str]:
    return hive_stream_options(
        resolve_table(spark, table), event_time_column=event_time_column, **options
    )


HIVE = LakeFormat(
    data_source=HiveStreamDataSource,
    resolve=_resolve,
    unsupported=lambda spark, parsed: jvm_unsupported(parsed),
)
"""The Hive format of :func:`~kappaplus.connectors.lake.stream.open_lake_stream`."""


def hive_format() -> LakeFormat:
    """:data:`HIVE` (as the other formats give theirs)."""
    return HIVE


def open_hive_stream(spark: SparkSession, table: str, **options: Any) -> LakeStream:
    """:func:`read_hive_stream`, and whether the reader counts the rows it delivers, as
    ``count_delivered`` asks (the JVM reader does)."""
    return open_lake_stream(spark, HIVE, table, **options)
