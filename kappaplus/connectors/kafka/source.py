"""The reading half of the ``kappa_kafka`` data source: streaming and batch readers.

What the source delivers (the schema of Spark's built-in Kafka source), its options (Spark's
names) and its offsets are described in :mod:`kappaplus.connectors.kafka`, which also holds the
data source itself (reading and writing), ``read_kafka_stream`` and ``read_kafka``; the writing
half is :mod:`kappaplus.connectors.kafka.sink`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    SupportsTriggerAvailableNow,
)

from kappaplus.connectors.kafka.alignment import AlignedBatch, RecordTimes, align
from kappaplus.connectors.kafka.offsets import (
    OffsetOracle,
    Offsets,
    TopicPartitionKey,
    fair_split,
    from_json,
    to_json,
)
from kappaplus.connectors.kafka.options import EARLIEST, LATEST, KafkaSourceOptions
from kappaplus.connectors.kafka.read_pass import ReadPass
from kappaplus.connectors.kafka.reader import (
    OffsetRange,
    read_range,
    report_data_loss,
)
from kappaplus.core.draining import drain_requested
from kappaplus.core.errors import KafkaError

if TYPE_CHECKING:
    import pyarrow as pa

log = logging.getLogger(__name__)

SHORT_NAME = "kappa_kafka"


class KafkaInputPartition(InputPartition):
    """One Spark task: a slice ``[from, until)`` of one topic-partition."""

    def __init__(self, range: OffsetRange) -> None:  # noqa: A002 - Spark's vocabulary
        super().__init__(range)
        self.range = range
        self.planned_micros: int | None = None
        """When the batch was planned (the hybrid source's ``maxFuture`` "now")."""


def split_ranges(ranges: Sequence[OffsetRange], min_partitions: int | None) -> list[OffsetRange]:
    """Split offset ranges so there are at least ``min_partitions`` (sizes kept proportional).

    >>> [r.size for r in split_ranges([OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 0, 2)], 4)]
    [4, 3, 3, 2]
    """
    ranges = [r for r in ranges if r.size > 0]
    if not min_partitions or len(ranges) >= min_partitions:
        return list(ranges)
    total = sum(r.size for r in ranges)
    out: list[OffsetRange] = []
    for r in ranges:
        parts = max(1, min(r.size, round(r.size / total * min_partitions)))
        step, extra = divmod(r.size, parts)
        start = r.from_offset
        for index in range(parts):
            end = start + step + (1 if index < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, start, end))
            start = end
    return out


def plan_ranges(
    options: KafkaSourceOptions,
    oracle: OffsetOracle,
    start: Offsets,
    end: Offsets,
) -> list[OffsetRange]:
    """The offset ranges of a batch from ``start`` to ``end``, applying failOnDataLoss rules.

    - a partition only in ``end`` is new: read from its earliest offset;
    - ``end < start`` (the partition was recreated or truncated): read ``[earliest, end)``;
    - ``start < earliest`` (retention deleted unread records): read from earliest.
    The last two are data loss: an error if failOnDataLoss, else a warning.
    """
    lows = oracle.earliest(sorted(end)) if end else {}
    ranges = []
    for tp in sorted(end):
        topic, partition = tp
        until = end[tp]
        low = lows[tp]
        begin = start.get(tp)
        if begin is None:
            begin = low
        elif until < begin:
            report_data_loss(
                options,
                f"{topic}-{partition}: offset went back from {begin} to {until} (the topic was "
                f"recreated or truncated); reading [{low}, {until}) instead",
            )
            begin = low
        elif begin < low:
            report_data_loss(
                options,
                f"{topic}-{partition}: offsets [{begin}, {min(low, until)}) were deleted before "
                f"they were read (earliest is now {low})",
            )
            begin = low
        if until > begin:
            ranges.append(OffsetRange(topic, partition, begin, until))
    return split_ranges(ranges, options.min_partitions)


def _resolve_spec_offsets(
    options: KafkaSourceOptions, oracle: OffsetOracle, tps: list[TopicPartitionKey]
) -> Offsets:
    """The starting offsets of ``tps`` according to startingOffsets / startingTimestamp."""
    spec = options.starting
    ends = oracle.end_offsets(tps)
    lows = oracle.earliest(tps)
    if spec.kind == "earliest":
        return lows
    if spec.kind == "latest":
        return ends
    if spec.kind == "timestamp":
        assert spec.timestamp_ms is not None
        return oracle.offsets_for_timestamp(tps, spec.timestamp_ms, ends)
    result: Offsets = {}
    for tp in tps:
        wanted = spec.per_partition.get(tp, LATEST)
        if wanted == EARLIEST:
            result[tp] = lows[tp]
        elif wanted == LATEST:
            result[tp] = ends[tp]
        else:
            if wanted > ends[tp] or wanted < lows[tp]:
                report_data_loss(
                    options,
                    f"startingOffsets {tp[0]}-{tp[1]} = {wanted} is outside [{lows[tp]}, "
                    f"{ends[tp]}]; using {min(max(wanted, lows[tp]), ends[tp])}",
                )
                wanted = min(max(wanted, lows[tp]), ends[tp])
            result[tp] = wanted
    missing = sorted(set(spec.per_partition) - set(tps))
    if missing:
        report_data_loss(options, f"startingOffsets names partitions that do not exist: {missing}")
    return result


