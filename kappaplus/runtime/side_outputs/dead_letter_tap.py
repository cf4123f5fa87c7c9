"""A stream's dead letters: written by the output queries, in the micro-batch that reads
them, with no query of their own and no second read of the topic.

For a Kafka input with a ``dlq`` topic or table (the output queries decode the topic anyway):

1. **Tap** (executors): after decoding (and the event-time bounds, whose rejects are dead
   letters too) every record passes through :class:`DeadLetterTap`, a ``mapInArrow`` (the
   same pass as the ``max_ahead`` judge,
   :func:`~kappaplus.runtime.binding.outliers.mark_far_ahead`) that passes every record on
   without its raw key and value; ``good_events`` drops the failed ones after they are
   counted. In the query that publishes the input's dead letters (the *publisher*, below)
   it first stages them, in the dead-letter schema, under
   ``<run checkpoint>/_dlq/<input>/batch=<N>/part-<P>.parquet`` (Spark's task-local
   ``sql.streaming.queryId`` and ``streaming.sql.batchId`` say which query and batch a task
   serves): one file per input partition, rewritten whole by a retried task.
2. **Publish** (driver, in the output's ``foreachBatch``,
   :class:`kappaplus.runtime.binding.outputs.OutputWriter`): the batch is computed once
   (``persist``), its staged dead letters go to the target through
   :mod:`kappaplus.dead_letters.targets` (:meth:`DeadLetterPublisher.publish`), and only
   then are the good rows committed.
   Spark commits the batch after both, so a crash anywhere in between replays both: the
   Hive table replaces the batch's partition ``dlq_batch = <job>-<input>-<checkpoint id>-<N>``
   (exactly once); the Kafka topic gets the batch's dead letters again under the same keys
   ``topic/partition/offset`` (idempotent producer, at least once, deduplicable by key).

The publisher of an input is the first output, in the job's order, whose query reads it;
the other outputs reading it only drop its failed records. (An input no output reads is
never read, so it has no dead letters.) Its counts come from that query: the dead letters
written per batch, reconciled with the records the same query found dead (``dead`` of
``kappa_decode_<input>`` plus ``out_of_bounds`` of ``kappa_bounds_<input>``).

Dead letters are written with :mod:`kappaplus.dead_letters.targets`, the writer of every dead
letter of a job (:mod:`kappaplus.runtime.side_outputs.staged_dead_letters`).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from kappaplus.core.ahead import AheadRule
    from kappaplus.dead_letters.targets import DeadLetterTarget
    from kappaplus.jobs import Job

log = logging.getLogger(__name__)


class PublishingOutput(Protocol):
    """What the tap needs of the output query that publishes (an ``OutputPlan``)."""

    @property
    def name(self) -> str: ...

    @property
    def checkpoint(self) -> Path: ...

    @property
    def checkpoint_key(self) -> str: ...


STAGING_DIR = "_dlq"
PUBLISHER_FILE = "publisher.json"
DRIVER_ROWS = 100_000
"""Most dead letters of one batch written from the driver (more: by the executors)."""


@dataclass(frozen=True)
class DeadLetterPlan:
    """One Kafka input's dead letters in a stream run: where they are staged, where they go."""

    input: str
    job: str
    staging: str
    target: DeadLetterTarget

    def batch_dir(self, batch_id: int) -> Path:
        return Path(self.staging) / f"batch={batch_id}"

    @property
    def publisher_file(self) -> Path:
        """Names the checkpoint of the query that stages and publishes (see the module)."""
        return Path(self.staging) / PUBLISHER_FILE


def decode_metrics_name(input_name: str) -> str:
    """Name of the observed decode counts of a Kafka input in each output query."""
    return f"kappa_decode_{input_name}"


def stream_dead_letter_plans(job: Job, resolved: Any, mode_dir: Path) -> dict[str, DeadLetterPlan]:
    """The plans of the Kafka inputs of a stream run, by input name: every one but those
    whose ``dlq`` says ``discard = true`` (the log says where each input's go)."""
    from kappaplus.dead_letters.targets import DeadLetterTarget

    plans: dict[str, DeadLetterPlan] = {}
    for spec in job.inputs:
        kafka = resolved.inputs[spec.name].kafka
        if kafka is None:
            continue
        target = DeadLetterTarget.of_kafka_input(kafka)
        if target is None:
            log.warning(
                "input %s: dead letters are counted and discarded (dlq = { discard = true })",
                spec.name,
            )
            continue
        staging = str(mode_dir / STAGING_DIR / spec.name)
        plans[spec.name] = DeadLetterPlan(spec.name, job.name, staging, target)
        where = target.kafka_topic if target.hive_table is None else target.hive_table
        log.info("input %s: dead letters go to %s", spec.name, where)
    return plans


def publisher_checkpoint(plan: DeadLetterPlan) -> str | None:
    """The checkpoint of the query that publishes ``plan``'s dead letters (None: none yet)."""
    try:
        return str(json.loads(plan.publisher_file.read_text())["checkpoint"])
    except (OSError, KeyError, ValueError):
        return None


