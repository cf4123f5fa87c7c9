"""What a Hive table's commit log says: which queries (checkpoints) committed batches to it,
with the run provenance of their last commit, and where the table lives."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kappaplus.connectors.hive.sink_options import table_sql
from kappaplus.core.errors import TableError
from kappaplus.core.table.catalogs import described
from kappaplus.core.table.commit_log import COMMITS_DIR
from kappaplus.core.table.hadoop_fs import HadoopFs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

REPLACED_PREFIX = "_replaced-"
"""Files ``_replaced-<query>`` beside a query's markers: a range its rows were replaced in."""


@dataclass(frozen=True)
class CommittedRun:
    """What one query (one checkpoint) committed to a table, from its last commit marker."""

    query: str
    batches: int
    provenance: dict[str, Any] | None
    span: tuple[int, int] | None = None
    """``(min, max)`` event time (epoch microseconds, the output's event-time column) of
    every row the query committed, from its last marker; None if it recorded none (no rows,
    no timestamp event-time column, or markers written before spans were recorded)."""
    replaced: tuple[tuple[int, int], ...] = ()
    """``[start, end)`` ranges (epoch microseconds) whose rows of this query a range
    replacement removed (``_replaced-<query>`` files beside its markers)."""


def committed_runs(spark: SparkSession, table: str) -> list[CommittedRun]:
    """Every query that committed batches to ``table`` (empty if the table does not exist),
    with the provenance its last commit marker records (None for markers written before
    provenance was recorded)."""
    if not spark.catalog.tableExists(table):
        return []
    location = table_location(spark, table)
    fs = HadoopFs(spark, location)
    base = f"{location}/{COMMITS_DIR}"
    found = []
    for query in fs.list_dirs(base):
        batches = sorted(int(n) for n in fs.list_files(f"{base}/{query}") if n.isdigit())
        if not batches:
            continue
        try:
            record = json.loads(fs.read_text(f"{base}/{query}/{batches[-1]}"))
        except ValueError:
            record = {}
        if not isinstance(record, dict):
            record = {}
        span = record.get("span")
        replaced = []
        for name in fs.list_files(f"{base}/{query}"):
            if name.startswith(REPLACED_PREFIX):
                try:
                    entry = json.loads(fs.read_text(f"{base}/{query}/{name}"))
                    replaced.append((int(entry["start"]), int(entry["end"])))
                except (ValueError, KeyError, TypeError):
                    continue
        found.append(
            CommittedRun(
                query,
                len(batches),
                record.get("provenance"),
                (int(span[0]), int(span[1])) if isinstance(span, list) and len(span) == 2 else None,
                tuple(replaced),
            )
        )
    return found


def query_markers(spark: SparkSession, location: str, query: str) -> dict[int, dict[str, Any]]:
    """Every commit marker of ``query`` in the table at ``location``, by batch id."""
    fs = HadoopFs(spark, location)
    base = f"{location}/{COMMITS_DIR}/{query}"
    if not fs.exists(base):
        return {}
    found: dict[int, dict[str, Any]] = {}
    for name in fs.list_files(base):
        if name.isdigit():
            try:
                record = json.loads(fs.read_text(f"{base}/{name}"))
            except ValueError:
                continue
            if isinstance(record, dict):
                found[int(name)] = record
    return found


def record_replaced(spark: SparkSession, location: str, query: str, by: str, span: Any) -> None:
    """Record beside ``query``'s markers that the run ``by`` replaced its rows over
    ``span`` (``[start, end)`` in epoch microseconds): :func:`committed_runs` reports it."""
    fs = HadoopFs(spark, location)
    path = f"{location}/{COMMITS_DIR}/{query}/{REPLACED_PREFIX}{by}"
    fs.write_atomically(path, json.dumps({"start": span[0], "end": span[1], "by": by}))


def describe_table(spark: SparkSession, table: str) -> tuple[str, list[str]]:
    """The storage location (URI) of ``table`` and its partition columns in order, from one
    catalog call (:func:`~kappaplus.core.table.catalogs.described`; the catalog's
    ``listColumns`` makes one remote call per column attribute)."""
    partitions, details = described(spark, table_sql(table))
    location = details.get("Location")
    if not location:
        raise TableError(f"table {table} has no location")
    return location.rstrip("/"), partitions


def table_location(spark: SparkSession, table: str) -> str:
    """The storage location (URI) of ``table``."""
    return describe_table(spark, table)[0]


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    """The partition columns of ``table``, in order."""
    return describe_table(spark, table)[1]
