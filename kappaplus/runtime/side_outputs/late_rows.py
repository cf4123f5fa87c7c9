"""Late rows kept, not only counted: a stream run's rows the watermark drops, in a Hive table
or a Kafka topic.

Spark counts the rows its stateful operators drop as late (``numRowsDroppedByWatermark``,
after partial aggregation: groups, not rows) and throws them away. For an output with a
``late_by`` rule (:mod:`kappaplus.core.late_rules`) and a ``[outputs.<name>.late]`` target:

1. **Tap** (executors): every input of the job passes through :class:`LateRowTap`, a
   pass-through ``mapInArrow`` placed before the watermark. Inside a micro-batch it knows
   its query and batch (Spark's task-local properties ``sql.streaming.queryId`` and
   ``streaming.sql.batchId``), reads the watermark late rows are judged by (the previous
   batch's, from the query's ``offsets/<N-1>``) and stages the rows the rule finds late in
   ``<run checkpoint>/_late/<output>/batch=<N>/<input>-<partition>.parquet``: one file per
   input partition, rewritten whole by a retried or replayed task, so staging is idempotent.
2. **Publish** (driver): once the output's batch is written, the staged rows of that batch
   go, with ``kappa_input`` and ``kappa_missed_watermark``, to

   - a ``table``: through the exactly-once Hive sink (keyed by batch id, so a replayed
     batch publishes nothing twice);
   - a ``topic``: through the Kafka sink (``kappa_kafka``: idempotent producer, every record
     acknowledged or the batch fails), one JSON record per row keyed
     ``<query>/<batch>/<input>-<partition>/<row>`` (the staged file and the row's index in
     it). At least once, like the Kafka dead letters: a batch replayed after a crash
     between this write and Spark's commit reads the same offsets into the same input
     partitions in the same order, stages the same rows and produces them again under the
     same keys, so a consumer that keeps the first record per key (or a compacted topic)
     sees each late row once;

   the staging of that batch and older ones is then removed.

The tap rides on the micro-batch the query already runs (no second read of the input); its
cost is one Arrow round trip of the input rows through a Python worker, only for jobs that
keep late rows. Staging lives in the run's checkpoint directory, which executors must see
(local mode, or a shared mount on a cluster).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from kappaplus.core.late_rules import LateRule

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from kappaplus.config import LateRowsTarget

log = logging.getLogger(__name__)

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
INPUT_COLUMN = "kappa_input"
WATERMARK_COLUMN = "kappa_missed_watermark"
TIMESTAMP_FORMAT = "yyyy-MM-dd'T'HH:mm:ss.SSSSSSXXX"
"""Timestamps in a late row's JSON: ISO 8601 to the microsecond (Spark's default keeps
milliseconds), so an event time read back is the one the row had."""


@dataclass(frozen=True)
class LateRowsPlan:
    """One output's late rows: its rule, its query checkpoint, where rows are staged, and
    the table or topic they go to (``kafka_options`` hold secrets: never logged)."""

    output: str
    rule: LateRule
    checkpoint: str
    staging: str
    table: str | None
    event_time_column: str
    topic: str | None = None
    bootstrap_servers: str | None = None
    kafka_options: Mapping[str, str] = field(default_factory=dict, repr=False)

    @property
    def target(self) -> str:
        """``hive <table>`` or ``kafka <topic>``."""
        return f"hive {self.table}" if self.table is not None else f"kafka {self.topic}"

    @property
    def dataset(self) -> str:
        """The table or topic name (the audit's ``dataset`` of stage ``late_kept``)."""
        return str(self.table if self.table is not None else self.topic)

    def batch_dir(self, batch_id: int) -> Path:
        return Path(self.staging) / f"batch={batch_id}"


def late_rows_plans(
    job: Any, params: Any, targets: dict[str, LateRowsTarget | None], mode_dir: Path
) -> list[LateRowsPlan]:
    """The plans of the outputs that keep late rows (``targets``: per output, from the
    resolved config); a target without the output's ``late_by`` is a config error."""
    from kappaplus.core.errors import ConfigError

    plans: list[LateRowsPlan] = []
    first = job.inputs[0]
    for spec in job.outputs:
        target = targets.get(spec.name)
        if target is None:
            continue
        if spec.late_by is None:
            raise ConfigError(
                f"outputs.{spec.name}.late",
                target.target,
                f"job {job.name!r} declares no late_by on output {spec.name!r}: the rule by "
                "which its watermark drops rows (e.g. OutputSpec(late_by='window:window'))",
            )
        for other in job.inputs[1:]:
            if (other.job_struct_type(), other.event_time_column) != (
                first.job_struct_type(),
                first.event_time_column,
            ):
                raise ConfigError(
                    f"outputs.{spec.name}.late",
                    target.target,
                    f"inputs {first.name!r} and {other.name!r} differ in columns or event-time "
                    "column: one late-rows target holds the rows of inputs of one shape",
                )
        rule = LateRule.parse(spec.late_by, params, f"job {job.name}.{spec.name}.late_by")
        plans.append(
            LateRowsPlan(
                spec.name,
                rule,
                str(mode_dir / spec.name),
                str(mode_dir / "_late" / spec.name),
                target.table,
                first.event_time_column,
                target.topic,
                target.bootstrap_servers,
                dict(target.options),
            )
        )
    return plans


def late_watermark(checkpoint: str | Path, batch_id: int) -> int:
    """The watermark (epoch microseconds) rows of ``batch_id`` are judged late by: the one
    batch ``batch_id - 1`` ran under, from its offset log entry (0: none yet)."""
    from kappaplus.runtime.state.records import offset_log_metadata

    if batch_id <= 0:
        return 0
    try:
        return int(offset_log_metadata(checkpoint, batch_id - 1).get("batchWatermarkMs", 0)) * 1000
    except (OSError, IndexError, ValueError):
        return 0


def query_id_of(checkpoint: str) -> str | None:
    """The id of the streaming query whose checkpoint is ``checkpoint`` (None before its
    first start)."""
    try:
        return str(json.loads((Path(checkpoint) / "metadata").read_text())["id"])
    except (OSError, KeyError, ValueError):
        return None


class LateRowTap:
    """The pass-through ``mapInArrow`` function of one input (see the module docstring)."""

    def __init__(self, input_name: str, event_time_column: str, plans: list[LateRowsPlan]):
        self.input_name = input_name
        self.event_time_column = event_time_column
        self.plans = plans

    def _plan_of(self, query_id: str | None) -> LateRowsPlan | None:
        if query_id is None:
            return None
        for plan in self.plans:
            if query_id_of(plan.checkpoint) == query_id:
                return plan
        return None

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from pyspark import TaskContext

        context = TaskContext.get()
        plan = batch_id = None
        if context is not None:
            plan = self._plan_of(context.getLocalProperty(QUERY_ID_PROPERTY))
            raw_batch = context.getLocalProperty(BATCH_ID_PROPERTY)
            batch_id = int(raw_batch) if raw_batch not in (None, "") else None
        if plan is None or batch_id is None or context is None:
            yield from batches
            return
        watermark = late_watermark(plan.checkpoint, batch_id)
        late: list[pa.RecordBatch] = []
        for batch in batches:
            if watermark > 0 and batch.num_rows:
                found = self._late(batch, plan.rule, watermark)
                if found is not None:
                    late.append(found)
            yield batch
        if late:
            stage(plan, batch_id, self.input_name, context.partitionId(), late, watermark)

    def _late(self, batch: pa.RecordBatch, rule: LateRule, watermark: int) -> Any:
        import pyarrow as pa
        import pyarrow.compute as pc

        times = pc.cast(batch.column(self.event_time_column), pa.int64())
        mask = rule.late_mask(times.to_numpy(zero_copy_only=False), watermark)
        return batch.filter(pa.array(mask)) if mask.any() else None


def stage(
    plan: LateRowsPlan,
    batch_id: int,
    input_name: str,
    partition: int,
    late: list[pa.RecordBatch],
    watermark: int,
) -> None:
    """Write one task's late rows (atomically: a retried task replaces its file whole)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    name = f"{input_name}-{partition}"
    table = pa.Table.from_batches(late)
    table = table.append_column(INPUT_COLUMN, pa.array([input_name] * len(table), pa.string()))
    stamp = pa.array([watermark] * len(table), pa.int64()).cast(pa.timestamp("us", tz="UTC"))
    table = table.append_column(WATERMARK_COLUMN, stamp)
    directory = plan.batch_dir(batch_id)
    directory.mkdir(parents=True, exist_ok=True)
    tmp = directory / f".{name}.{os.getpid()}.tmp"
    pq.write_table(table, tmp)
    os.replace(tmp, directory / f"{name}.parquet")


def tap_input(
    df: DataFrame, input_name: str, event_time_column: str, plans: list[LateRowsPlan]
) -> DataFrame:
    """``df`` passed through the late-row tap of ``input_name`` (unchanged rows and schema)."""
    return df.mapInArrow(LateRowTap(input_name, event_time_column, plans), df.schema)


class LateRowsPublisher:
    """Driver side: publishes one output's staged late rows per batch (to a table exactly
    once, to a topic at least once with a deduplication key); a
    :class:`~kappaplus.runtime.side_outputs.SideOutput`."""

    publish_before_rows: ClassVar[bool] = False

    def __init__(
        self,
        plan: LateRowsPlan,
        query_name: str,
        on_kept: Callable[[int, dict[int, int]], None] | None = None,
    ) -> None:
        from kappaplus.config import HiveOutput
        from kappaplus.connectors.hive.sink import HiveTableSink
        from kappaplus.connectors.hive.sink_options import HiveSinkOptions

        self.plan = plan
        self.query_name = query_name
        self.sink = None
        if plan.table is not None:
            self.sink = HiveTableSink(
                HiveSinkOptions.from_config(
                    HiveOutput(table=plan.table),
                    query_name=f"{query_name}-late",
                    event_time_column=plan.event_time_column,
                )
            )
        self.published = 0
        self.on_kept = on_kept
        """Called with (batch id, rows per audit bucket index) after each publication."""

    def before(self, batch_id: int) -> None:
        """Forget what an earlier attempt of ``batch_id`` staged: this attempt stages anew."""
        shutil.rmtree(self.plan.batch_dir(batch_id), ignore_errors=True)

    def publish(self, batch: DataFrame, batch_id: int) -> int:
        """Publish the late rows staged for ``batch_id``; returns how many were staged."""
        directory = self.plan.batch_dir(batch_id)
        files = sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []
        rows = 0
        if files:
            late = batch.sparkSession.read.parquet(*files)
            counts = _bucket_counts(late, self.plan.event_time_column)
            rows = sum(counts.values())
            if self.sink is not None:
                self.sink.write_batch(late, batch_id)
            else:
                produce_late_rows(late, self.plan, f"{self.query_name}/{batch_id}")
            self.published += rows
            if self.on_kept is not None:
                self.on_kept(batch_id, counts)
            log.info(
                "output %s batch %d: %d late row(s) kept in %s",
                self.plan.output,
                batch_id,
                rows,
                self.plan.target,
            )
        for old in Path(self.plan.staging).glob("batch=*"):
            if int(old.name.split("=", 1)[1]) <= batch_id:
                shutil.rmtree(old, ignore_errors=True)
        return rows


def _bucket_counts(late: DataFrame, event_time_column: str) -> dict[int, int]:
    """Rows per audit bucket index (:data:`kappaplus.audit.counts.BUCKET_SECONDS`)."""
    from pyspark.sql import functions as F

    from kappaplus.audit.counts import BUCKET_SECONDS, NO_TIME

    index = F.coalesce(
        F.floor(F.unix_micros(F.col(event_time_column)) / (BUCKET_SECONDS * 1_000_000)),
        F.lit(NO_TIME),
    ).cast("long")
    return {int(r[0]): int(r[1]) for r in late.groupBy(index).count().collect()}


def late_records(late: DataFrame, key_prefix: str) -> DataFrame:
    """The Kafka records of staged late rows: ``value`` the row as JSON (with ``kappa_input``
    and ``kappa_missed_watermark``; timestamps :data:`TIMESTAMP_FORMAT`), ``key``
    ``<key_prefix>/<input>-<partition>/<row>`` from the staged file's name and the row's
    index in it (stable when a batch is replayed).
    ``late`` must be read straight from the staged Parquet files (``_metadata``)."""
    from pyspark.sql import functions as F

    value = F.to_json(
        F.struct(*[F.col(f"`{c}`") for c in late.columns]), {"timestampFormat": TIMESTAMP_FORMAT}
    )
    staged = F.regexp_replace(F.col("_metadata.file_name"), r"\.parquet$", "")
    key = F.concat_ws("/", F.lit(key_prefix), staged, F.col("_metadata.row_index").cast("string"))
    return late.select(key.alias("key"), value.alias("value"))


def produce_late_rows(late: DataFrame, plan: LateRowsPlan, key_prefix: str) -> None:
    """Produce staged late rows to ``plan.topic`` with the ``kappa_kafka`` batch writer
    (idempotent producer; any record not acknowledged fails the write, so the batch)."""
    from kappaplus.connectors.kafka import SHORT_NAME, KafkaDataSource

    assert plan.topic is not None and plan.bootstrap_servers is not None
    late.sparkSession.dataSource.register(KafkaDataSource)
    options = {"kafka.bootstrap.servers": plan.bootstrap_servers, "topic": plan.topic}
    options.update(plan.kafka_options)
    writer = late_records(late, key_prefix).write.format(SHORT_NAME).options(**options)
    writer.mode("append").save()
