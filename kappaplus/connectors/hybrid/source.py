"""The hybrid ("lambda") source ``kappa_hybrid``: lake history up to a cutoff, then Kafka.

One streaming query bootstraps its state from the lake and continues live, with one
checkpoint and unchanged job code. Kafka rarely keeps more than a few days; the lake keeps
everything. The source reads the lake table for event time ``[start, cutoff)`` in
event-time slices (the Hive source's planner and reader), then Kafka from the offsets
where records with timestamp ``cutoff - lateness`` begin, decoding each record into the
lake's event schema.

Offsets (Spark's checkpoint)::

    {"phase": "lake", "lake": <Hive source offset>}
    {"phase": "kafka", "cutoff": <us>, "start": <Kafka offsets at cutoff - lateness>,
     "kafka": <Kafka offsets {"topic": {"0": 123}}>}

The switch happens in the first ``latestOffset`` call that finds the lake read up to the
cutoff: that batch reads Kafka from ``start`` to ``kafka``. The Kafka start is resolved
once, recorded in the offset log, and therefore replayed exactly after a restart.

**De-duplication rule.** The lake owns every event with event time ``< cutoff``; Kafka
owns every event with event time ``>= cutoff``. The lake phase reads exactly ``[start,
cutoff)``. In the Kafka phase a decoded record whose event time is ``< cutoff`` is skipped
and counted (the lake delivered it), whatever offset it sits at. Kafka is entered early,
at the first record whose Kafka timestamp is ``>= cutoff - lateness`` (``offsets_for_times``,
exact on Kafka), so events with event time ``>= cutoff`` whose record timestamp is up to
``lateness`` earlier are not missed; a broker whose lookup answers an earlier offset (the
embedded broker always answers "earliest") only makes the source skip more records, never
deliver one twice. Requirements: the lake is complete up to the cutoff (the lake phase waits
until the table's partitions reach it, see the Hive source's ``completenessDelay``), and
every Kafka event with event time ``>= cutoff`` has a record timestamp ``>= cutoff -
lateness``. If Kafka's retention no longer reaches ``cutoff - lateness`` the start is the
earliest retained offset and the gap is reported per ``failOnDataLoss``.

**Schema unification.** The output schema is the lake table's schema. Decoded events are
conformed to it: lake columns by name and type (values that do not convert are dead
letters), time-partition columns (``dt=``) derived from the event time, extra event fields
dropped. Records that fail to decode are written to ``deadLetterPath`` and counted (see
:mod:`kappaplus.connectors.hybrid.reader`, :func:`hybrid_counts`): never dropped silently.
With ``mapped`` (a lake and a topic of different shapes) nothing is conformed here: each
side's rows are delivered in their own shape (:func:`~kappaplus.connectors.hybrid.options.
mapped_schema`) and the runtime maps each by its binding's mapping
(:func:`kappaplus.mapping.apply_phase_mappings`); the lake's event time may be stored as
epoch numbers or text (its planner converts the cutoff), Kafka's de-duplication uses the
decoder's own event-time field.

**Watermarks.** Being one source, history and live data never race: every lake slice is
delivered before the first Kafka record, so the watermark follows the lake's event time
and then Kafka's; it never runs ahead of the lake (no watermark skew between sources), and
windowed state built in the lake phase carries into the Kafka phase (same query, same
checkpoint).

>>> df = read_hybrid_stream(spark, table="lake.rides", event_time_column="ts",
...                         cutoff="2024-03-29T00:00:00Z", start="2024-03-01",
...                         bootstrap="127.0.0.1:9092", subscribe="rides",
...                         decoder=spec, lateness="6 hours",
...                         max_event_time_per_trigger="5 days",
...                         watermark_delay="1 hour")                  # doctest: +SKIP
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from kappaplus.codecs import DecoderSpec
from kappaplus.connectors.delta.options import DeltaSourceOptions
from kappaplus.connectors.delta.source import DeltaStreamReader
from kappaplus.connectors.hive.catalog import hive_stream_options, resolve_table
from kappaplus.connectors.hive.datasource import HiveStreamReader
from kappaplus.connectors.hybrid.options import (
    DEFAULT_LATENESS,
    KAFKA_FIELD_PREFIX,
    LAKE_FIELD_PREFIX,
    LAKE_ONLY_KEYS,
    PHASE_COLUMN,
    HybridSourceOptions,
    decoder_to_json,
    mapped_schema,
    safe_file_part,
)
from kappaplus.connectors.hybrid.reader import (
    HybridCounts,
    hybrid_counts,
    range_name,
    read_kafka_range,
)
from kappaplus.connectors.iceberg.options import IcebergSourceOptions
from kappaplus.connectors.iceberg.source import IcebergStreamReader
from kappaplus.connectors.kafka.offsets import PARTITION_EOF, from_json
from kappaplus.connectors.kafka.reader import report_data_loss
from kappaplus.connectors.kafka.source import KafkaInputPartition, KafkaStreamReader, spark_options
from kappaplus.connectors.lake.delivery import SlicePartition
from kappaplus.connectors.lake.source import ListedFilesStreamReader, source_schema
from kappaplus.core.draining import drain_requested
from kappaplus.core.settings import state_dir
from kappaplus.core.timeutil import iso, parse_duration
from kappaplus.slicing.offsets import Position

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

SHORT_NAME = "kappa_hybrid"
PHASE_LAKE = "lake"
PHASE_KAFKA = "kafka"


class HybridDataSource(DataSource):
    """``spark.readStream.format("kappa_hybrid")``; see :class:`HybridSourceOptions`."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = HybridSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SHORT_NAME

    def schema(self) -> StructType:
        if self.parsed.mapped:
            return mapped_schema(source_schema(self.parsed.lake), self.parsed.decoder)
        return source_schema(self.parsed.lake)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return HybridStreamReader(self.parsed)


class HybridStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Delegates to a Hive stream reader, then to a Kafka stream reader (driver side), and
    reads lake slices or decoded Kafka ranges (executor side)."""

    def __init__(self, options: HybridSourceOptions) -> None:
        self.options = options
        self.lake: ListedFilesStreamReader
        if isinstance(options.lake, IcebergSourceOptions):
            self.lake = IcebergStreamReader(options.lake)
        elif isinstance(options.lake, DeltaSourceOptions):
            self.lake = DeltaStreamReader(options.lake)
        else:
            self.lake = HiveStreamReader(options.lake)
        self.kafka = KafkaStreamReader(options.kafka)
        self._phase = PHASE_LAKE
        self._planned: dict[str, list[KafkaInputPartition]] = {}

    def __getstate__(self) -> dict:
        # Executors need the options only; planners and Kafka clients stay on the driver.
        return {"options": self.options}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["options"])  # type: ignore[misc]

    # -- driver: offsets ----------------------------------------------------------------

    def initialOffset(self) -> dict:
        return {"phase": PHASE_LAKE, "lake": self.lake.initialOffset()}

    def getDefaultReadLimit(self) -> ReadLimit:
        # Each phase applies its own budget (lake: maxRowsPerTrigger and the event-time
        # span; Kafka: maxOffsetsPerTrigger), see latestOffset.
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        self.lake.prepareForTriggerAvailableNow()
        self.kafka.prepareForTriggerAvailableNow()

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        if drain_requested(self.options.drain_file):
            return start  # the run is stopping: the batch under way is the last
        if start.get("phase") == PHASE_KAFKA:
            self._phase = PHASE_KAFKA
            end = self.kafka.latestOffset(start["kafka"], self._kafka_limit(limit))
            if end == start["kafka"]:
                return start  # nothing new: no batch (its planning time stays as it was)
            return self._kafka_offset(start["start"], end)
        lake_start = start["lake"]
        budget = self._lake_budget(limit)
        following = self.lake.planner.next(lake_start, budget)
        if following != lake_start or not self._lake_done(lake_start):
            return start if following == lake_start else {"phase": PHASE_LAKE, "lake": following}
        kafka_start = self._kafka_start()
        self._phase = PHASE_KAFKA
        end = self.kafka.latestOffset(kafka_start, self._kafka_limit(limit))
        log.info(
            "%s: lake read up to the cutoff; continuing from Kafka offsets %s",
            self.options.describe(),
            kafka_start,
        )
        return self._kafka_offset(kafka_start, end)

    def _kafka_offset(self, kafka_start: dict, kafka_end: dict) -> dict:
        return {
            "phase": PHASE_KAFKA,
            "cutoff": self.options.cutoff,
            "start": kafka_start,
            "kafka": kafka_end,
            # "now" of the maxFuture bound, in the checkpointed offset so that a replay of
            # the batch decides about each record as its first attempt did
            "planned_ms": int(time.time() * 1000),
        }

    def _lake_budget(self, limit: ReadLimit) -> int | None:
        return limit.max_rows if isinstance(limit, ReadMaxRows) else None

    def _kafka_limit(self, limit: ReadLimit) -> ReadLimit:
        if isinstance(limit, ReadMaxRows):
            return limit
        return self.kafka.getDefaultReadLimit()

    def _lake_done(self, lake_offset: dict) -> bool:
        """Whether the lake has been delivered up to the cutoff."""
        pos = Position.parse(lake_offset)
        if pos.hi is not None:
            return pos.hi >= self.options.cutoff
        # No start and the table was empty when the query began: nothing to deliver if
        # the table is still empty (and complete up to the cutoff).
        planner = self.lake.planner
        files = planner.listing()
        frontier = planner.frontier(files)
        target = planner.target
        complete = (target is not None) or (
            frontier is not None and frontier >= self.options.cutoff
        )
        return complete and planner.data_extent(files) is None

    def _kafka_start(self) -> dict:
        """Kafka offsets of ``cutoff - lateness`` (offsets-for-times; a lower bound on
        brokers that answer "earliest"), checked against retention."""
        start = self.kafka.initialOffset()
        self._check_retention(from_json(start))
        return start

    def _check_retention(self, offsets: dict[tuple[str, int], int]) -> None:
        """Report a gap when Kafka no longer holds records back to ``cutoff - lateness``:
        the start is the earliest retained offset, which was not offset 0, and that
        record's timestamp is later than ``cutoff - lateness``."""
        oracle = self.kafka.oracle
        lows = oracle.earliest(sorted(offsets))
        suspects = {tp: o for tp, o in offsets.items() if o == lows[tp] and o > 0}
        if not suspects:
            return
        wanted = self.options.kafka_start_ms
        for tp, stamp in _first_timestamps(oracle, suspects).items():
            if stamp > wanted:
                report_data_loss(
                    self.options.kafka,
                    f"{tp[0]}-{tp[1]}: Kafka retention starts at offset {suspects[tp]} with "
                    f"timestamp {iso(stamp * 1000)}, after cutoff - lateness "
                    f"{iso(wanted * 1000)}; events with event time in [{iso(self.options.cutoff)}"
                    f", {iso(stamp * 1000)}) may be missing (choose a later cutoff)",
                )

    def reportLatestOffset(self) -> dict | None:
        if self._phase == PHASE_KAFKA:
            latest = self.kafka.reportLatestOffset()
            return None if latest is None else {"phase": PHASE_KAFKA, "kafka": latest}
        latest = self.lake.reportLatestOffset()
        return None if latest is None else {"phase": PHASE_LAKE, "lake": latest}

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        if end.get("phase") != PHASE_KAFKA:
            return self.lake.partitions(start["lake"], end["lake"])
        first = end["start"] if start.get("phase") != PHASE_KAFKA else start["kafka"]
        parts = list(self.kafka.partitions(first, end["kafka"]))
        planned = end.get("planned_ms")  # absent in offsets of earlier versions
        for part in parts:
            if isinstance(part, KafkaInputPartition):
                part.planned_micros = None if planned is None else int(planned) * 1000
        self._planned[_key(end)] = [p for p in parts if isinstance(p, KafkaInputPartition)]
        return parts

    def commit(self, end: dict) -> None:
        if end.get("phase") != PHASE_KAFKA:
            self.lake.commit(end["lake"])
            return
        self.kafka.commit(end["kafka"])
        parts = self._planned.pop(_key(end), None)
        if parts:
            log.info(
                "%s: batch up to %s: %s",
                self.options.describe(),
                end["kafka"],
                _batch_counts(self.options, parts).as_dict(),
            )

    def stop(self) -> None:
        self.kafka.stop()

    # -- executors ----------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if isinstance(partition, SlicePartition):
            rows = self.lake.read(partition)
            return as_mapped(self.options, rows, PHASE_LAKE) if self.options.mapped else rows
        if isinstance(partition, KafkaInputPartition):
            rows = read_kafka_range(self.options, partition.range, partition.planned_micros)
            return as_mapped(self.options, rows, PHASE_KAFKA) if self.options.mapped else rows
        return iter(())  # Spark reads a placeholder partition when there are none


