"""The Hive sink's table: created on first write, checked against the rows it will take.

Split from :mod:`kappaplus.connectors.hive.sink` (the commit protocol); the sink calls
:func:`create_or_check` once per query.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kappaplus.connectors.hive.commits import describe_table
from kappaplus.connectors.hive.sink_options import HiveSinkOptions, quote_identifier, table_sql
from kappaplus.core.errors import TableError
from kappaplus.core.table import BATCH_COLUMN

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("kappaplus.connectors.hive.sink")


def create_or_check(spark: SparkSession, opts: HiveSinkOptions, df: DataFrame) -> str:
    """Create the sink's table if missing (and allowed); check the rows fit it; its location."""
    if not spark.catalog.tableExists(opts.table):
        if not opts.create_table:
            raise TableError(f"table {opts.table} does not exist (create_table is off)")
        time_columns = opts.time_partition_columns
        columns = [f for f in df.schema.fields if f.name not in time_columns]
        ddl_parts = [f"{quote_identifier(f.name)} {f.dataType.simpleString()}" for f in columns]
        ddl_parts += [
            f"{quote_identifier(name)} {df.schema[name].dataType.simpleString()}"
            for name in time_columns
        ]
        if opts.visibility == "batch":
            ddl_parts.append(f"{quote_identifier(BATCH_COLUMN)} bigint")
        partitioned = ", ".join(quote_identifier(c) for c in opts.table_partition_columns)
        if "." in opts.table:
            spark.sql(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(opts.table.split('.')[0])}")
        try:
            spark.sql(
                f"CREATE TABLE IF NOT EXISTS {table_sql(opts.table)} "
                f"({', '.join(ddl_parts)}) USING parquet PARTITIONED BY ({partitioned})"
            )
        except Exception as exc:  # another writer may have created it meanwhile
            if not spark.catalog.tableExists(opts.table):
                raise TableError(f"cannot create table {opts.table}: {exc}") from exc
        log.info("created table %s partitioned by %s", opts.table, opts.table_partition_columns)
    location, parts = describe_table(spark, opts.table)
    check_schema(spark, opts, df, parts)
    return location


def check_schema(
    spark: SparkSession, opts: HiveSinkOptions, df: DataFrame, parts: list[str]
) -> None:
    """Raise :class:`TableError` naming what differs when ``df`` does not fit the table
    partitioned by ``parts``."""
    from pyspark.sql.types import LongType

    wanted = opts.table_partition_columns
    if [p.lower() for p in parts] != [c.lower() for c in wanted]:
        hint = ""
        if opts.visibility == "batch" and BATCH_COLUMN not in [p.lower() for p in parts]:
            hint = (
                f"; a table without the {BATCH_COLUMN!r} partition column takes "
                "visibility 'partition'"
            )
        elif opts.visibility == "partition" and BATCH_COLUMN in [p.lower() for p in parts]:
            hint = f"; a table partitioned by {BATCH_COLUMN!r} takes visibility 'batch'"
        raise TableError(
            f"table {opts.table} is partitioned by {parts}, the sink writes {wanted} "
            f"(visibility {opts.visibility!r}){hint}"
        )
    table_schema = spark.table(opts.table).schema
    expected = {f.name.lower(): f.dataType for f in table_schema.fields}
    if opts.visibility == "batch":
        batch_type = expected.pop(BATCH_COLUMN)
        if batch_type != LongType():
            raise TableError(
                f"table {opts.table}: partition column {BATCH_COLUMN!r} is "
                f"{batch_type.simpleString()}, the sink writes batch ids as bigint"
            )
    got = {f.name.lower(): f.dataType for f in df.schema.fields}
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    if missing or extra:
        raise TableError(
            f"table {opts.table}: the rows do not fit its columns "
            f"(missing: {missing or '-'}, unexpected: {extra or '-'})"
        )
    for name, data_type in expected.items():
        if got[name] != data_type:
            raise TableError(
                f"table {opts.table}: column {name!r} is {data_type.simpleString()} in the "
                f"table but {got[name].simpleString()} in the rows"
            )