def _ending_caps(options: KafkaSourceOptions, ends: Offsets) -> Offsets:
    """Per-partition upper bounds from endingOffsets (``latest``: the current end)."""
    if not options.has_ending or options.ending.kind == "latest":
        return dict(ends)
    caps = {}
    for tp, end in ends.items():
        wanted = options.ending.per_partition.get(tp, LATEST)
        caps[tp] = end if wanted == LATEST else min(end, wanted)
    return caps


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batch reader; its driver methods run in one long-lived process per query."""

    def __init__(self, options: KafkaSourceOptions, read_pass: ReadPass | None = None) -> None:
        self.options = options
        self.read_pass = read_pass
        self._oracle: OffsetOracle | None = None
        self._target: Offsets | None = None
        self._latest: Offsets | None = None
        self._stream_caps: Offsets | None = None
        self._times: RecordTimes | None = None
        self._cut_ms: int | None = None  # the last aligned batch's cut (record time, ms)
        self._warned: set[str] = set()
        self.alignment_counts = {"aligned_batches": 0, "out_of_order": 0, "skewed": 0}

    @property
    def oracle(self) -> OffsetOracle:
        if self._oracle is None:
            self._oracle = OffsetOracle(self.options)
        return self._oracle

    def initialOffset(self) -> dict[str, Any]:
        tps = self.oracle.topic_partitions()
        offsets = _resolve_spec_offsets(self.options, self.oracle, tps)
        log.info("%s: initial offsets %s", self.options.describe(), to_json(offsets))
        return to_json(offsets)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.max_offsets_per_trigger:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        tps = self.oracle.topic_partitions()
        self._target = _ending_caps(self.options, self.oracle.end_offsets(tps))
        log.info("%s: AvailableNow target %s", self.options.describe(), to_json(self._target))

    def _fixed_endings(self, tps: list[TopicPartitionKey]) -> Offsets:
        """endingOffsets given as numbers, per partition (a bounded stream)."""
        if not self.options.has_ending or self.options.ending.kind == "latest":
            return {}
        return {
            tp: o
            for tp, o in self.options.ending.per_partition.items()
            if o != LATEST and tp in tps
        }

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        if drain_requested(self.options.drain_file):
            return start  # the run is stopping: the batch under way is the last
        start_offsets = from_json(start)
        oracle = self.oracle
        tps = sorted(self._target) if self._target is not None else oracle.topic_partitions()
        present = set(oracle.topic_partitions()) if self._target is not None else set(tps)
        for tp in sorted(set(start_offsets) - present):
            report_data_loss(
                self.options,
                f"{tp[0]}-{tp[1]}: the partition no longer exists (was at offset "
                f"{start_offsets[tp]}); dropping it",
            )
        tps = [tp for tp in tps if tp in present]
        # a stream's next batch: what is there now (not what arrives while the probe reads)
        ends = oracle.end_offsets(tps, known=start_offsets, as_of_call=self._target is None)
        self._latest = dict(ends)
        caps = self._target if self._target is not None else {}
        fixed = self._fixed_endings(tps)
        lows: Offsets | None = None
        bases: Offsets = {}
        targets: Offsets = {}
        for tp in tps:
            end = ends[tp]
            if tp in caps:
                end = min(end, caps[tp])
            if tp in fixed:
                end = min(end, fixed[tp])
            begin = start_offsets.get(tp)
            if begin is None or end < begin:
                if lows is None:
                    lows = oracle.earliest(tps)
                if begin is not None:
                    # Report now (failOnDataLoss=true stops here, naming the offsets).
                    report_data_loss(
                        self.options,
                        f"{tp[0]}-{tp[1]}: offset went back from {begin} to {end} (the topic "
                        f"was recreated or truncated)",
                    )
                begin = lows[tp]
            end = max(end, begin)
            bases[tp] = begin
            targets[tp] = end
        if isinstance(limit, ReadMaxRows):
            behind = [tp for tp in tps if targets[tp] > bases[tp]]
            if self.options.align_partitions and len(behind) > 1:
                result = self._aligned(bases, targets, limit.max_rows)
            else:
                shares = fair_split({tp: targets[tp] - bases[tp] for tp in tps}, limit.max_rows)
                result = {tp: bases[tp] + shares[tp] for tp in tps}
        else:
            result = targets
        return to_json(result)

    def _aligned(self, bases: Offsets, targets: Offsets, limit: int) -> Offsets:
        """End offsets cutting every partition at one record time (see
        :mod:`kappaplus.connectors.kafka.alignment`); logs what the cut saw."""
        if self._times is None:
            self._times = RecordTimes(
                self.options.client, self.options.poll_timeout_ms, self.options.describe()
            )
        plan = align(
            bases,
            targets,
            limit,
            self._times,
            previous_cut_ms=self._cut_ms,
            max_skew_ms=self.options.alignment_max_skew // 1000,
        )
        self._report(plan)
        if plan.cut_ms is not None:
            self._cut_ms = plan.cut_ms
        return plan.ends

    def _report(self, plan: AlignedBatch) -> None:
        what = self.options.describe()
        counts = self.alignment_counts
        if plan.cut_ms is not None:
            counts["aligned_batches"] += 1
            log.debug(
                "%s: aligned batch ends at record time %d ms: %s",
                what,
                plan.cut_ms,
                to_json(plan.ends),
            )
        for tp in plan.untimed:
            self._warn_once(
                f"untimed {tp}",
                f"{what}: {tp[0]}-{tp[1]} has records without a timestamp: it is read at its "
                "fair share of each batch, not aligned with the other partitions",
            )
        if plan.fallback:
            self._warn_once(
                "fallback",
                f"{what}: more than maxOffsetsPerTrigger records share one timestamp: that "
                "step is split fairly across partitions",
            )
        out_of_order = sum(plan.out_of_order.values())
        skewed = sum(plan.skewed.values())
        counts["out_of_order"] += out_of_order
        counts["skewed"] += skewed
        if out_of_order or skewed:
            self._warn_once(
                "order",
                f"{what}: record timestamps out of order within a partition (CreateTime, "
                f"clock skew): {out_of_order} record(s) stamped before the previous batch's "
                f"cut, {skewed} stamped more than alignmentMaxSkew ahead of their partition; "
                "such rows can be late (counted in the run, logged once)",
            )
            log.debug("%s: out of order %s, skewed %s", what, plan.out_of_order, plan.skewed)

    def _warn_once(self, key: str, message: str) -> None:
        if key in self._warned:
            log.debug("%s", message)
            return
        self._warned.add(key)
        log.warning("%s", message)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        return to_json(self._latest) if self._latest is not None else None

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        ranges = plan_ranges(self.options, self.oracle, from_json(start), from_json(end))
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.read_pass)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        if self._oracle is not None:
            self._oracle.close()
            self._oracle = None
        if self._times is not None:
            if self.alignment_counts["aligned_batches"]:
                log.info(
                    "%s: %d aligned batch(es); read %d record timestamps in %.1f s; %d record(s) "
                    "out of order, %d skewed",
                    self.options.describe(),
                    self.alignment_counts["aligned_batches"],
                    self._times.records_read,
                    self._times.seconds,
                    self.alignment_counts["out_of_order"],
                    self.alignment_counts["skewed"],
                )
            self._times.close()
            self._times = None


class KafkaBatchReader(DataSourceReader):
    """Batch read of ``[startingOffsets, endingOffsets)`` (defaults: earliest, latest)."""

    def __init__(self, options: KafkaSourceOptions, read_pass: ReadPass | None = None) -> None:
        self.options = options
        self.read_pass = read_pass

    def partitions(self) -> Sequence[InputPartition]:
        oracle = OffsetOracle(self.options)
        try:
            tps = oracle.topic_partitions()
            start = _resolve_spec_offsets(self.options, oracle, tps)
            end = _ending_caps(self.options, oracle.end_offsets(tps))
            end = {tp: max(end[tp], start[tp]) for tp in tps}
            ranges = plan_ranges(self.options, oracle, start, end)
        finally:
            oracle.close()
        return [KafkaInputPartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition, self.read_pass)


def read_partition(
    options: KafkaSourceOptions, partition: InputPartition, read_pass: ReadPass | None
) -> Iterator[pa.RecordBatch]:
    """A partition's records, through ``read_pass`` when there is one."""
    if not isinstance(partition, KafkaInputPartition):
        return iter(())  # Spark reads a placeholder partition when there are none
    batches = read_range(options, partition.range)
    return batches if read_pass is None else read_pass(batches)


def spark_options(options: Mapping[str, Any]) -> dict[str, str]:
    """Python values -> Spark option strings (bools lower-case, dicts/lists as JSON).

    ``bootstrap=`` is shorthand for ``kafka.bootstrap.servers``.
    """
    out: dict[str, str] = {}
    for key, value in options.items():
        if value is None:
            continue
        name = "kafka.bootstrap.servers" if key in ("bootstrap", "bootstrap_servers") else key
        if isinstance(value, bool):
            out[name] = "true" if value else "false"
        elif isinstance(value, dict | list):
            out[name] = json.dumps(value)
        else:
            out[name] = str(value)
    return out


__all__ = [
    "SHORT_NAME",
    "KafkaBatchReader",
    "KafkaError",
    "KafkaInputPartition",
    "KafkaStreamReader",
    "spark_options",
]