def as_mapped(
    options: HybridSourceOptions, batches: Iterator[pa.RecordBatch], phase: str
) -> Iterator[pa.RecordBatch]:
    """One side's batches as rows of :func:`mapped_schema`: its own columns under its
    prefix, the other side's null, and the phase."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(
        mapped_schema(source_schema(options.lake), options.decoder), timezone="UTC"
    )
    prefix = LAKE_FIELD_PREFIX if phase == PHASE_LAKE else KAFKA_FIELD_PREFIX
    for batch in batches:
        n = batch.num_rows
        arrays = []
        for f in schema:
            if f.name == PHASE_COLUMN:
                arrays.append(pa.array([phase] * n, type=f.type))
            elif f.name.startswith(prefix) and f.name[len(prefix) :] in batch.schema.names:
                column = batch.column(f.name[len(prefix) :])
                arrays.append(column if column.type == f.type else column.cast(f.type))
            else:
                arrays.append(pa.nulls(n, type=f.type))
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def _key(offset: dict) -> str:
    import json

    return json.dumps(offset, sort_keys=True)


def _batch_counts(options: HybridSourceOptions, parts: list[KafkaInputPartition]) -> HybridCounts:
    """Sum the counts files of the ranges of one batch (missing files count as zero)."""
    import json

    from kappaplus.connectors.hybrid.reader import COUNTS_DIR
    from kappaplus.connectors.lake.filesystems import filesystem_for

    fs, root = filesystem_for(options.dead_letter_path)
    total = HybridCounts()
    for part in parts:
        path = f"{root}/{COUNTS_DIR}/{range_name(options, part.range)}.json"
        try:
            with fs.open_input_stream(path) as stream:
                data = json.loads(stream.read())
        except (FileNotFoundError, OSError):
            continue
        total.add(HybridCounts(data["records"], data["delivered"], data["skipped"], data["dead"]))
    return total


def _first_timestamps(oracle: Any, positions: dict[tuple[str, int], int]) -> dict:
    """The record timestamp (ms) at each position, for the partitions that answer in time."""
    from confluent_kafka import TopicPartition

    consumer = oracle.consumer()
    consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
    found: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + 5.0
    try:
        while len(found) < len(positions) and time.monotonic() < deadline:
            for message in consumer.consume(100, 0.1):
                tp = (message.topic(), message.partition())
                if tp not in positions or tp in found:
                    continue
                error = message.error()
                if error is None:
                    found[tp] = message.timestamp()[1]
                elif error.code() == PARTITION_EOF:
                    positions = {k: v for k, v in positions.items() if k != tp}
    finally:
        consumer.unassign()
    return found


def hybrid_stream_options(
    spark: SparkSession,
    *,
    table: str,
    event_time_column: str,
    cutoff: Any,
    decoder: DecoderSpec,
    start: Any = None,
    lateness: str | int = DEFAULT_LATENESS,
    max_event_time_per_trigger: str | None = None,
    dead_letter_path: str | None = None,
    job_name: str | None = None,
    iceberg: dict[str, Any] | None = None,
    delta: dict[str, Any] | None = None,
    event_time_min: Any = None,
    event_time_max: Any = None,
    max_future: str | None = None,
    mapped: bool = False,
    max_ahead: str | None = None,
    **options: Any,
) -> dict[str, str]:
    """The string options of ``format("kappa_hybrid")``, validated in the caller.

    ``iceberg``: the lake is an Iceberg table: ``{"catalog": <pyiceberg catalog
    properties or None>, "snapshot": <id or None>}`` (its snapshot is pinned in the lake's
    ``manifestDir``, :func:`~kappaplus.connectors.iceberg.catalog.pin_snapshot`).
    ``delta``: the lake is a Delta table at ``table`` (a location or a registered name):
    ``{"storage_options": <delta-rs storage options or None>, "version": <or None>}`` (its
    version is pinned in the lake's ``manifestDir``,
    :func:`~kappaplus.connectors.delta.table.pin_version`).
    ``event_time_min`` / ``event_time_max`` / ``max_future`` / ``max_ahead``: the input's
    event-time bounds; a Kafka record outside them (or too far ahead of its peers) is a dead
    letter with its reason.
    ``mapped``: deliver each side in its own shape (:func:`~kappaplus.connectors.hybrid.
    options.mapped_schema`) for the caller to map, not Kafka's events conformed to the lake's.

    Keyword options are routed by name: Hive source options Kafka does not have
    (``maxRowsPerTrigger``, ``partitionTimeFormat``, ``manifestDir``, ``maxLateness``,
    ``targetRowsPerTrigger``, ...: :data:`LAKE_ONLY_KEYS`) or ``lake.``-prefixed names go
    to the lake; everything else (``bootstrap``, ``subscribe``, ``maxOffsetsPerTrigger``,
    ``failOnDataLoss``, ``kafka.*``) to Kafka.
    """
    lake_extra, kafka_extra = _route_options(options)
    lake = _lake_options(
        spark,
        table,
        iceberg,
        delta,
        event_time_column=event_time_column,
        start=start,
        end=cutoff,
        max_event_time_per_trigger=max_event_time_per_trigger,
        **lake_extra,
    )
    lake.pop("endingTimestamp", None)
    resolved = {f"lake.{k}": v for k, v in lake.items()}
    resolved.update(spark_options(kafka_extra))
    resolved.update(
        {
            "cutoff": str(cutoff),
            "lateness": str(lateness),
            "decoder": decoder_to_json(decoder),
            "deadLetterPath": str(dead_letter_path or _default_dead_letter_path(table)),
        }
    )
    given = {
        "jobName": job_name or None,
        "mapped": "true" if mapped else None,
        "eventTimeMin": event_time_min,
        "eventTimeMax": event_time_max,
        "maxFuture": max_future,
        "maxAhead": max_ahead,
    }
    resolved.update({key: str(value) for key, value in given.items() if value is not None})
    HybridSourceOptions.parse(resolved)  # fail here, with the option's name
    return resolved


def _default_dead_letter_path(table: str) -> Path:
    """Where a bootstrap's dead letters go by default: under the state directory, named
    after the table (a Delta lake is named by its path: never a path inside the table)."""
    return state_dir() / "hybrid-source" / "dead-letters" / safe_file_part(table.replace(".", "_"))


def _route_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(lake options, Kafka options)``: ``lake.``-prefixed names and the lake's own
    (:data:`LAKE_ONLY_KEYS`) to the lake, the rest to Kafka."""
    lake_extra: dict[str, Any] = {}
    kafka_extra: dict[str, Any] = {}
    for key, value in options.items():
        if key.lower().startswith("lake."):
            lake_extra[key[len("lake.") :]] = value
        elif key.lower() in LAKE_ONLY_KEYS:
            lake_extra[key] = value
        else:
            kafka_extra[key] = value
    return lake_extra, kafka_extra


