"""Write a job's outputs: one streaming query per output, to its Kafka topic and/or its Hive,
Iceberg or Delta table.

Every output query uses ``foreachBatch`` with :class:`OutputWriter` (there is no other
kind of output writer), which per micro-batch computes the rows once and writes them to

- the Hive table through :class:`~kappaplus.connectors.hive.sink.HiveTableSink` (exactly once:
  a replayed batch publishes nothing twice), and/or
- the Iceberg or Delta table through :mod:`kappaplus.connectors.iceberg.sink` /
  :mod:`kappaplus.connectors.delta.sink` (exactly once: one table version per batch, the
  batch id recorded in it), and/or
- the Kafka topic through the ``kappa_kafka`` batch writer (at least once): each record's
  value is the row as JSON and its key the SHA-256 of that JSON, so a replayed record
  carries the same key and consumers (or a compacted topic) drop the second copy.

An output that is one Hive table and nothing else computes its batch in the sink's staging
write (no ``persist``); any other computes it once into Spark's cache (``persist``) and
writes it to each target from there.

When the query publishes a Kafka input's dead letters or keeps late rows (its side outputs,
:mod:`kappaplus.runtime.side_outputs`), the batch runs first (the taps stage what they
find; for a Hive-only output that run is the sink's staging write), the staged dead letters
are published, then the rows are committed and the late rows kept.

The backfill mode writes the backfill targets that :func:`kappaplus.config.resolve`
chose (``<table>_backfill`` / ``<topic>_backfill`` by default): production output is
never touched by a backfill.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kappaplus.core.errors import ConfigError
from kappaplus.runtime.options import slug, trigger_args

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.streaming import StreamingQuery

    from kappaplus.codecs.protobuf_encode import ProtobufWriter
    from kappaplus.config import (
        DeltaOutput,
        HiveOutput,
        IcebergOutput,
        KafkaOutput,
        ResolvedOutput,
    )
    from kappaplus.jobs import OutputSpec
    from kappaplus.runtime.side_outputs import SideOutput
    from kappaplus.runtime.side_outputs.dead_letter_tap import DeadLetterPublisher
    from kappaplus.runtime.side_outputs.late_rows import LateRowsPlan

log = logging.getLogger(__name__)
CHECKPOINT_ID_FILE = "_kappa_checkpoint.json"


def checkpoint_id(checkpoint: Path) -> str:
    """A stable id of a checkpoint directory, created with it.

    The Hive sink keys its commit log by query name and batch id; a new checkpoint
    restarts batch ids at 0, so the query name carries this id: a fresh checkpoint can
    never be mistaken for one whose batches were already committed.
    """
    checkpoint.mkdir(parents=True, exist_ok=True)
    marker = checkpoint / CHECKPOINT_ID_FILE
    if marker.is_file():
        return str(json.loads(marker.read_text())["id"])
    ident = uuid.uuid4().hex[:10]
    tmp = marker.with_name(f".{marker.name}.tmp")
    tmp.write_text(json.dumps({"id": ident}))
    tmp.replace(marker)
    return ident


@dataclass(frozen=True)
class OutputPlan:
    """One output query: what it writes where, its checkpoint and its name."""

    name: str
    spec: OutputSpec
    kafka: KafkaOutput | None
    hive: HiveOutput | None
    checkpoint: Path
    query_name: str
    provenance: dict[str, Any] | None = None
    """Recorded with every batch committed to the Hive table (run identity, checkpoint)."""
    late: LateRowsPlan | None = None
    """Where the rows this output's watermark drops are kept (stream mode)."""
    iceberg: IcebergOutput | None = None
    delta: DeltaOutput | None = None
    hold: bool = False
    """Commit the Hive batches without registering them, for a range replacement to swap
    in when the run finishes (:mod:`kappaplus.runtime.state.range_replace`)."""
    checkpoint_key: str = ""
    """The checkpoint's stable id (:func:`checkpoint_id`), the end of ``query_name``: the
    sinks and side outputs key their commits by it."""

    def targets(self) -> list[str]:
        found = []
        if self.hive is not None:
            found.append(f"hive {self.hive.table}")
        if self.iceberg is not None:
            found.append(f"iceberg {self.iceberg.table}")
        if self.delta is not None:
            found.append(f"delta {self.delta.path}")
        if self.kafka is not None:
            found.append(f"kafka {self.kafka.topic}")
        return found


