"""Exactly-once Hive table sink for streaming queries (a ``foreachBatch`` writer).

A Hive table has no transactions, so the sink builds exactly-once from what it has: an atomic
file rename, one ``ALTER TABLE ... ADD PARTITION`` as one metastore transaction, readers that
see only listed partitions, Spark ignoring ``_``-prefixed paths. Batch ``b`` of query ``q`` is
staged under ``_kappa_staging/q/b`` with a manifest (names derived from ``(q, b, n)``, so a
replay lands on the same names), published, then marked committed by ``_kappa_commits/q/b``
(the run's provenance and the rows' event-time span: ``kappaplus.runtime.state.target_claims``
refuses a second writer). Every step is idempotent; a crash at any step rolls forward on
replay. The protocol, the layout and what readers see at each step: ``docs/hive-sink.md``.

>>> sink = HiveTableSink(HiveSinkOptions(table="agg.ride_counts", query_name="ride_counts",
...                                      event_time_column="start"))       # doctest: +SKIP
>>> df.writeStream.foreachBatch(sink).option("checkpointLocation", ckpt).start()  # doctest: +SKIP
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from kappaplus.connectors.hive.commits import table_location
from kappaplus.connectors.hive.sink_options import (
    ADD_PARTITION_BATCH,
    MANIFEST_VERSION,
    SLOTS_DIR,
    STAGING_DIR,
    HiveSinkOptions,
    partition_key,
    partition_segments,
    quote_identifier,
    sql_string,
    table_sql,
)
from kappaplus.connectors.hive.sink_slots import (
    SlotGuess,
    guess_slot,
    guessed,
    largest_registered_slot,
    registered_keys,
    slot_hint,
)
from kappaplus.connectors.hive.sink_span import (
    event_time_span,
    observe_event_time,
    observed_span,
    recorded_span,
    widen,
)
from kappaplus.connectors.hive.sink_table import create_or_check
from kappaplus.connectors.hive.staged_files import StagedFile
from kappaplus.core.errors import ConfigError, DataError, ReplayError, TableError
from kappaplus.core.table import BATCH_COLUMN, HIVE_DEFAULT_PARTITION
from kappaplus.core.table.commit_log import COMMITS_DIR, commit_marker, published_name
from kappaplus.core.table.hadoop_fs import HadoopFs

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

log = logging.getLogger(__name__)


FaultHook = Callable[[str, int], None]
"""Called with each protocol step name (``written``, ``staged``, ``registered``,
``published:<partition>``, ``published`` (batch mode), ``committed``) and the batch id
after the step completes; tests raise from it to simulate a crash at that point."""


class HiveTableSink:
    """``foreachBatch`` writer giving exactly-once appends to a partitioned Hive table.

    Call it as ``sink(batch_df, batch_id)``; see the module docstring for the protocol.
    ``fault_hook`` is for tests: it is called after each protocol step.
    """

    _began = 0.0
    _checked: tuple[str, str] | None = None
    _span_before: tuple[int, list[int] | None] | None = None
    """(batch id, the query's span up to and including it), so the next batch reads no marker."""

    def __init__(self, options: HiveSinkOptions, *, fault_hook: FaultHook | None = None) -> None:
        self.options = options
        self.fault_hook = fault_hook
        self._table_lock = threading.Lock()
        self._helper: ThreadPoolExecutor | None = None

    # -- public -------------------------------------------------------------------------

    def prepare(self, df: DataFrame) -> None:
        """Create the table for the rows of ``df`` (the query's streaming DataFrame) or check
        it, as the first batch would. ``kappa run`` calls it right after starting the query,
        so the catalog work of a new table runs beside the query's first
        planning and reading instead of inside its first batch; the first batch then only
        asks whether the table exists. Errors are the first batch's to raise."""
        self._ensure_table(df.sparkSession, self._with_partition_columns(df))

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        self.write_batch(batch_df, batch_id)

    def write_batch(
        self,
        batch_df: DataFrame,
        batch_id: int,
        before_commit: Callable[[bool], None] | None = None,
    ) -> bool:
        """Commit ``batch_df`` as batch ``batch_id``; False if it was already committed.

        ``before_commit(ran)``, when given, is called once the rows are staged and before
        any is published (also for a batch committed before, then before returning False);
        ``ran`` says whether ``batch_df`` was computed by this call (its staging write),
        so that the caller can compute it otherwise when it was not (an earlier attempt
        staged it)."""
        self._began = time.monotonic()
        spark = batch_df.sparkSession
        opts = self.options
        df = self._with_partition_columns(batch_df)
        location = self._ensure_table(spark, df)
        self._timing("table", batch_id)
        fs = HadoopFs(spark, location)
        marker = self._marker(location, batch_id)
        staging = f"{location}/{STAGING_DIR}/{opts.query_name}/{batch_id}"
        if fs.exists(marker):
            if fs.exists(staging):
                fs.delete(staging)
                self._remove_empty_staging(fs, location)
            log.info(
                "%s: batch %d of %s already committed, skipped",
                opts.table,
                batch_id,
                opts.query_name,
            )
            if before_commit is not None:
                before_commit(False)
            return False
        manifest_path = f"{staging}/_MANIFEST.json"
        observation = None
        if not fs.exists(manifest_path):
            observation = self._stage(spark, fs, df, location, staging, manifest_path, batch_id)
        if before_commit is not None:
            before_commit(observation is not None)
        manifest = json.loads(fs.read_text(manifest_path))
        visibility = manifest.get("visibility", "partition")
        if visibility != opts.visibility:
            raise ReplayError(
                f"table {opts.table}: batch {batch_id} of query {opts.query_name!r} was staged "
                f"with visibility {visibility!r} ({manifest_path}), the sink now writes "
                f"{opts.visibility!r}; replay it with the visibility it was staged with"
            )
        partitions: list[str] = manifest["partitions"]
        files = [StagedFile.parse(entry) for entry in manifest["files"]]
        self._step("staged", batch_id)
        self._publish_all(spark, fs, location, staging, partitions, files, batch_id)
        # read only now: Spark reports the observation through its listener bus, which has
        # delivered it by the time the batch is published (asked right after the write, it
        # would wait for it: bench/bench_sink_span.py); a replay of a staged batch asks
        # the rows themselves
        event_time = (
            observed_span(observation)
            if observation is not None
            else event_time_span(df, opts.event_time_column)
        )
        record = self._marker_record(fs, location, batch_id, manifest, event_time)
        fs.write_atomically(marker, json.dumps(record))
        self._step("committed", batch_id)
        fs.delete(staging)
        self._remove_empty_staging(fs, location)
        spark.catalog.refreshTable(opts.table)
        self._timing("refreshed", batch_id)
        return True

    def _marker_record(
        self,
        fs: HadoopFs,
        location: str,
        batch_id: int,
        manifest: dict[str, Any],
        event_time: list[int] | None,
    ) -> dict[str, Any]:
        """The commit marker's record of batch ``batch_id``: its slot, partitions, commit
        time, its rows' event-time span and the query's (:meth:`_query_span`)."""
        opts = self.options
        record = {
            "query": opts.query_name,
            "batch_id": batch_id,
            "kappa_batch": manifest.get("slot"),
            "visibility": opts.visibility,
            "partitions": manifest["partitions"],
            "committed_at": time.time(),
            "event_time": event_time,
            "span": self._query_span(fs, location, batch_id, event_time),
        }
        if opts.hold:
            record["held"] = True
        if opts.provenance is not None:
            record["provenance"] = opts.provenance
        return record

    def _publish_all(
        self,
        spark: SparkSession,
        fs: HadoopFs,
        location: str,
        staging: str,
        partitions: list[str],
        files: list[StagedFile],
        batch_id: int,
    ) -> None:
        """Move the staged files into place and register their partitions: with ``batch``
        visibility files first, into directories the metastore does not list, then every
        partition at once (a reader sees the whole batch or none of it)."""
        manifest_path = f"{staging}/_MANIFEST.json"
        for partition in partitions:
            fs.mkdirs(f"{location}/{partition}")
            if self.options.visibility == "batch":
                self._publish(fs, location, staging, manifest_path, partition, files, batch_id)
        if self.options.visibility == "batch":
            self._step("published", batch_id)
            if not self.options.hold:
                self._register(spark, location, partitions)
            self._step("registered", batch_id)
            return
        self._register(spark, location, partitions)
        self._step("registered", batch_id)
        for partition in partitions:
            self._publish(fs, location, staging, manifest_path, partition, files, batch_id)

    def _query_span(
        self, fs: HadoopFs, location: str, batch_id: int, batch_span: list[int] | None
    ) -> list[int] | None:
        """``[min, max]`` event time (epoch microseconds, the output's event-time column)
        of every row this query committed up to and including ``batch_id``: the span the
        previous commit marker records, widened by this batch's (:func:`event_time_span`).

        Recorded in every marker so a later run learns what event times the query's rows
        cover from its last marker alone (a stream has no configured range)."""
        if self._span_before is None or self._span_before[0] != batch_id - 1:
            commits = f"{location}/{COMMITS_DIR}/{self.options.query_name}"
            self._span_before = (batch_id - 1, recorded_span(fs, commits, batch_id))
        span = widen(self._span_before[1], batch_span)
        self._span_before = (batch_id, span)
        return span

    def _remove_empty_staging(self, fs: HadoopFs, location: str) -> None:
        """Remove ``_kappa_staging/<query>`` once it holds no batch (one query per name
        writes there, so nothing else can be staging into it now)."""
        query_dir = f"{location}/{STAGING_DIR}/{self.options.query_name}"
        if fs.exists(query_dir) and not list(fs.fs.listStatus(fs.path(query_dir))):
            fs.delete(query_dir)

    def committed_batches(self, spark: SparkSession) -> list[int]:
        """Ids of this query's batches committed to the table, ascending."""
        if not spark.catalog.tableExists(self.options.table):
            return []
        location = table_location(spark, self.options.table)
        fs = HadoopFs(spark, location)
        base = f"{location}/{COMMITS_DIR}/{self.options.query_name}"
        if not fs.exists(base):
            return []
        names = [status.getPath().getName() for status in fs.fs.listStatus(fs.path(base))]
        return sorted(int(name) for name in names if name.isdigit())

    # -- protocol steps -----------------------------------------------------------------

    def _timing(self, name: str, batch_id: int) -> None:
        log.debug(
            "%s batch %d: %s at %.2f s",
            self.options.table,
            batch_id,
            name,
            time.monotonic() - self._began,
        )

    def _step(self, name: str, batch_id: int) -> None:
        self._timing(name, batch_id)
        if self.fault_hook is not None:
            self.fault_hook(name, batch_id)

    def _marker(self, location: str, batch_id: int) -> str:
        return commit_marker(location, self.options.query_name, batch_id)

    def published_name(self, batch_id: int, index: int, staged: str) -> str:
        """The published file name of the ``index``-th staged file of a batch."""
        suffix = ".snappy.parquet" if staged.endswith(".snappy.parquet") else ".parquet"
        return published_name(self.options.query_name, batch_id, index, suffix)

    def _with_partition_columns(self, df: DataFrame) -> DataFrame:
        from pyspark.sql import functions as F

        opts = self.options
        if opts.visibility == "batch" and BATCH_COLUMN in {c.lower() for c in df.columns}:
            raise TableError(
                f"table {opts.table}: the rows have a column {BATCH_COLUMN!r}, which visibility "
                "'batch' reserves for the batch id partition column; rename it, or write with "
                "visibility 'partition'"
            )
        if opts.partition_column not in df.columns:
            expr = opts.partition_expression()
            if expr is None:
                raise ConfigError(
                    "partition_column",
                    opts.partition_column,
                    f"the rows written to {opts.table} have no such column and neither "
                    f"'partition_expr' nor 'event_time_column' says how to compute it "
                    f"(columns: {', '.join(df.columns)})",
                )
            df = df.withColumn(opts.partition_column, F.expr(expr))
        for name, expr in opts.extra_partitions:
            if name not in df.columns:
                df = df.withColumn(name, F.expr(expr))
        return df

    def _ensure_table(self, spark: SparkSession, df: DataFrame) -> str:
        """Create the table if missing and check the rows fit it; its location.

        Four catalog round trips; after the first batch only the table's existence is asked
        again: every batch of a query has the same schema, and a table changed under a
        running query fails its next partition registration anyway.
        """
        checked = df.schema.json()
        with self._table_lock:  # prepare() may still be at it when the first batch comes
            # one catalog call every batch all the same: when the metastore is away it fails
            # after the client's retries with a clear error, where the sink's later calls
            # were seen to block until the server is back (chaos metastore-outage)
            if (
                self._checked is not None
                and self._checked[0] == checked
                and spark.catalog.tableExists(self.options.table)
            ):
                return self._checked[1]
            location = create_or_check(spark, self.options, df)
            self._checked = (checked, location)
            return location

    def _stage(
        self,
        spark: SparkSession,
        fs: HadoopFs,
        df: DataFrame,
        location: str,
        staging: str,
        manifest_path: str,
        batch_id: int,
    ) -> Any:
        """Stage the batch and write its manifest; the observation of its event-time span
        (:func:`observe_event_time`)."""

        opts = self.options
        slot_file = f"{staging}/_SLOT"
        reserved = int(fs.read_text(slot_file)) if fs.exists(slot_file) else None
        if fs.exists(staging):
            fs.delete(staging)  # a crash before the manifest: nothing was published
        data = f"{staging}/data"
        # the metastore's answers about the batch's number (catalog calls) come while Spark
        # writes the rows instead of after
        guess = None
        if opts.visibility == "batch" and reserved is None:
            if self._helper is None:
                self._helper = ThreadPoolExecutor(1, thread_name_prefix="kappa-hive-sink")
            guess = self._helper.submit(guess_slot, spark, fs, location, opts.table)
        observation = self._write_staged(df, data)
        staged_dirs = self._staged_partitions(fs, data)
        known = guessed(guess)
        slot = None
        if opts.visibility == "batch" and staged_dirs:
            # a replay after a crash before the manifest keeps the number it reserved
            if reserved is not None:
                slot = reserved
            else:
                largest = known.largest if known is not None else None
                slot = self._reserve_slot(spark, fs, location, largest)
            fs.write_atomically(slot_file, str(slot))
        suffix = f"/{BATCH_COLUMN}={slot}" if slot is not None else ""
        files, partitions = self._staged_files(fs, data, staged_dirs, suffix, batch_id)
        shared = self._shared_partitions(spark, slot, known, partitions, batch_id)
        self._step("written", batch_id)
        manifest = {
            "version": MANIFEST_VERSION,
            "visibility": opts.visibility,
            "slot": slot,
            "partitions": partitions,
            "shared": shared,
            "files": files,
        }
        fs.write_atomically(manifest_path, json.dumps(manifest))
        return observation

    def _write_staged(self, df: DataFrame, data: str) -> Any:
        """Write the batch's rows under ``data``, partitioned by time, each partition value
        to ``files_per_partition`` tasks (hence files); the observation of their event-time
        span."""
        from pyspark.sql import functions as F

        opts = self.options
        time_columns = opts.time_partition_columns
        keys = [F.col(c) for c in time_columns]
        if opts.files_per_partition == 1:
            shaped = df.repartition(*keys)
        else:
            salt = F.pmod(F.hash(*[F.col(c) for c in df.columns]), F.lit(opts.files_per_partition))
            shaped = df.repartition(*keys, salt)
        shaped, observation = observe_event_time(shaped, opts.event_time_column)
        # Spark writes with its own task commit protocol; everything here is hidden.
        (
            shaped.write.mode("overwrite")
            .option("maxRecordsPerFile", 0)
            .partitionBy(*time_columns)
            .parquet(data)
        )
        return observation

    def _staged_files(
        self, fs: HadoopFs, data: str, staged_dirs: list[str], suffix: str, batch_id: int
    ) -> tuple[list[dict[str, str]], list[str]]:
        """The manifest's files (each staged file and the name it is published under) and
        partitions."""
        files: list[dict[str, str]] = []
        partitions: list[str] = []
        for staged_dir in staged_dirs:
            partition = staged_dir + suffix
            partitions.append(partition)
            for staged in fs.list_files(f"{data}/{staged_dir}"):
                if staged.startswith(("_", ".")):
                    continue
                published = self.published_name(batch_id, len(files), staged)
                files.append(
                    {
                        "partition": partition,
                        "staged_dir": staged_dir,
                        "staged": staged,
                        "published": published,
                    }
                )
        return files, partitions

    def _shared_partitions(
        self,
        spark: SparkSession,
        slot: int | None,
        known: SlotGuess | None,
        partitions: list[str],
        batch_id: int,
    ) -> list[str]:
        """The batch's partitions something else already registered with its ``slot``
        (a writer that does not reserve slots, or by hand): the slot is new to the sink."""
        if slot is None:
            return []
        if known is not None and known.slot == slot:
            existing = known.registered
        else:
            existing = registered_keys(spark, self.options.table, slot)
        shared = [p for p in partitions if partition_key(p) in existing]
        if shared:
            opts = self.options
            log.warning(
                "table %s: batch %d of query %s writes partitions something else already "
                "registered (%s); its rows there become visible file by file",
                opts.table,
                batch_id,
                opts.query_name,
                ", ".join(shared),
            )
        return shared

    def _staged_partitions(self, fs: HadoopFs, data: str) -> list[str]:
        """The leaf partition directories Spark wrote under ``data``, e.g. ``dt=.../hr=...``;
        :class:`DataError` if any partition value is NULL."""
        opts = self.options
        found = [""]
        for column in opts.time_partition_columns:
            deeper = []
            for parent in found:
                base = f"{data}/{parent}" if parent else data
                for name in fs.list_dirs(base):
                    if not name.startswith(f"{column}="):
                        continue
                    if name == f"{column}={HIVE_DEFAULT_PARTITION}":
                        source = (
                            opts.partition_expression()
                            if column == opts.partition_column
                            else dict(opts.extra_partitions).get(column)
                        )
                        raise DataError(
                            f"table {opts.table}: some rows have a NULL partition column "
                            f"{column!r} (from {source or column}); null event times must go "
                            "to the dead letter queue before the sink"
                        )
                    deeper.append(f"{parent}/{name}" if parent else name)
            found = deeper
        return sorted(found)

    def _reserve_slot(
        self, spark: SparkSession, fs: HadoopFs, location: str, largest: int | None = None
    ) -> int:
        """A ``kappa_batch`` value no batch of any query has taken in this table.

        Values are the table's batch sequence: the next after the last one reserved (the
        hint ``_next``; without it, after the largest registered: ``largest`` if the
        caller asked already), taken by creating ``<location>/_kappa_batch_slots/<value>``,
        which fails if another writer has it. So two queries writing one table, one after
        the other (a bootstrap then the stream, a ``--fresh`` start) or at the same time,
        never share a partition.
        """
        base = f"{location}/{SLOTS_DIR}"
        slot = slot_hint(fs, location)
        if slot is None:
            fs.mkdirs(base)
            slot = (
                largest_registered_slot(spark, self.options.table) if largest is None else largest
            ) + 1
        while not fs.create_new(f"{base}/{slot}"):
            slot += 1
        fs.write_text(f"{base}/_next", str(slot + 1))
        return slot

    def _publish(
        self,
        fs: HadoopFs,
        location: str,
        staging: str,
        manifest_path: str,
        partition: str,
        files: list[StagedFile],
        batch_id: int,
    ) -> None:
        """Rename the staged files of one partition to their published names (roll forward)."""
        opts = self.options
        for entry in (f for f in files if f.partition == partition):
            src = f"{staging}/data/{entry.staged_dir}/{entry.staged}"
            dst = f"{location}/{partition}/{entry.published}"
            if fs.exists(dst):
                log.info("%s: %s already published", opts.table, dst)
            elif fs.exists(src):
                fs.rename(src, dst)
            else:
                raise ReplayError(
                    f"table {opts.table}: batch {batch_id} of query {opts.query_name!r} "
                    f"lists {entry.staged} in {manifest_path} but it is neither staged "
                    f"at {src} nor published at {dst}"
                )
        self._step(f"published:{partition}", batch_id)

    def _register(self, spark: SparkSession, location: str, partitions: list[str]) -> None:
        """Add ``partitions`` (those not yet there) in ONE statement: one metastore call."""
        if not partitions:
            return
        specs = []
        for partition in partitions:
            values = ", ".join(
                f"{quote_identifier(column)} = {sql_string(value)}"
                for column, value in partition_segments(partition)
            )
            specs.append(f"PARTITION ({values}) LOCATION {sql_string(location + '/' + partition)}")
        statement = f"ALTER TABLE {table_sql(self.options.table)} ADD IF NOT EXISTS " + " ".join(
            specs
        )
        # Spark splits the partitions of one ADD into metastore calls of this many; one
        # call is one transaction, so the batch's partitions must fit into one.
        batch_size = int(spark.conf.get(ADD_PARTITION_BATCH, "100") or "100")
        if len(specs) <= batch_size:
            spark.sql(statement)
            return
        spark.conf.set(ADD_PARTITION_BATCH, str(len(specs)))
        try:
            spark.sql(statement)
        finally:
            spark.conf.set(ADD_PARTITION_BATCH, str(batch_size))


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