def _lake_options(
    spark: SparkSession,
    table: str,
    iceberg: dict[str, Any] | None,
    delta: dict[str, Any] | None,
    **options: Any,
) -> dict[str, str]:
    """The lake side's validated options: a Delta, an Iceberg or a Hive table."""
    if delta is not None:
        from kappaplus.connectors.delta.table import delta_lake_options

        return delta_lake_options(
            table, delta.get("storage_options"), delta.get("version"), **options
        )
    if iceberg is not None:
        from kappaplus.connectors.iceberg.catalog import iceberg_lake_options

        return iceberg_lake_options(
            table, iceberg.get("catalog"), iceberg.get("snapshot"), **options
        )
    return hive_stream_options(resolve_table(spark, table), **options)


def read_hybrid_stream(
    spark: SparkSession,
    *,
    table: str,
    event_time_column: str,
    cutoff: Any,
    decoder: DecoderSpec,
    start: Any = None,
    lateness: str | int = DEFAULT_LATENESS,
    max_event_time_per_trigger: str | None = None,
    watermark_delay: str | None = None,
    dead_letter_path: str | None = None,
    job_name: str | None = None,
    **options: Any,
) -> DataFrame:
    """A streaming DataFrame of the lake table for ``[start, cutoff)``, then of Kafka.

    - ``table``: the lake table (catalog name); its schema is the output schema.
    - ``cutoff``: the lake owns event times before it, Kafka the rest (timestamp).
    - ``decoder``: how Kafka values become events (same event-time column as the lake).
    - ``lateness``: how much earlier than its event time a Kafka record's timestamp may be;
      Kafka is read from ``cutoff - lateness``.
    - ``max_event_time_per_trigger``: the lake's event-time slice per micro-batch.
    - ``watermark_delay``: applied here (``withWatermark`` on the event-time column).
    - ``dead_letter_path``: where Kafka records that fail are written, with counts under
      ``_counts/`` (:func:`hybrid_counts`); default under the state directory.
    - Kafka options (``bootstrap``, ``subscribe``, ``kafka.*``, ``maxOffsetsPerTrigger``,
      ``failOnDataLoss``) and lake options as keywords, see :func:`hybrid_stream_options`.
    """
    resolved = hybrid_stream_options(
        spark,
        table=table,
        event_time_column=event_time_column,
        cutoff=cutoff,
        decoder=decoder,
        start=start,
        lateness=lateness,
        max_event_time_per_trigger=max_event_time_per_trigger,
        dead_letter_path=dead_letter_path,
        job_name=job_name,
        **options,
    )
    spark.dataSource.register(HybridDataSource)
    df = spark.readStream.format(SHORT_NAME).options(**resolved).load()
    if watermark_delay is None:
        return df
    from kappaplus.core.event_time import apply_watermark

    return apply_watermark(df, event_time_column, parse_duration(watermark_delay))


__all__ = [
    "HybridCounts",
    "HybridDataSource",
    "HybridSourceOptions",
    "HybridStreamReader",
    "hybrid_counts",
    "hybrid_stream_options",
    "read_hybrid_stream",
]