def plan_output(
    job_name: str,
    mode: str,
    spec: OutputSpec,
    binding: ResolvedOutput,
    run_dir: Path,
    identity: dict[str, Any] | None = None,
    late: LateRowsPlan | None = None,
) -> OutputPlan:
    """Checkpoint ``<run_dir>/<output>`` and a query name unique to it (``run_dir`` is the
    run's checkpoint directory, :func:`kappaplus.runtime.state.identity.run_dir`)."""
    if binding.kafka is not None and binding.kafka.format == "avro":
        raise ConfigError(
            f"outputs.{spec.name}.kafka.format",
            binding.kafka.format,
            "the runtime writes outputs to Kafka as JSON or Protobuf; use format = 'json' "
            "or 'protobuf'",
        )
    checkpoint = run_dir / spec.name
    ident = checkpoint_id(checkpoint)
    query_name = f"{slug(job_name)}-{mode}-{spec.name}-{ident}"
    provenance = None
    if identity is not None:
        provenance = {**identity, "output": spec.name, "checkpoint": str(checkpoint)}
    return OutputPlan(
        spec.name,
        spec,
        binding.kafka,
        binding.hive,
        checkpoint,
        query_name,
        provenance,
        late,
        iceberg=binding.iceberg,
        delta=binding.delta,
        checkpoint_key=ident,
    )