class DeadLetterTap:
    """The ``mapInArrow`` function of one input after decoding (see the module docstring).

    ``judge`` (the event-time column and its ``max_ahead`` rule) first fails the records
    too far ahead of their peers (:func:`~kappaplus.runtime.binding.outliers.judge_table`),
    so that judging and tapping cost one pass between the JVM and Python. Without ``plan``
    it only judges. Either way the records leave without their raw key and value."""

    def __init__(
        self, plan: DeadLetterPlan | None, judge: tuple[str, AheadRule] | None = None
    ) -> None:
        self.plan = plan
        self.judge = judge

    def _staged_batch(self, context: Any) -> int | None:
        """The batch id when this task runs a batch of the publishing query, else None."""
        from kappaplus.runtime.side_outputs.late_rows import (
            BATCH_ID_PROPERTY,
            QUERY_ID_PROPERTY,
            query_id_of,
        )

        if context is None or self.plan is None:
            return None
        query_id = context.getLocalProperty(QUERY_ID_PROPERTY)
        raw_batch = context.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or raw_batch in (None, ""):
            return None
        checkpoint = publisher_checkpoint(self.plan)
        if checkpoint is None or query_id_of(checkpoint) != query_id:
            return None
        return int(raw_batch)

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        from kappaplus.runtime.binding.outliers import judge_table

        if self.judge is None:
            tables: Iterator[pa.Table] = (pa.Table.from_batches([b]) for b in batches)
        else:
            held = list(batches)  # a record's peers: every record of the task
            if not held:
                return
            tables = iter([judge_table(pa.Table.from_batches(held), *self.judge)])
        yield from self.batches(tables)

    def batches(self, tables: Iterator[pa.Table]) -> Iterator[pa.RecordBatch]:
        """The tap over one task's decoded (and judged) records: stage the failed ones in
        the publishing query, pass every one on without its raw key and value."""
        from pyspark import TaskContext

        from kappaplus.codecs import RECORD_COL

        context = TaskContext.get()
        batch_id = self._staged_batch(context)
        now = datetime.now(UTC)
        dead: list[pa.Table] = []
        for table in tables:
            if batch_id is not None:
                self._keep_dead_letters(table, now, dead)
            # the failed records' raw bytes are staged (or have no dead letters to go
            # to) and the good ones' are never read again: they do not cross back
            yield from without_raw_bytes(table, RECORD_COL).to_batches()
        if dead and batch_id is not None and context is not None and self.plan is not None:
            stage_dead_letters(self.plan, batch_id, context.partitionId(), dead)

    def _keep_dead_letters(self, table: pa.Table, now: datetime, dead: list[pa.Table]) -> None:
        """Add the failed records of ``table`` to ``dead``, as dead letters."""
        import pyarrow.compute as pc

        from kappaplus.codecs import ERROR_COL, dead_letter_arrow

        if table.num_rows == 0 or self.plan is None:
            return
        failed = pc.is_valid(table.column(ERROR_COL))
        if pc.any(failed).as_py():
            bad = table.filter(failed)
            dead.append(dead_letter_arrow(bad, bad.column(ERROR_COL), self.plan.job, now))


def without_raw_bytes(table: pa.Table, column: str) -> pa.Table:
    """``table`` with the ``key`` and ``value`` of its raw-record struct ``column`` null."""
    index = table.schema.get_field_index(column)
    record = table.column(index).combine_chunks()
    struct_type = record.type
    children = [
        pa.nulls(len(record), struct_type.field(i).type)
        if struct_type.field(i).name in ("key", "value")
        else record.field(i)
        for i in range(struct_type.num_fields)
    ]
    slim = pa.StructArray.from_arrays(
        children, fields=list(struct_type), mask=record.is_null() if record.null_count else None
    )
    return table.set_column(index, table.field(index), slim)


def stage_dead_letters(
    plan: DeadLetterPlan, batch_id: int, partition: int, dead: list[pa.Table]
) -> Path:
    """Write one task's dead letters (atomically: a retried task replaces its file whole)."""
    from kappaplus.dead_letters.staging import stage

    directory = plan.batch_dir(batch_id)
    return Path(stage(pa.concat_tables(dead), str(directory), f"part-{partition}.parquet"))


def observed_metrics(df: DataFrame) -> set[str]:
    """The names of the metrics observed (``DataFrame.observe``) anywhere in ``df``'s plan:
    which inputs it reads (``kappa_decode_<input>``)."""
    names: set[str] = set()
    stack: list[Any] = [df._jdf.queryExecution().logical()]  # type: ignore[operator]
    while stack:
        node = stack.pop()
        if node.nodeName() == "CollectMetrics":
            names.add(str(node.name()))
        children = node.children()
        stack.extend(children.apply(i) for i in range(children.size()))
    return names


