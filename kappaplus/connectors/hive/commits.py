"""What a Hive table's commit log says: which queries (checkpoints) committed batches to it,
with the run provenance of their last commit, and where the table lives."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from kappaplus.connectors.hive.sink_options import table_sql
from kappaplus.errors import TableError
from kappaplus.table.commit_log import COMMITS_DIR
from kappaplus.table.hadoop_fs import HadoopFs

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class CommittedRun:
    """What one query (one checkpoint) committed to a table, from its last commit marker."""

    query: str
    batches: int
    provenance: dict[str, Any] | None


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
        provenance = record.get("provenance") if isinstance(record, dict) else None
        found.append(CommittedRun(query, len(batches), provenance))
    return found


def table_location(spark: SparkSession, table: str) -> str:
    """The storage location (URI) of ``table``."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {table_sql(table)}").collect()
    for row in rows:
        if row[0] == "Location":
            return str(row[1]).rstrip("/")
    raise TableError(f"table {table} has no location")


def partition_columns(spark: SparkSession, table: str) -> list[str]:
    catalog_columns = spark.catalog.listColumns(table)
    return [c.name for c in catalog_columns if c.isPartition]