class OutputWriter:
    """``foreachBatch`` function writing one output's batch to its Hive table and/or topic."""

    def __init__(
        self,
        plan: OutputPlan,
        on_late_kept: Callable[[int, dict[int, int]], None] | None = None,
        dead_letters: Sequence[DeadLetterPublisher] = (),
        run_id: str | None = None,
        session: SparkSession | None = None,
    ) -> None:
        from kappaplus.connectors.hive.sink import HiveTableSink

        self.run_id = run_id
        """Notes each batch it wrote with its counts under this run's id (None: does not),
        :mod:`kappaplus.runtime.state.batch_counts`."""
        self.session = session
        """The session that started the query (a batch's own is a clone of it, which
        knows no active query)."""
        from kappaplus.connectors.hive.sink_options import HiveSinkOptions

        self.plan = plan
        self.hive_sink = None
        if plan.hive is not None:
            self.hive_sink = HiveTableSink(
                HiveSinkOptions.from_config(
                    plan.hive,
                    query_name=plan.query_name,
                    event_time_column=plan.spec.event_time_column,
                    provenance=plan.provenance,
                    hold=plan.hold,
                )
            )
        self.iceberg_sink = None
        if plan.iceberg is not None:
            from kappaplus.connectors.iceberg.sink import IcebergTableSink

            # the query name carries the checkpoint's id: a fresh checkpoint (batch ids
            # from 0 again) is never mistaken for one whose batches were committed
            self.iceberg_sink = IcebergTableSink(
                plan.iceberg.table, plan.iceberg.catalog, query=plan.query_name
            )
        self.delta_sink = None
        if plan.delta is not None:
            from kappaplus.connectors.delta.sink import DeltaTableSink

            # appId = the query name, which carries the checkpoint's id (as above)
            self.delta_sink = DeltaTableSink(
                plan.delta.path, plan.delta.storage_options, query=plan.query_name
            )
        self.late = None
        if plan.late is not None:
            from kappaplus.runtime.side_outputs.late_rows import LateRowsPublisher

            self.late = LateRowsPublisher(plan.late, plan.query_name, on_late_kept)
        self.dead_letters = list(dead_letters)
        self.claimer = None
        if plan.kafka is not None:
            from kappaplus.connectors.kafka.claims import TopicClaimer

            # the query's claim on its topic, recorded before each batch's records
            # (kappaplus.runtime.state.target_claims refuses another run over its span)
            self.claimer = TopicClaimer(
                plan.kafka.bootstrap_servers,
                kafka_settings(plan.kafka),
                plan.kafka.topic,
                plan.query_name,
                plan.provenance,
            )

    def prepare(self, df: DataFrame) -> None:
        """Create or check the output table while the query plans its first batch
        (:meth:`HiveTableSink.prepare`); a failure is only logged: the first batch makes
        the same check and fails the query with it."""
        if self.hive_sink is None:
            return
        try:
            self.hive_sink.prepare(df)
        except Exception as exc:  # noqa: BLE001 - the first batch reports it properly
            log.debug("output %s: table not prepared ahead: %s", self.plan.name, exc)

    def side_outputs(self) -> list[SideOutput]:
        """The dead-letter publishers, then the late rows' (the order they publish in)."""
        return [*self.dead_letters, *([self.late] if self.late is not None else [])]

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        side = self.side_outputs()
        for output in side:
            output.before(batch_id)
        if self._hive_only():
            self._hive_only_batch(batch, batch_id, side)
            return
        batch.persist()
        try:
            ran = False
            if side:
                # run the batch now, whatever the sinks do with it (a sink that staged it
                # in an earlier attempt does not read it again): the taps stage this
                # batch's late rows and dead letters; the dead letters are published before
                # the rows are committed, and Spark commits the batch after both, so a
                # crash in between replays both
                batch.count()
                ran = True
            for output in side:
                if output.publish_before_rows:
                    output.publish(batch, batch_id)
            written = True
            if self.hive_sink is not None:
                written = self.hive_sink.write_batch(batch, batch_id)
            if self.iceberg_sink is not None:
                written = self.iceberg_sink.write_batch(batch, batch_id) and written
            if self.delta_sink is not None:
                written = self.delta_sink.write_batch(batch, batch_id) and written
            if self.plan.kafka is not None:
                self._claim(batch, batch_id)
                write_kafka(batch, self.plan.kafka, self.plan.query_name)
            elif not written and not ran:
                # a replayed batch the sink had committed: run it once anyway, so its
                # audit counts (observed on this plan) are reported again for this batch
                batch.count()
            for output in side:
                if not output.publish_before_rows:
                    output.publish(batch, batch_id)
            self._note(batch, batch_id)
        finally:
            batch.unpersist()

    def _hive_only(self) -> bool:
        """The output is one Hive table and nothing else (the stream's usual case)."""
        return (
            self.hive_sink is not None
            and self.iceberg_sink is None
            and self.delta_sink is None
            and self.plan.kafka is None
        )

    def _hive_only_batch(self, batch: DataFrame, batch_id: int, side: list[SideOutput]) -> None:
        """A batch of an output that is only a Hive table, without ``persist``: the sink's
        staging write is the batch's one run (its taps stage the dead letters and late rows
        then); the dead letters are published after the rows are staged and before they
        are committed, as :meth:`__call__` does with a persisted batch. (Building the
        cache was a sixth of a stream's executor time, ``docs/benchmarks.md``.)"""
        assert self.hive_sink is not None
        ran = False

        def before_commit(staged_now: bool) -> None:
            nonlocal ran
            ran = staged_now
            if side and not ran:
                # an earlier attempt staged (or committed) the rows: run the batch for the
                # taps, whose dead letters and late rows this attempt publishes
                batch.count()
                ran = True
            for output in side:
                if output.publish_before_rows:
                    output.publish(batch, batch_id)

        self.hive_sink.write_batch(batch, batch_id, before_commit=before_commit)
        if not ran:
            # a replayed batch the sink had committed: run it once anyway, so its audit
            # counts (observed on this plan) are reported again for this batch
            batch.count()
        for output in side:
            if not output.publish_before_rows:
                output.publish(batch, batch_id)
        self._note(batch, batch_id)

    def _note(self, batch: DataFrame, batch_id: int) -> None:
        """Note the batch and what it counted before Spark commits it: a run killed right
        after the commit still has the batch counted (``batch_counts``)."""
        if self.run_id is None or self.session is None:
            return
        from kappaplus.runtime.observe.batch_metrics import current_batch_metrics
        from kappaplus.runtime.state.batch_counts import note_batch

        observed = current_batch_metrics(self.session, self.plan.query_name)
        if observed is not None:
            note_batch(self.plan.checkpoint, batch_id, self.run_id, observed)

    def _claim(self, batch: DataFrame, batch_id: int) -> None:
        """Record this query's claim on its topic widened by the batch's event-time span
        (one aggregate over the persisted batch), before its records are produced."""
        from kappaplus.connectors.hive.sink_span import event_time_span

        assert self.claimer is not None
        span = event_time_span(batch, self.plan.spec.event_time_column)
        self.claimer.claim(batch_id, None if span is None else (span[0], span[1]))


def kafka_settings(kafka: KafkaOutput) -> dict[str, str]:
    """The client settings of a Kafka output (its ``kafka.*`` options, without the prefix
    and the bootstrap servers), for the clients of its claims."""
    from kappaplus.core.kafka_conf import client_conf

    conf = client_conf({**kafka.options, "kafka.bootstrap.servers": kafka.bootstrap_servers})
    conf.pop("bootstrap.servers", None)
    return conf