def dead_letter_publishers(
    dead: Mapping[str, DeadLetterPlan],
    frames: Mapping[str, DataFrame],
    outputs: Mapping[str, PublishingOutput],
) -> dict[str, DeadLetterPublisher]:
    """The publisher of each input's dead letters: the first output (in the job's order)
    whose frame reads the input."""
    publishers: dict[str, DeadLetterPublisher] = {}
    if not dead:
        return publishers
    reads = {name: observed_metrics(frames[name]) for name in outputs}
    for input_name, plan in dead.items():
        metric = decode_metrics_name(input_name)
        owner = next((name for name in outputs if metric in reads[name]), None)
        if owner is None:
            log.warning("input %s: no output reads it, so nothing reads its topic", input_name)
            continue
        publishers[input_name] = DeadLetterPublisher(plan, outputs[owner])
    return publishers


class DeadLetterPublisher:
    """Driver side: publishes one input's staged dead letters per batch of one output's
    query through :func:`kappaplus.dead_letters.targets.dead_letter_writer`; ``written[batch id]``
    counts; a :class:`~kappaplus.runtime.side_outputs.SideOutput`."""

    publish_before_rows: ClassVar[bool] = True

    def __init__(self, plan: DeadLetterPlan, output: PublishingOutput) -> None:
        from kappaplus.dead_letters.targets import dead_letter_writer
        from kappaplus.runtime.options import slug

        self.plan = plan
        self.output = output.name
        self.checkpoint = str(output.checkpoint)
        if not output.checkpoint_key:
            raise ValueError(f"output {output.name!r}: a plan without its checkpoint key")
        self.sink_id = f"{slug(plan.job)[:40]}-{slug(plan.input)[:40]}-{output.checkpoint_key}"
        self.writer = dead_letter_writer(plan.target, sink_id=self.sink_id)
        self.written: dict[int, int] = {}
        self._prepared = plan.target.hive_table is None

    def claim(self) -> None:
        """Tell the taps which query stages this input's dead letters (before it starts)."""
        path = self.plan.publisher_file
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(json.dumps({"output": self.output, "checkpoint": self.checkpoint}))
        tmp.replace(path)

    def before(self, batch_id: int) -> None:
        """Forget what an earlier attempt of ``batch_id`` staged: this attempt stages anew."""
        shutil.rmtree(self.plan.batch_dir(batch_id), ignore_errors=True)

    def publish(self, batch: DataFrame, batch_id: int) -> int:
        """Publish the dead letters staged for ``batch_id`` (the batch has run); their count.

        Up to :data:`DRIVER_ROWS` of them are written from the driver as one Arrow table
        (:func:`kappaplus.dead_letters.targets.write_dead_letters`: no Spark job for a
        topic, one insert for a table); more by the executors
        (:func:`kappaplus.dead_letters.targets.dead_letter_writer`). Either way the same Hive
        batch key and the same Kafka producer loop and keys."""
        from kappaplus.codecs import DLQ_ARROW_SCHEMA
        from kappaplus.dead_letters.targets import write_dead_letters

        spark = batch.sparkSession

        directory = self.plan.batch_dir(batch_id)
        files = sorted(str(p) for p in directory.glob("*.parquet")) if directory.is_dir() else []
        rows = sum(pq.ParquetFile(f).metadata.num_rows for f in files)
        count = 0
        if rows > DRIVER_ROWS:
            counts = self.writer(spark.read.parquet(*files), batch_id)
            count = max(counts.kafka, counts.hive)
        elif files or not self._prepared:
            # an empty batch writes nothing, except once to create (and check) the table
            staged = [pq.read_table(f) for f in files]
            table = pa.concat_tables(staged) if staged else DLQ_ARROW_SCHEMA.empty_table()
            counts = write_dead_letters(
                table, self.plan.target, spark=spark, batch_key=f"{self.sink_id}-{batch_id}"
            )
            count = max(counts.kafka, counts.hive)
            if count:
                log.warning(
                    "input %s, batch %d of output %s: %d dead letter(s) written to %s",
                    self.plan.input,
                    batch_id,
                    self.output,
                    count,
                    self.plan.target.kafka_topic or self.plan.target.hive_table,
                )
        self._prepared = True
        self.written[batch_id] = count
        for old in Path(self.plan.staging).glob("batch=*"):
            if int(old.name.split("=", 1)[1]) <= batch_id:
                shutil.rmtree(old, ignore_errors=True)
        return count

    def counts(self, seen: set[int], observed_dead: int) -> dict[str, Any]:
        """For the run record: dead letters written (by the batches of this run) and whether
        those of the batches the run saw progress of (``seen``) equal the dead records the
        query observed in them (failed to decode, or out of bounds)."""
        shown = sum(n for batch, n in self.written.items() if batch in seen)
        return {
            "dead_letters_written": sum(self.written.values()),
            "dead_letter_output": self.output,
            "reconciled": shown == observed_dead,
        }
