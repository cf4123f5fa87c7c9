"""Exactly-once Hive table sink for streaming queries (a ``foreachBatch`` writer).

Why not ``batch_df.write.insertInto(table)``: Structured Streaming replays the last
micro-batch after a crash, and a plain append then writes its rows a second time; the
alternative, dynamic partition overwrite, would delete the rows that earlier batches put
in the same event-date partition. A Hive table has no transactions, so this sink builds
exactly-once from what a Hive table does have: a file rename is atomic on HDFS and local
file systems, readers only see the partitions the metastore lists, and Spark ignores
paths whose name starts with ``_`` or ``.``.

Layout (``<loc>`` is the table location; ``q`` the query name; ``b`` the batch id)::

    <loc>/dt=2024-01-01/kappa-q-00000000000000000007-00000.snappy.parquet  published
    <loc>/_kappa_staging/q/7/data/dt=2024-01-01/part-....parquet            staged, hidden
    <loc>/_kappa_staging/q/7/_MANIFEST.json                                  staging done
    <loc>/_kappa_commits/q/7                                                 committed

Protocol for batch ``b`` of query ``q`` (every step is idempotent):

1. If the commit marker ``_kappa_commits/q/b`` exists the batch was committed before a
   crash (Spark had not yet recorded it): remove leftover staging, write nothing.
2. Stage: unless ``_MANIFEST.json`` exists, delete any half-written staging directory and
   write the batch with ``partitionBy(dt)`` under ``_kappa_staging/q/b/data`` (Spark's
   own task commit; all of it hidden from readers), one file per partition by default.
   Then write the manifest (temp file renamed into place) mapping every staged file to
   its published name ``kappa-<q>-<b>-<n>`` -- derived from (query, batch, index), so
   the same file always lands under the same name. Once the manifest exists staged files
   are never rewritten: a replay may split the same rows into different files, and
   re-staging after some files were published would duplicate rows.
3. Register: create the partition directories and add the partitions to the metastore in
   one ``ALTER TABLE ... ADD IF NOT EXISTS PARTITION ... PARTITION ...`` (one metastore
   transaction; a new partition is empty, so nothing of the batch is visible yet).
4. Publish: rename each staged file to its published name in its partition directory.
   A published name that already exists was moved before the crash (roll forward); a
   file that is neither staged nor published is a :class:`~kappaplus.errors.ReplayError`.
5. Commit: write ``_kappa_commits/q/b`` last (temp + rename), delete the staging
   directory, refresh the table in this session.

What readers see. No file is ever visible half-written, and a replay adds nothing that
was already published. With ``files_per_partition=1`` (the default) the batch's rows of
one event date are ONE file, so they appear in one atomic rename: a reader sees all of a
batch's rows for a date or none. A batch spanning several dates is published one rename
per date, in date order, and a reader listing the table between two renames sees the
earlier dates only: Hive has no atomic switch over several directories (Hive's own
dynamic-partition inserts behave the same), and Spark does not read subdirectories of a
catalog partition, so a batch cannot hide in a directory renamed as a whole. With
``files_per_partition > 1`` (large backfill batches) visibility is per file. Readers that
need whole batches can compare with :meth:`HiveTableSink.committed_batches`.

``MSCK REPAIR TABLE`` is harmless at any time: the only ``dt=`` directories it can find
are ones step 3 registered, and staging lives under ``_``-prefixed directories it skips.
Two queries may write one table (their names keep commit logs and files apart), but the
stream and the backfill of a job normally write different tables (``<table>_backfill``).

``update`` output mode writes each batch's changed rows as they are: the table is then a
changelog (the latest row per key wins), not an upserted table.

>>> sink = HiveTableSink(HiveSinkOptions(table="agg.ride_counts", query_name="ride_counts",
...                                      event_time_column="start"))       # doctest: +SKIP
>>> df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from kappaplus.errors import ConfigError, DataError, ReplayError, TableError

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kappaplus.config import HiveOutput

log = logging.getLogger(__name__)

FaultHook = Callable[[str, int], None]
"""Called with each protocol step name (``written``, ``staged``, ``registered``,
``published:dt=...``, ``committed``) and the batch id after the step completes; tests
raise from it to simulate a crash at that point."""

_TABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_QUERY = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
DEFAULT_PARTITION = "__HIVE_DEFAULT_PARTITION__"
COMMITS_DIR = "_kappa_commits"
STAGING_DIR = "_kappa_staging"


@dataclass(frozen=True)
class HiveSinkOptions:
    """Where and how the sink writes.

    - ``table``: ``db.table`` or ``table``; created (parquet, partitioned) if missing.
    - ``query_name``: names the commit log and the published directories; one streaming
      query per name and table (two queries may write one table under different names).
    - ``partition_column``: the partition column, ``dt`` by default.
    - ``partition_expr``: SQL expression computing it when the rows lack the column;
      default ``to_date(<event_time_column>)`` (the event date, UTC session time zone).
    - ``files_per_partition``: files each batch writes per partition; 1 makes a batch's
      rows of one date appear atomically, more spreads large batches over more tasks.
    """

    table: str
    query_name: str
    partition_column: str = "dt"
    partition_expr: str | None = None
    event_time_column: str | None = None
    create_table: bool = True
    files_per_partition: int = 1

    def __post_init__(self) -> None:
        if not _TABLE.match(self.table):
            raise ConfigError("table", self.table, "expected a Hive table name like 'db.table'")
        if not _QUERY.match(self.query_name):
            raise ConfigError(
                "query_name", self.query_name, "expected letters, digits, '_', '-' or '.'"
            )
        if not _IDENT.match(self.partition_column):
            raise ConfigError("partition_column", self.partition_column, "not an identifier")
        if (
            isinstance(self.files_per_partition, bool)
            or not isinstance(self.files_per_partition, int)
            or self.files_per_partition < 1
        ):
            raise ConfigError(
                "files_per_partition", self.files_per_partition, "expected an integer >= 1"
            )
        if self.event_time_column is not None and not self.event_time_column:
            raise ConfigError("event_time_column", self.event_time_column, "empty")

    @classmethod
    def from_config(
        cls, output: HiveOutput, *, query_name: str, event_time_column: str | None = None
    ) -> HiveSinkOptions:
        """Options for a resolved ``[outputs.<name>.hive]`` binding of a job config."""
        return cls(
            table=output.table,
            query_name=query_name,
            partition_column=output.partition_column,
            partition_expr=output.partition_expr,
            event_time_column=event_time_column,
        )

    def partition_expression(self) -> str | None:
        if self.partition_expr:
            return self.partition_expr
        if self.event_time_column:
            return f"to_date(`{self.event_time_column}`)"
        return None


def _quote(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _table_sql(table: str) -> str:
    return ".".join(_quote(part) for part in table.split("."))


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


class _Fs:
    """The few Hadoop FileSystem calls the protocol needs (works on HDFS and local)."""

    def __init__(self, spark: SparkSession, root: str) -> None:
        context: Any = spark.sparkContext
        self._jvm: Any = context._jvm
        conf = context._jsc.hadoopConfiguration()
        self._path_cls = self._jvm.org.apache.hadoop.fs.Path
        self.fs = self._path_cls(root).getFileSystem(conf)

    def path(self, location: str) -> Any:
        return self._path_cls(location)

    def exists(self, location: str) -> bool:
        return bool(self.fs.exists(self.path(location)))

    def mkdirs(self, location: str) -> None:
        self.fs.mkdirs(self.path(location))

    def delete(self, location: str) -> None:
        self.fs.delete(self.path(location), True)

    def rename(self, src: str, dst: str) -> None:
        if not self.fs.rename(self.path(src), self.path(dst)):
            raise TableError(f"cannot rename {src} to {dst}")

    def list_dirs(self, location: str) -> list[str]:
        if not self.exists(location):
            return []
        return sorted(
            status.getPath().getName()
            for status in self.fs.listStatus(self.path(location))
            if status.isDirectory()
        )

    def list_files(self, location: str) -> list[str]:
        return sorted(
            status.getPath().getName()
            for status in self.fs.listStatus(self.path(location))
            if status.isFile()
        )

    def write_atomically(self, location: str, text: str) -> None:
        parent, name = location.rsplit("/", 1)
        tmp = f"{parent}/.{name}.{time.time_ns()}.tmp"
        out = self.fs.create(self.path(tmp), True)
        try:
            out.write(bytearray(text.encode("utf-8")))
        finally:
            out.close()
        if self.exists(location):  # a previous attempt got there first; same content
            self.delete(tmp)
            return
        self.rename(tmp, location)

    def read_text(self, location: str) -> str:
        stream = self.fs.open(self.path(location))
        try:
            return str(self._jvm.org.apache.commons.io.IOUtils.toString(stream, "UTF-8"))
        finally:
            stream.close()


class HiveTableSink:
    """``foreachBatch`` writer giving exactly-once appends to a partitioned Hive table.

    Call it as ``sink(batch_df, batch_id)``; see the module docstring for the protocol.
    ``fault_hook`` is for tests: it is called after each protocol step.
    """

    def __init__(self, options: HiveSinkOptions, *, fault_hook: FaultHook | None = None) -> None:
        self.options = options
        self.fault_hook = fault_hook

    # -- public -------------------------------------------------------------------------

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.write_batch(batch_df, batch_id)

    def write_batch(self, batch_df: DataFrame, batch_id: int) -> bool:
        """Commit ``batch_df`` as batch ``batch_id``; False if it was already committed."""
        spark = batch_df.sparkSession
        opts = self.options
        df = self._with_partition_column(batch_df)
        location = self._ensure_table(spark, df)
        fs = _Fs(spark, location)
        marker = self._marker(location, batch_id)
        staging = f"{location}/{STAGING_DIR}/{opts.query_name}/{batch_id}"
        if fs.exists(marker):
            if fs.exists(staging):
                fs.delete(staging)
            log.info(
                "%s: batch %d of %s already committed, skipped",
                opts.table,
                batch_id,
                opts.query_name,
            )
            return False
        manifest_path = f"{staging}/_MANIFEST.json"
        if not fs.exists(manifest_path):
            self._stage(fs, df, staging, manifest_path, batch_id)
        manifest = json.loads(fs.read_text(manifest_path))
        partitions: list[str] = manifest["partitions"]
        files: list[dict[str, str]] = manifest["files"]
        self._step("staged", batch_id)
        self._register(spark, fs, location, partitions)
        self._step("registered", batch_id)
        for partition in partitions:
            for entry in (f for f in files if f["partition"] == partition):
                src = f"{staging}/data/{partition}/{entry['staged']}"
                dst = f"{location}/{partition}/{entry['published']}"
                if fs.exists(dst):
                    log.info("%s: %s already published", opts.table, dst)
                elif fs.exists(src):
                    fs.rename(src, dst)
                else:
                    raise ReplayError(
                        f"table {opts.table}: batch {batch_id} of query {opts.query_name!r} "
                        f"lists {entry['staged']} in {manifest_path} but it is neither staged "
                        f"at {src} nor published at {dst}"
                    )
            self._step(f"published:{partition}", batch_id)
        record = {
            "query": opts.query_name,
            "batch_id": batch_id,
            "partitions": partitions,
            "committed_at": time.time(),
        }
        fs.write_atomically(marker, json.dumps(record))
        self._step("committed", batch_id)
        fs.delete(staging)
        spark.catalog.refreshTable(opts.table)
        return True

    def committed_batches(self, spark: SparkSession) -> list[int]:
        """Ids of this query's batches committed to the table, ascending."""
        if not spark.catalog.tableExists(self.options.table):
            return []
        location = table_location(spark, self.options.table)
        fs = _Fs(spark, location)
        base = f"{location}/{COMMITS_DIR}/{self.options.query_name}"
        if not fs.exists(base):
            return []
        names = [status.getPath().getName() for status in fs.fs.listStatus(fs.path(base))]
        return sorted(int(name) for name in names if name.isdigit())

    # -- protocol steps -----------------------------------------------------------------

    def _step(self, name: str, batch_id: int) -> None:
        if self.fault_hook is not None:
            self.fault_hook(name, batch_id)

    def _marker(self, location: str, batch_id: int) -> str:
        return f"{location}/{COMMITS_DIR}/{self.options.query_name}/{batch_id}"

    def published_name(self, batch_id: int, index: int, staged: str) -> str:
        """The published file name of the ``index``-th staged file of a batch."""
        suffix = ".snappy.parquet" if staged.endswith(".snappy.parquet") else ".parquet"
        return f"kappa-{self.options.query_name}-{batch_id:020d}-{index:05d}{suffix}"

    def _with_partition_column(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        opts = self.options
        if opts.partition_column in df.columns:
            return df
        expr = opts.partition_expression()
        if expr is None:
            raise ConfigError(
                "partition_column",
                opts.partition_column,
                f"the rows written to {opts.table} have no such column and neither "
                f"'partition_expr' nor 'event_time_column' says how to compute it "
                f"(columns: {', '.join(df.columns)})",
            )
        return df.withColumn(opts.partition_column, F.expr(expr))

    def _ensure_table(self, spark: SparkSession, df: DataFrame) -> str:
        opts = self.options
        if not spark.catalog.tableExists(opts.table):
            if not opts.create_table:
                raise TableError(f"table {opts.table} does not exist (create_table is off)")
            columns = [f for f in df.schema.fields if f.name != opts.partition_column]
            part = df.schema[opts.partition_column]
            ddl = ", ".join(
                f"{_quote(f.name)} {f.dataType.simpleString()}" for f in [*columns, part]
            )
            if "." in opts.table:
                spark.sql(f"CREATE DATABASE IF NOT EXISTS {_quote(opts.table.split('.')[0])}")
            try:
                spark.sql(
                    f"CREATE TABLE IF NOT EXISTS {_table_sql(opts.table)} ({ddl}) USING parquet "
                    f"PARTITIONED BY ({_quote(opts.partition_column)})"
                )
            except Exception as exc:  # another writer may have created it meanwhile
                if not spark.catalog.tableExists(opts.table):
                    raise TableError(f"cannot create table {opts.table}: {exc}") from exc
            log.info("created table %s partitioned by %s", opts.table, opts.partition_column)
        self._check_schema(spark, df)
        return table_location(spark, opts.table)

    def _check_schema(self, spark: SparkSession, df: DataFrame) -> None:
        opts = self.options
        table_schema = spark.table(opts.table).schema
        expected = {f.name.lower(): f.dataType for f in table_schema.fields}
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
        parts = _partition_columns(spark, opts.table)
        if [p.lower() for p in parts] != [opts.partition_column.lower()]:
            raise TableError(
                f"table {opts.table} is partitioned by {parts}, the sink writes "
                f"{opts.partition_column!r}"
            )

    def _stage(
        self, fs: _Fs, df: DataFrame, staging: str, manifest_path: str, batch_id: int
    ) -> None:
        from pyspark.sql import functions as F

        opts = self.options
        if fs.exists(staging):
            fs.delete(staging)  # a crash before the manifest: nothing was published
        data = f"{staging}/data"
        # Each partition value goes to files_per_partition tasks, hence that many files.
        column = F.col(opts.partition_column)
        if opts.files_per_partition == 1:
            shaped = df.repartition(column)
        else:
            salt = F.pmod(F.hash(*[F.col(c) for c in df.columns]), F.lit(opts.files_per_partition))
            shaped = df.repartition(column, salt)
        # Spark writes with its own task commit protocol; everything here is hidden.
        (
            shaped.write.mode("overwrite")
            .option("maxRecordsPerFile", 0)
            .partitionBy(opts.partition_column)
            .parquet(data)
        )
        partitions = [p for p in fs.list_dirs(data) if p.startswith(f"{opts.partition_column}=")]
        if f"{opts.partition_column}={DEFAULT_PARTITION}" in partitions:
            raise DataError(
                f"table {opts.table}: some rows have a NULL {opts.partition_column!r} "
                f"(from {opts.partition_expression() or opts.partition_column}); "
                "null event times must go to the dead letter queue before the sink"
            )
        files: list[dict[str, str]] = []
        for partition in partitions:
            for staged in fs.list_files(f"{data}/{partition}"):
                if staged.startswith(("_", ".")):
                    continue
                published = self.published_name(batch_id, len(files), staged)
                files.append({"partition": partition, "staged": staged, "published": published})
        self._step("written", batch_id)
        fs.write_atomically(manifest_path, json.dumps({"partitions": partitions, "files": files}))

    def _register(self, spark: SparkSession, fs: _Fs, location: str, partitions: list[str]) -> None:
        if not partitions:
            return
        specs = []
        for partition in partitions:
            fs.mkdirs(f"{location}/{partition}")
            column, _, raw = partition.partition("=")
            value = unquote(raw)
            specs.append(
                f"PARTITION ({_quote(column)} = {_sql_string(value)}) "
                f"LOCATION {_sql_string(location + '/' + partition)}"
            )
        spark.sql(
            f"ALTER TABLE {_table_sql(self.options.table)} ADD IF NOT EXISTS " + " ".join(specs)
        )


def table_location(spark: SparkSession, table: str) -> str:
    """The storage location (URI) of ``table``."""
    rows = spark.sql(f"DESCRIBE TABLE EXTENDED {_table_sql(table)}").collect()
    for row in rows:
        if row[0] == "Location":
            return str(row[1]).rstrip("/")
    raise TableError(f"table {table} has no location")


def _partition_columns(spark: SparkSession, table: str) -> list[str]:
    catalog_columns = spark.catalog.listColumns(table)
    return [c.name for c in catalog_columns if c.isPartition]


def write_stream(
    df: DataFrame,
    options: HiveSinkOptions,
    *,
    checkpoint_location: str,
    trigger: dict[str, Any] | None = None,
    output_mode: str = "append",
    fault_hook: FaultHook | None = None,
) -> StreamingQuery:
    """Start a streaming query writing ``df`` to ``options.table`` exactly once.

    ``trigger`` is passed to ``DataStreamWriter.trigger`` (e.g. ``{"availableNow": True}``).
    """
    sink = HiveTableSink(options, fault_hook=fault_hook)
    writer = (
        df.writeStream.queryName(options.query_name)
        .outputMode(output_mode)
        .option("checkpointLocation", checkpoint_location)
        .foreachBatch(sink)
    )
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()