def kafka_records(
    batch: DataFrame, query: str | None = None, kafka: KafkaOutput | None = None
) -> DataFrame:
    """``key`` (SHA-256 hex of the value) and ``value`` (the row as JSON, or as a Protobuf
    message for a ``protobuf`` output) per row, and with ``query`` the header
    ``kappa.query`` naming the query that produced it."""
    from pyspark.sql import functions as F

    from kappaplus.connectors.kafka.claims import QUERY_HEADER

    if kafka is not None and kafka.format == "protobuf":
        values = protobuf_values(batch, kafka)
    else:
        value = F.to_json(F.struct(*[F.col(f"`{c}`") for c in batch.columns]))
        values = batch.select(value.alias("value"))
    columns = [F.sha2(F.col("value"), 256).alias("key"), F.col("value")]
    if query is not None:
        header = F.struct(
            F.lit(QUERY_HEADER).alias("key"), F.lit(query).cast("binary").alias("value")
        )
        columns.append(F.array(header).alias("headers"))
    return values.select(*columns)


def protobuf_writer(kafka: KafkaOutput) -> ProtobufWriter:
    """The encoder of a ``protobuf`` Kafka output (with a registry: its schema registered,
    once per process, and its values framed with the id)."""
    from kappaplus.codecs.protobuf_encode import ProtobufWriter, registered_header

    assert kafka.schema_file is not None and kafka.message is not None
    header = b""
    if kafka.schema_registry_url is not None:
        key = (kafka.schema_registry_url, kafka.topic, str(kafka.schema_file), kafka.message)
        if key not in _HEADERS:
            _HEADERS[key] = registered_header(
                kafka.schema_file, kafka.message, kafka.schema_registry_url, kafka.topic
            )
        header = _HEADERS[key]
    return ProtobufWriter(kafka.schema_file, kafka.message, header)


_HEADERS: dict[tuple[str, str, str, str], bytes] = {}


def protobuf_values(batch: DataFrame, kafka: KafkaOutput) -> DataFrame:
    """The batch's rows as ``value`` (binary) Protobuf messages, encoded in the workers."""
    writer = protobuf_writer(kafka)
    return batch.mapInArrow(writer.encode_batches, "value binary")


def write_kafka(batch: DataFrame, kafka: KafkaOutput, query: str | None = None) -> None:
    """Produce the batch to ``kafka.topic`` (``kappa_kafka`` batch writer, idempotent
    producer), each record stamped with the ``query`` that produced it (a header)."""
    from kappaplus.connectors.kafka import SHORT_NAME, KafkaDataSource

    batch.sparkSession.dataSource.register(KafkaDataSource)
    options = {"kafka.bootstrap.servers": kafka.bootstrap_servers, "topic": kafka.topic}
    options.update(kafka.options)
    records = kafka_records(batch, query, kafka)
    records.write.format(SHORT_NAME).options(**options).mode("append").save()


def start_output(
    df: DataFrame,
    plan: OutputPlan,
    trigger: str,
    on_late_kept: Callable[[int, dict[int, int]], None] | None = None,
    dead_letters: Sequence[DeadLetterPublisher] = (),
    run_id: str | None = None,
) -> StreamingQuery:
    """Start the streaming query of one output (its rows counted for the audit;
    ``on_late_kept``: told the late rows it kept per batch and audit bucket;
    ``dead_letters``: the inputs whose dead letters this query publishes; ``run_id``: the
    run noting each batch it writes beside the checkpoint)."""
    from kappaplus.audit.counts import observe_rows

    if plan.kafka is not None and plan.kafka.format == "protobuf":
        protobuf_writer(plan.kafka).check(df.columns, f"outputs.{plan.name}.kafka.message")
    counted = observe_rows(df, "output", plan.name, "written", plan.spec.event_time_column)
    output = OutputWriter(plan, on_late_kept, dead_letters, run_id, df.sparkSession)
    writer: Any = (
        counted.writeStream.queryName(plan.query_name)
        .outputMode(plan.spec.output_mode)
        .option("checkpointLocation", str(plan.checkpoint))
        .foreachBatch(output)
        .trigger(**trigger_args(trigger))
    )
    query = writer.start()
    output.prepare(counted)
    return query


def check_sql(spark: SparkSession, plans: dict[str, OutputPlan]) -> None:
    """Parse every SQL expression of the outputs' config (``partition_expr``) now, with
    Spark's own parser, so a bad one is one line naming its key, not a failure at the
    first batch."""
    jspark: Any = spark._jsparkSession  # type: ignore[attr-defined]
    parser = jspark.sessionState().sqlParser()
    for name, plan in plans.items():
        if plan.hive is None or not plan.hive.partition_expr:
            continue
        try:
            parser.parseExpression(plan.hive.partition_expr)
        except Exception as exc:  # noqa: BLE001 - Spark's ParseException, as one line
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ConfigError(
                f"outputs.{name}.hive.partition_expr",
                plan.hive.partition_expr,
                f"not a SQL expression ({first[:200]})",
            ) from None
